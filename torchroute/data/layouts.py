"""The two layouts of :func:`~torchroute.data.generic.load_table`, read into arrays.

:func:`long_to_wide` pivots the long layout (one row per (query, arm)) into the wide one
with ``score:<arm>`` / ``cost:<arm>`` columns; :func:`read_wide` reads a wide frame with
any column patterns into ``[n, K]`` arrays. Both name the offending cell in their errors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from torchroute.data.columns import column_of, match_arms, numeric_column
from torchroute.data.table import TableError

log = logging.getLogger(__name__)

LONG_VALUES = ("score", "cost")


def long_to_wide(
    frame: pd.DataFrame,
    source: str,
    *,
    id_column: str | None,
    per_query: Sequence[str],
    values: Sequence[str],
    drop_missing: bool,
) -> pd.DataFrame:
    """One row per query with a ``<value>:<arm>`` column per value and arm.

    Args:
        frame: the long table (``id_column``, ``arm`` and the ``values`` columns).
        source: named in errors.
        id_column: the query id column.
        per_query: columns that must be the same on every row of a query (text, split,
            group); kept when present.
        values: the per-(query, arm) columns to pivot (``score``, ``cost``, token counts).
        drop_missing: leave absent (query, arm) rows as NaN (the caller drops those
            queries) instead of raising.

    Raises:
        TableError: a column is missing, a value is not numeric (naming the row
            ``(query, arm)``), a (query, arm) row is repeated or, without
            ``drop_missing``, absent ("row missing").
    """
    if id_column is None:
        raise TableError(f"{source}: the long layout needs an id column (id_column)")
    need = [c for c in (id_column, "arm", *values) if c not in frame.columns]
    if need:
        raise TableError(f"{source}: long layout needs columns {need}; got {list(frame.columns)}")
    frame = frame.assign(
        **{id_column: frame[id_column].astype(str), "arm": frame["arm"].astype(str)}
    )
    dup = frame.duplicated([id_column, "arm"])
    if dup.any():
        first = frame.loc[dup, [id_column, "arm"]].iloc[0].tolist()
        raise TableError(
            f"{source}: {int(dup.sum())} repeated ({id_column}, arm) rows, e.g. {first}"
        )
    where = [f"row ({q}, {a})" for q, a in zip(frame[id_column], frame["arm"], strict=True)]
    numbers = {v: numeric_column(frame[v], v, source, where) for v in values}
    frame = frame.assign(**numbers)
    extra = [c for c in per_query if c in frame.columns]
    if extra:
        varying = frame.groupby(id_column, sort=False)[extra].nunique(dropna=False).max()
        bad = [c for c in extra if varying[c] > 1]
        if bad:
            raise TableError(f"{source}: columns {bad} differ between rows of the same {id_column}")
    queries = frame.drop_duplicates(id_column)[[id_column, *extra]].set_index(id_column)
    arms = list(dict.fromkeys(frame["arm"]))
    wide = frame.pivot(index=id_column, columns="arm", values=list(values)).reindex(
        index=queries.index
    )
    present = frame.assign(_row=1.0).pivot(index=id_column, columns="arm", values="_row")
    absent = present.reindex(index=queries.index, columns=arms).isna().to_numpy()
    if absent.any() and not drop_missing:
        rows, cols = np.nonzero(absent)
        examples = ", ".join(
            f"({queries.index[r]!r}, {arms[c]!r})" for r, c in zip(rows[:3], cols[:3])
        )
        raise TableError(
            f"{source}: {int(absent.sum())} missing ({id_column}, arm) rows, e.g. {examples}: "
            "row missing in the long layout (each query needs one row per arm); pass "
            "drop_missing=True to drop those queries"
        )
    cols = {f"{v}:{a}": wide[(v, a)] for a in arms for v in values}
    return pd.concat([queries, pd.DataFrame(cols)], axis=1).reset_index()


@dataclass
class WideArrays:
    """What :func:`read_wide` reads: arms, ids and ``[n, K]`` arrays (NaN = missing)."""

    arms: list[str]
    ids: list[str]
    scores: np.ndarray
    costs: np.ndarray | None
    id_from: str


def query_ids(frame: pd.DataFrame, id_column: str | None, source: str) -> tuple[list[str], str]:
    """The ids of a wide frame and where they came from (a column, or the row index).

    ``id_column=None`` takes an unnamed first column (``Unnamed: 0``, as a CSV written with
    its index has) when there is one, else the row index.
    """
    if id_column is None:
        first = str(frame.columns[0]) if len(frame.columns) else ""
        if first == "" or first.startswith("Unnamed: 0"):
            return frame.iloc[:, 0].astype(str).tolist(), f"the unnamed first column {first!r}"
        return [str(i) for i in frame.index], "the row index"
    if id_column not in frame.columns:
        raise TableError(
            f"{source}: no id column {id_column!r} in {list(frame.columns)[:12]}; set "
            "id_column to the right column, or id_column=None (data.id_column=null) to use "
            "the row index"
        )
    column = frame[id_column]
    ids = ["" if pd.isna(v) else str(v) for v in column]  # an empty cell is a blank id
    return ids, f"column {id_column!r}"


def read_wide(
    frame: pd.DataFrame,
    source: str,
    *,
    score_pattern: str,
    cost_pattern: str | None,
    id_column: str | None,
    reserved: Sequence[str],
    models: Sequence[str] | None,
    score_scale: float,
    known: Callable[[str], bool] | None = None,
) -> WideArrays:
    """Arms, ids, scores (divided by ``score_scale``) and costs of a wide frame.

    Args:
        frame: one row per query.
        source: named in errors and the log.
        score_pattern: the score column pattern (see :mod:`torchroute.data.columns`).
        cost_pattern: the cost column pattern; None reads no cost columns (costs come
            from prices).
        id_column: query id column, or None for the row index.
        reserved: columns that are never arm columns.
        models: the arms to keep, in this order (default: every matched arm).
        score_scale: scores are divided by it (100 reads percent).
        known: with ``cost_pattern=None``, the arms are the score matches for which it is
            true (the priced models); the others are logged as left out.

    Raises:
        TableError: no arm matches, a model is unknown, an id repeats (naming it), a cell
            is not numeric (naming the column and query).
    """
    cols = [str(c) for c in frame.columns]
    frame = frame.set_axis(cols, axis=1)
    arms = match_arms(cols, score_pattern, cost_pattern, reserved=reserved, source=source)
    ids, id_from = query_ids(frame, id_column, source)
    if len(set(ids)) != len(ids):
        counts = pd.Series(ids).value_counts()
        rep = counts[counts > 1]
        shown = ", ".join(f"{q!r} ({n} times)" for q, n in rep.head(3).items())
        raise TableError(
            f"{source}: query ids must be distinct in the wide layout (one row per query); "
            f"{len(rep)} repeated in {id_from}: {shown}"
        )
    if known is not None and models is None:
        left = [a for a in arms if not known(a)]
        arms = [a for a in arms if known(a)]
        if not arms:
            raise TableError(
                f"{source}: no column matched by score_pattern={score_pattern!r} has a price "
                f"or cost (matches: {left[:8]})"
            )
        if left:
            log.info("%s: columns without a price or cost are not arms: %s", source, left)
    if models is not None:
        unknown = [str(m) for m in models if str(m) not in arms]
        if unknown:
            raise TableError(f"{source}: models {unknown} not among the arms found {arms}")
        arms = [str(m) for m in models]
    where = [f"query {q!r}" for q in ids]

    def block(pattern: str) -> np.ndarray:
        return np.stack(
            [numeric_column(frame[column_of(pattern, a)], column_of(pattern, a), source, where)
             for a in arms],
            axis=1,
        )  # fmt: skip

    scores = block(score_pattern) / float(score_scale)
    costs = block(cost_pattern) if cost_pattern is not None else None
    log.info(
        "%s: %d arms %s (score columns %r%s), ids from %s%s",
        source,
        len(arms),
        arms,
        score_pattern,
        f", cost columns {cost_pattern!r}" if cost_pattern else "",
        id_from,
        f", scores / {score_scale:g}" if score_scale != 1 else "",
    )
    return WideArrays(arms, ids, scores, costs, id_from)
