"""Helpers shared by the loaders: seeded splits, unique query ids, missing-cell handling."""

from __future__ import annotations

import logging
import re
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from torchroute.data.table import SPLITS, RoutingTable, TableError

log = logging.getLogger(__name__)

DefaultSplit = Literal["train", "val", "test", "random"]

_PACKAGE = str(Path(__file__).resolve().parents[1])


def user_stacklevel() -> int:
    """The ``stacklevel`` of a warning issued here that points at the first caller outside
    torchroute (the user's ``load_table(...)`` line, not the loader's internals)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


_SPLIT_WORDS = {"train": "train", "val": "val", "valid": "val", "dev": "val", "test": "test"}
_SPLIT_RE = re.compile(r"(?:^|[_\-.])(train|val|valid|dev|test)(?=$|[_\-.])", re.IGNORECASE)


def split_from_name(name: str) -> str | None:
    """The split named in a file stem (``mmlu_train`` -> ``"train"``, ``gsm8k-test``), or None."""
    found = _SPLIT_RE.findall(name)
    return _SPLIT_WORDS[found[-1].lower()] if found else None


def strip_split(name: str) -> str:
    """A file stem without its split marker (``arc_challenge_train`` -> ``arc_challenge``)."""
    return _SPLIT_RE.sub("", name) or name


def random_split(
    n: int, fractions: Sequence[float] = (0.6, 0.1, 0.3), seed: int = 0
) -> tuple[str, ...]:
    """Seeded random train/val/test labels.

    Args:
        n: number of queries.
        fractions: shares of (train, val, test); they must be >= 0 and sum to 1.
        seed: the split is a function of ``(n, fractions, seed)`` only.

    Returns:
        ``n`` labels; exactly ``round(f_val * n)`` val and ``round(f_test * n)`` test.
    """
    f = np.asarray(fractions, dtype=np.float64)
    if f.shape != (3,) or (f < 0).any() or abs(f.sum() - 1.0) > 1e-6:
        raise TableError(
            f"fractions must be three shares (train, val, test) >= 0 summing to 1, got {fractions}"
        )
    n_val, n_test = round(f[1] * n), round(f[2] * n)
    if n_val + n_test > n:
        n_val = n - n_test
    labels = np.array(["train"] * n, dtype=object)
    order = np.random.default_rng(seed).permutation(n)
    labels[order[:n_test]] = "test"
    labels[order[n_test : n_test + n_val]] = "val"
    return tuple(labels.tolist())


def carve_validation(split: Sequence[str], fraction: float, seed: int = 0) -> tuple[str, ...]:
    """Move ``round(fraction * n_train)`` train queries, drawn with ``seed``, to ``val``."""
    if not 0.0 <= fraction < 1.0:
        raise TableError(f"val_fraction must be in [0, 1), got {fraction}")
    labels = np.array(split, dtype=object)
    train = np.flatnonzero(labels == "train")
    n_val = round(fraction * train.size)
    if n_val:
        pick = np.random.default_rng(seed).choice(train, size=n_val, replace=False)
        labels[pick] = "val"
    return tuple(labels.tolist())


def resolve_splits(
    marks: Sequence[str | None],
    *,
    default_split: DefaultSplit,
    test_fraction: float,
    val_fraction: float,
    seed: int,
    source: str = "table",
) -> tuple[str, ...]:
    """Split labels from per-query marks (a split name, or None when the source has none).

    Unmarked queries get ``default_split``; with ``"random"`` a seeded share ``test_fraction``
    of them goes to test and the rest to train (logged with the seed, the sizes and how to
    override). Then ``val_fraction`` of all train queries moves to val
    (:func:`carve_validation`).
    """
    if default_split not in (*SPLITS, "random"):
        raise TableError(
            f"default_split must be one of {(*SPLITS, 'random')}, got {default_split!r}"
        )
    if not 0.0 <= test_fraction <= 1.0:
        raise TableError(f"test_fraction must be in [0, 1], got {test_fraction}")
    labels = list(marks)
    free = [i for i, m in enumerate(labels) if m is None]
    if free:
        if default_split == "random":
            sub = random_split(len(free), (1.0 - test_fraction, 0.0, test_fraction), seed)
            log.info(
                "%s: %d of %d queries have no split; split at random with seed %d: %d train, "
                "%d test (test_fraction=%g). Override with data.seed / data.test_fraction, "
                "data.default_split=test (all to one split) or a 'split' column",
                source,
                len(free),
                len(labels),
                seed,
                sub.count("train"),
                sub.count("test"),
                test_fraction,
            )
        else:
            sub = (default_split,) * len(free)
        for i, s in zip(free, sub, strict=True):
            labels[i] = s
    if not val_fraction:
        return tuple(labels)
    out = carve_validation(labels, val_fraction, seed)
    log.info(
        "%s: %d train queries moved to val (val_fraction=%g, seed %d)",
        source,
        out.count("val") - labels.count("val"),
        val_fraction,
        seed,
    )
    return out


def unique_ids(ids: Sequence[str]) -> tuple[str, ...]:
    """The ids, with later repeats renamed ``<id>#2``, ``<id>#3`` ... (first one kept)."""
    seen: dict[str, int] = {}
    taken = set(ids)
    out = []
    for qid in map(str, ids):
        count = seen.get(qid, 0) + 1
        seen[qid] = count
        new = qid
        while count > 1 and (new == qid or new in taken):
            new = f"{qid}#{count}"
            count += 1
        if new != qid:
            taken.add(new)
        out.append(new)
    return tuple(out)


