"""RouterBench in its own column layout (CSV, Parquet, the official pickle, or a directory).

Columns used: one 0/1 correctness column per model, ``<model>|total_cost`` (USD per query),
``prompt`` (a Python-list string such as ``"['...']"``, parsed with ``ast.literal_eval``),
``eval_name`` (-> ``groups``) and ``sample_id`` (-> query ids; repeats are renamed
``<id>#2`` ...). Other columns (``<model>|model_response``, ``oracle_model_to_route_to``, an
unnamed index) are ignored.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from torchroute.buildable import buildable
from torchroute.data.generic import read_frame
from torchroute.data.options import checked_options
from torchroute.data.splits import (
    DefaultSplit,
    kept_table,
    missing_rows,
    split_from_name,
    unique_ids,
)
from torchroute.data.table import RoutingTable, TableError
from torchroute.io import not_a_file

REQUIRED_COLUMNS = ("sample_id", "prompt", "eval_name")
_SUFFIXES = (".csv", ".parquet", ".pq", ".pkl", ".pickle")


def parse_prompt(value: object, *, where: str = "prompt") -> str:
    """The prompt text from RouterBench's list string: ``"['a', 'b']"`` -> ``"a\\n\\nb"``.

    Plain strings that do not start with ``[`` are returned as they are; a list string
    that does not parse to a list of strings raises :class:`TableError` naming ``where``.
    """
    if isinstance(value, (list, tuple)):
        parts = value
    elif isinstance(value, str) and value.lstrip().startswith("["):
        try:
            parts = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError) as err:
            raise TableError(
                f"{where}: malformed prompt, expected a Python list of strings such as "
                f"\"['...']\", got {value[:60]!r} ({type(err).__name__})"
            ) from err
        if not isinstance(parts, (list, tuple)):
            raise TableError(f"{where}: prompt parses to {type(parts).__name__}, expected a list")
    elif isinstance(value, str):
        return value
    else:
        raise TableError(f"{where}: prompt must be a string, got {type(value).__name__}")
    if not all(isinstance(p, str) for p in parts):
        raise TableError(f"{where}: prompt list must hold strings only, got {value!r:.60}")
    return "\n\n".join(parts)


def routerbench_files(path: Path) -> list[Path]:
    """The table files of a RouterBench directory, sorted by name."""
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in _SUFFIXES)
    if not files:
        raise TableError(f"{path}: no RouterBench files ({', '.join(_SUFFIXES)}) in the directory")
    return files


@checked_options
@buildable
def load_routerbench(
    path: str | Path,
    *,
    models: Sequence[str] | None = None,
    drop_missing: bool = False,
    cost_suffix: str = "|total_cost",
    default_split: DefaultSplit = "random",
    test_fraction: float = 0.3,
    val_fraction: float = 0.0,
    seed: int = 0,
    trust_pickle: bool = False,
) -> RoutingTable:
    """Load RouterBench as a routing table.

    The split of each file comes from its name (``*_train.csv`` -> train, ``*_test.csv`` ->
    test); files without one (the official pickle) get ``default_split`` (``"random"``: a
    seeded ``test_fraction`` of their queries goes to test, the rest to train). Then
    ``val_fraction`` of the train queries moves to ``val`` (seeded, deterministic).

    Pickles run code when loaded, so ``.pkl``/``.pickle`` files (the official
    ``routerbench_*.pkl``) are read only with ``trust_pickle=True``; set it only for files
    from a trusted source (or convert them to Parquet/CSV once).

    Args:
        path: a ``.csv``, ``.parquet`` or pandas ``.pkl`` file, or a directory of them
            (such as ``<shared>/data/routerbench/`` with ``*_train.csv`` / ``*_test.csv``).
        models: the model columns to use; default: every column ``c`` that has a
            ``c + cost_suffix`` column (in file order).
        drop_missing: drop queries with a blank correctness or cost cell, with a warning
            giving the count, instead of raising (RouterBench's ARC part has 154 blanks).
        cost_suffix: suffix of the per-query cost columns.
        default_split: the split of files whose name has no split marker (see above).
        test_fraction: with ``default_split="random"``, the seeded share sent to test.
        val_fraction: the share of train moved to val.
        seed: the seed of those random splits.
        trust_pickle: allow reading pickles (see above); without it a pickle raises
            :class:`TableError` before anything in it runs.

    Returns:
        ``scores`` / ``costs`` ``[n, K]``, ``text`` (joined prompt), ``groups`` (eval_name).
    """
    path = Path(path)
    if path.is_dir():
        files = routerbench_files(path)
    elif path.is_file():
        files = [path]
    else:
        raise TableError(f"{path}: {not_a_file(path)}; expected a file or a folder of them")
    frames = [read_frame(f, trust_pickle=trust_pickle) for f in files]
    source = str(path)
    arms = _model_columns(frames, files, models, cost_suffix)
    scores, costs, ids, text, groups, marks = [], [], [], [], [], []
    for f, frame in zip(files, frames, strict=True):
        scores.append(_numeric(frame, arms, f))
        costs.append(_numeric(frame, [a + cost_suffix for a in arms], f))
        ids += frame["sample_id"].astype(str).tolist()
        text += [parse_prompt(p, where=f"{f} row {i}") for i, p in enumerate(frame["prompt"])]
        groups += frame["eval_name"].astype(str).tolist()
        marks += [split_from_name(f.stem)] * len(frame)
    score, cost = np.concatenate(scores), np.concatenate(costs)
    ids = list(unique_ids(ids))
    keep = missing_rows(score, cost, arms, ids, source=source, drop_missing=drop_missing)
    return kept_table(
        score,
        cost,
        arms,
        ids,
        text,
        groups,
        marks,
        keep,
        source,
        default_split=default_split,
        test_fraction=test_fraction,
        val_fraction=val_fraction,
        seed=seed,
    )


def _model_columns(
    frames: list[pd.DataFrame],
    files: list[Path],
    models: Sequence[str] | None,
    cost_suffix: str,
) -> list[str]:
    for f, frame in zip(files, frames, strict=True):
        cols = [str(c) for c in frame.columns]
        absent = [c for c in REQUIRED_COLUMNS if c not in cols]
        if absent:
            raise TableError(f"{f}: missing RouterBench columns {absent}")
        if models is None:
            arms = [c for c in cols if not c.endswith(cost_suffix) and c + cost_suffix in cols]
            if not arms:
                raise TableError(
                    f"{f}: no model columns (a model column needs a '<model>{cost_suffix}' "
                    "cost column beside it)"
                )
            models = arms
        no_model = [m for m in models if m not in cols]
        no_cost = [m + cost_suffix for m in models if m + cost_suffix not in cols]
        if no_model or no_cost:
            raise TableError(
                f"{f}: missing model correctness columns {no_model} and cost columns {no_cost}"
            )
    return list(models or [])


def _numeric(frame: pd.DataFrame, columns: list[str], file: Path) -> np.ndarray:
    block = frame[columns]
    for c in columns:
        if not pd.api.types.is_numeric_dtype(block[c]) and not block[c].isna().all():
            raise TableError(f"{file}: column {c!r} must be numeric, got {block[c].dtype}")
    return block.to_numpy(dtype=np.float64)
