"""Score lists in JSON: ``[{"question": str, "scores": {model: score}}, ...]``.

This is the layout of RouterDC's data (``routerdc_model7/``) and of several other routing
datasets. Extra keys (such as ``cluster_id``) are ignored. The data carries no costs:
they come from ``costs`` (a ``{model: cost}`` mapping or a CSV with a ``model`` column and a
cost column, one constant cost per model), or are zero when ``costs`` is None.
"""

from __future__ import annotations

import fnmatch
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from torchroute.buildable import buildable
from torchroute.data.generic import model_costs
from torchroute.data.options import checked_options
from torchroute.data.splits import (
    DefaultSplit,
    kept_table,
    missing_rows,
    split_from_name,
    strip_split,
)
from torchroute.data.table import RoutingTable, TableError
from torchroute.io import not_a_file

log = logging.getLogger(__name__)


def read_score_list(path: Path) -> list[dict]:
    """The entries of one JSON file, checked to be ``{"question", "scores"}`` objects."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TableError(f"{path}: could not be read as JSON ({err})") from err
    if not isinstance(entries, list):
        raise TableError(f"{path}: expected a JSON list of objects, got {type(entries).__name__}")
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or "question" not in e or "scores" not in e:
            raise TableError(f"{path}: entry {i} must be an object with 'question' and 'scores'")
        if not isinstance(e["scores"], dict):
            raise TableError(f"{path}: entry {i} 'scores' must map model -> score")
    return entries


def score_files(path: Path, pattern: str | None) -> list[tuple[Path, list[dict]]]:
    """The score lists of a folder: files matching ``pattern``, or every valid score list.

    With ``pattern`` (a file-name glob such as ``"*_test.json"``) every matching file must
    be a score list; without it, each ``.json`` file whose content is a list of
    ``{question, scores}`` objects is read and the others (a model catalogue, a config) are
    skipped and reported in the log.
    """
    files = sorted(p for p in path.iterdir() if p.is_file())
    if pattern is not None:
        chosen = [f for f in files if fnmatch.fnmatch(f.name, pattern)]
        if not chosen:
            names = [f.name for f in files][:10]
            raise TableError(f"{path}: no file matches pattern {pattern!r}; files: {names}")
        return [(f, read_score_list(f)) for f in chosen]
    out, skipped = [], []
    for f in files:
        if f.suffix.lower() != ".json":
            continue
        try:
            out.append((f, read_score_list(f)))
        except TableError as err:
            skipped.append(f"{f.name} ({str(err).split(': ', 1)[-1]})")
    if skipped:
        log.warning(
            "%s: skipped %d .json files that are not {question, scores} lists: %s",
            path,
            len(skipped),
            "; ".join(skipped),
        )
    if not out:
        raise TableError(
            f"{path}: no .json file in the directory is a list of {{question, scores}} objects"
            + (f" (skipped {skipped})" if skipped else "")
        )
    log.info("%s: %d score files: %s", path, len(out), [f.name for f, _ in out])
    return out


@checked_options
@buildable
def load_json_scores(
    path: str | Path,
    *,
    pattern: str | None = None,
    models: Sequence[str] | None = None,
    costs: Mapping[str, float] | str | Path | None = None,
    drop_missing: bool = False,
    default_split: DefaultSplit = "test",
    test_fraction: float = 0.3,
    val_fraction: float = 0.0,
    seed: int = 0,
) -> RoutingTable:
    """Load one JSON score list or a directory of them.

    The split of a file comes from its name (``*_train*`` / ``*-train*`` -> train,
    ``*_test*`` -> test); files with neither get ``default_split`` (``"random"``: a seeded
    share ``test_fraction`` to test, the rest to train). Then ``val_fraction`` of train moves
    to val. ``groups`` is the task name of each query's file: its name without the split
    marker (``arc_challenge_train.json`` -> ``arc_challenge``).

    Args:
        path: a ``.json`` file or a directory of them (read in name order).
        pattern: in a directory, read the files whose name matches this glob
            (``"*_test.json"``); None reads every ``.json`` file that is a list of
            ``{question, scores}`` objects and skips (and logs) the others.
        models: the arms to keep, in this order; default: the models of the first entry.
        costs: ``{model: cost}`` or a CSV path (see :func:`~torchroute.data.generic.model_costs`);
            None gives zero costs.
        drop_missing: drop questions lacking a model's score (null or absent), with a
            warning giving the count, instead of raising.
        default_split: the split of files whose name has no split marker (see above).
        test_fraction: with ``default_split="random"``, the seeded share sent to test.
        val_fraction: the share of train moved to val.
        seed: the seed of those random splits.

    Returns:
        ``scores`` ``[n, K]`` from the file, ``costs`` ``[n, K]`` constant per model,
        ``text`` the questions, ``query_ids`` ``"<file stem>:<index>"``.
    """
    path = Path(path)
    if path.is_dir():
        per_file = score_files(path, pattern)
    elif path.is_file():
        per_file = [(path, read_score_list(path))]
    else:
        raise TableError(f"{path}: {not_a_file(path)}; expected a file or a folder of them")
    if models is None:
        first = next((e for _, entries in per_file for e in entries), None)
        if first is None:
            raise TableError(f"{path}: the score lists are empty")
        models = list(first["scores"])
    models = [str(m) for m in models]
    seen = {m for _, entries in per_file for e in entries for m in e["scores"]}
    absent = [m for m in models if m not in seen]
    if absent:
        raise TableError(f"{path}: models {absent} have no scores; the data has {sorted(seen)}")
    rows, ids, text, groups, marks = [], [], [], [], []
    for f, entries in per_file:
        for i, e in enumerate(entries):
            rows.append([_score(e["scores"].get(m), f, i, m) for m in models])
            ids.append(f"{f.stem}:{i}")
            text.append(str(e["question"]))
        groups += [strip_split(f.stem)] * len(entries)
        marks += [split_from_name(f.stem)] * len(entries)
    if not rows:
        raise TableError(f"{path}: the score lists are empty")
    scores = np.asarray(rows, dtype=np.float64)
    cost = np.broadcast_to(model_costs(costs, models), scores.shape).copy()
    source = str(path)
    keep = missing_rows(scores, cost, models, ids, source=source, drop_missing=drop_missing)
    return kept_table(
        scores,
        cost,
        models,
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


def _score(value: object, file: Path, index: int, model: str) -> float:
    if value is None:
        return float("nan")
    if isinstance(value, (bool, int, float)):
        return float(value)
    raise TableError(f"{file}: entry {index} score of {model!r} must be a number, got {value!r}")