def missing_rows(
    scores: np.ndarray,
    costs: np.ndarray,
    arm_names: Sequence[str],
    query_ids: Sequence[str],
    *,
    source: str,
    drop_missing: bool,
) -> np.ndarray:
    """Rows to keep, ``[n]`` bool; raises on NaN cells unless ``drop_missing``.

    Args:
        scores: ``[n, K]`` with NaN for a missing cell.
        costs: ``[n, K]`` with NaN for a missing cell.
        arm_names: the ``K`` arm names, for the message.
        query_ids: the ``n`` query ids, for the message.
        source: the file or argument named in the message and warning.
        drop_missing: drop queries with a missing cell (with a warning) instead of raising.
    """
    bad = np.isnan(scores) | np.isnan(costs)
    rows = bad.any(axis=1)
    if not rows.any():
        return ~rows
    if not drop_missing:
        per_arm = {arm_names[k]: int(c) for k, c in enumerate(bad.sum(axis=0)) if c}
        examples = [query_ids[i] for i in np.flatnonzero(rows)[:3]]
        raise TableError(
            f"{source}: {int(bad.sum())} missing (NaN/blank) score or cost cells in "
            f"{int(rows.sum())} queries (per arm: {per_arm}; e.g. queries {examples}); "
            "pass drop_missing=True to drop those queries"
        )
    warnings.warn(
        f"{source}: dropped {int(rows.sum())} of {rows.size} queries with missing "
        f"(NaN/blank) score or cost cells",
        stacklevel=user_stacklevel(),
    )
    return ~rows


def kept_table(
    scores: np.ndarray,
    costs: np.ndarray,
    arms: Sequence[str],
    ids: Sequence[str],
    text: Sequence[str],
    groups: Sequence[str],
    marks: Sequence[str | None],
    keep: np.ndarray,
    source: str,
    **split_options: Any,
) -> RoutingTable:
    """The table of the rows with ``keep`` true (``[n]`` bool), splits from the file marks.

    ``marks`` are the per-row splits read from file names (``None`` where a name has none);
    ``split_options`` go to :func:`resolve_splits`.
    """

    def kept(values: Sequence[str]) -> tuple[str, ...]:
        return tuple(v for v, k in zip(values, keep, strict=True) if k)

    split = resolve_splits(
        [m for m, k in zip(marks, keep, strict=True) if k], source=source, **split_options
    )
    return RoutingTable(
        scores=scores[keep],
        costs=costs[keep],
        arm_names=tuple(arms),
        query_ids=kept(ids),
        split=split,
        text=kept(text),
        groups=kept(groups),
        source=source,
    )
