"""Open LLM Leaderboard v2 correctness (the pickle distributed with CARROT) plus model costs.

The pickle maps each sub-benchmark (``leaderboard_bbh_navigate``, ``leaderboard_mmlu_pro``,
...) to ``{"correctness": ndarray [n_models, n_questions] of 0/1, "models": [name, ...]}``.
The file is read with a restricted unpickler (:mod:`torchroute.data.safe_pickle`) that
builds nothing but dicts, lists, strings and numpy arrays, so no code of the file runs and
no trust is needed. Model names such as ``open-llm-leaderboard/01-ai__Yi-34B-Chat-details`` become
``Yi-34B-Chat``. ``leaderboard_ifeval`` stores a dict of instruction/prompt-level arrays
instead of one matrix and is skipped (with a warning).

There is no question text: each query's context is its sub-benchmark, stored both in
``groups`` and, as a stand-in for text, in ``text`` (e.g. ``"leaderboard_gpqa_main"``).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from torchroute.buildable import buildable
from torchroute.data.generic import model_costs, read_costs
from torchroute.data.options import checked_options
from torchroute.data.safe_pickle import load_data_pickle
from torchroute.data.splits import missing_rows, random_split
from torchroute.data.table import RoutingTable, TableError


def short_model_name(name: str) -> str:
    """``open-llm-leaderboard/org__Model-details`` -> ``Model``; other names unchanged."""
    base = name.split("/")[-1]
    base = re.sub(r"-details$", "", base)
    return base.split("__", 1)[1] if "__" in base else base


@checked_options
@buildable
def load_openllm_leaderboard(
    pickle_path: str | Path,
    costs_csv: str | Path | None = None,
    *,
    benchmarks: Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    fractions: Sequence[float] = (0.6, 0.1, 0.3),
    seed: int = 0,
    drop_missing: bool = False,
    trust_pickle: bool = False,
) -> RoutingTable:
    """Load the leaderboard correctness as a routing table with a seeded random split.

    The file is a pickle of plain data: it is read by an unpickler that builds only dicts,
    lists, strings and numpy arrays and refuses anything else, so nothing in it runs.

    Args:
        pickle_path: the ``new_leaderboard_processed_*.pickle`` file.
        costs_csv: CSV with a ``model`` column and a cost column (``costs_from_paper.csv``:
            ``avg_cost_usd``, one average USD cost per model, used for every query of that
            model); None gives zero costs.
        benchmarks: sub-benchmarks to include (full keys); default: every matrix entry.
        models: arms (short names); default: the models common to every included benchmark
            (MMLU-Pro has 18 of the 19) and, with ``costs_csv``, priced in it (models
            without a price are left out with a warning). Explicit models must be in all.
        fractions: shares of (train, val, test) for the random split.
        seed: the split seed.
        drop_missing: drop questions with NaN correctness (warning) instead of raising.
        trust_pickle: allow a pickled ``costs_csv`` (unpickling runs code: a file you trust
            only). ``pickle_path`` itself needs no trust (see above).

    Returns:
        ``scores`` ``[n, K]`` 0/1, ``costs`` ``[n, K]``, ``groups`` = ``text`` = benchmark,
        ``query_ids`` ``"<benchmark>:<index>"``.
    """
    pickle_path = Path(pickle_path)
    data = load_data_pickle(pickle_path)
    if not isinstance(data, dict):
        raise TableError(f"{pickle_path}: expected a dict benchmark -> entry, got {type(data)}")
    matrices = _matrices(data, pickle_path, benchmarks)
    common = list(matrices[next(iter(matrices))][1])
    for _, names in matrices.values():
        common = [m for m in common if m in names]
    if models is None:
        arms = common
        if costs_csv is not None:
            priced = _priced(arms, costs_csv, trust_pickle)
            if len(priced) < len(arms):
                warnings.warn(
                    f"{costs_csv}: no cost for {[m for m in arms if m not in priced]}; "
                    "those models are left out",
                    stacklevel=2,
                )
            arms = priced
        if not arms:
            raise TableError(f"{pickle_path}: no model is common to the included benchmarks")
    else:
        arms = [str(m) for m in models]
        for bench, (_, names) in matrices.items():
            absent = [m for m in arms if m not in names]
            if absent:
                raise TableError(f"{pickle_path}: benchmark {bench!r} has no models {absent}")
    blocks, ids, groups = [], [], []
    for bench, (corr, names) in matrices.items():
        rows = [names.index(m) for m in arms]
        blocks.append(corr[rows].T)  # [n_questions, K]
        ids += [f"{bench}:{i}" for i in range(corr.shape[1])]
        groups += [bench] * corr.shape[1]
    scores = np.concatenate(blocks).astype(np.float64)
    per_model = model_costs(costs_csv, arms, trust_pickle=trust_pickle)
    costs = np.broadcast_to(per_model, scores.shape).copy()
    keep = missing_rows(
        scores, costs, arms, ids, source=str(pickle_path), drop_missing=drop_missing
    )
    kept_groups = tuple(g for g, k in zip(groups, keep, strict=True) if k)
    return RoutingTable(
        scores=scores[keep],
        costs=costs[keep],
        arm_names=tuple(arms),
        query_ids=tuple(q for q, k in zip(ids, keep, strict=True) if k),
        split=random_split(int(keep.sum()), fractions, seed),
        text=kept_groups,
        groups=kept_groups,
        source=str(pickle_path),
    )


def _matrices(
    data: dict, path: Path, benchmarks: Sequence[str] | None
) -> dict[str, tuple[np.ndarray, list[str]]]:
    """benchmark -> (correctness ``[n_models, n_questions]``, short model names)."""
    if benchmarks is not None:
        unknown = [b for b in benchmarks if b not in data]
        if unknown:
            raise TableError(f"{path}: unknown benchmarks {unknown}; it has {sorted(data)}")
    out: dict[str, tuple[np.ndarray, list[str]]] = {}
    for bench in benchmarks if benchmarks is not None else list(data):
        entry = data[bench]
        if not isinstance(entry, dict) or "correctness" not in entry or "models" not in entry:
            raise TableError(f"{path}: entry {bench!r} needs 'correctness' and 'models'")
        corr = entry["correctness"]
        if isinstance(corr, dict):
            warnings.warn(
                f"{path}: skipping {bench!r} (its correctness is a dict of "
                f"{sorted(corr)}, not one [models x questions] matrix)",
                stacklevel=3,
            )
            continue
        names = [short_model_name(str(m)) for m in entry["models"]]
        try:
            corr = np.asarray(corr, dtype=np.float64)
        except (ValueError, TypeError) as err:
            raise TableError(_not_numeric(path, bench, corr, names)) from err
        if corr.ndim != 2 or corr.shape[0] != len(names):
            raise TableError(
                f"{path}: {bench!r} correctness must be [n_models={len(names)}, n_questions], "
                f"got {corr.shape}"
            )
        out[bench] = (corr, names)
    if not out:
        raise TableError(f"{path}: no benchmark with a correctness matrix was included")
    return out


def _not_numeric(path: Path, bench: str, corr: Any, names: list[str]) -> str:
    """The message for a correctness entry that is not a numeric matrix: what and where."""
    expected = (
        f"{path}: {bench!r} correctness must be a numeric [n_models={len(names)}, n_questions] "
        "matrix of 0/1 scores (NaN for missing)"
    )
    try:
        cells = [list(row) for row in corr]
    except TypeError:
        return f"{expected}, got {type(corr).__name__}"
    if len({len(row) for row in cells}) > 1:
        return f"{expected}, got rows of different lengths {sorted({len(r) for r in cells})}"
    for i, row in enumerate(cells):
        for j, value in enumerate(row):
            try:
                float(value if value is not None else "nan")
            except (TypeError, ValueError):
                model = names[i] if i < len(names) else f"row {i}"
                return f"{expected}, got {value!r} for model {model!r}, question {j}"
    return f"{expected}, got {type(corr).__name__}"


def _priced(models: list[str], costs_csv: str | Path, trust_pickle: bool) -> list[str]:
    lookup = read_costs(costs_csv, trust_pickle=trust_pickle)
    return [m for m in models if m in lookup or m.split("/")[-1] in lookup]
