"""Column conventions of published tables: ``{arm}`` name patterns and score/cost cells.

A *pattern* is a column name with one ``{arm}`` placeholder: ``"score:{arm}"`` reads the
columns ``score:gpt-4``, ``score:small``; ``"{arm}"`` with ``"{arm}_cost"`` reads the layout
``gpt-4, gpt-4_cost, small, small_cost``; ``"{arm}|total_cost"`` reads RouterBench's cost
columns. The arms of a table are the names for which both the score and the cost pattern
match a column (see :func:`match_arms`).

Cells are read by :func:`numeric_column`: numbers as they are, booleans (``True``/``False``,
also as text) as 1/0, blanks as NaN; anything else is an error naming the column and row.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from torchroute.data.table import TableError

_BOOL_TEXT = {"true": 1.0, "false": 0.0}


def pattern_regex(pattern: str, what: str = "pattern") -> re.Pattern[str]:
    """The regular expression of a column-name pattern with exactly one ``{arm}``.

    Raises:
        TableError: the pattern does not hold ``{arm}`` exactly once.
    """
    if pattern.count("{arm}") != 1:
        raise TableError(f"{what} must contain '{{arm}}' exactly once, got {pattern!r}")
    head, tail = pattern.split("{arm}")
    return re.compile(f"^{re.escape(head)}(?P<arm>.+?){re.escape(tail)}$", re.DOTALL)


def column_of(pattern: str, arm: str) -> str:
    """The column name of ``arm`` under ``pattern`` (``"{arm}_cost"``, ``"a"`` -> ``a_cost``)."""
    return pattern.replace("{arm}", arm)


def pattern_arms(
    columns: Sequence[str], pattern: str, what: str, exclude: Sequence[str] = ()
) -> list[str]:
    """Arm names that ``pattern`` reads from ``columns`` (file order), skipping ``exclude``."""
    regex = pattern_regex(pattern, what)
    skip = set(exclude)
    found = []
    for c in columns:
        m = regex.match(c)
        if m and c not in skip:
            found.append(m.group("arm"))
    return found


def match_arms(
    columns: Sequence[str],
    score_pattern: str,
    cost_pattern: str | None,
    *,
    reserved: Sequence[str] = (),
    source: str,
) -> list[str]:
    """The arms whose score column and cost column both exist, in file order.

    Args:
        columns: the column names of the table.
        score_pattern: pattern of the score columns (``"score:{arm}"``, ``"{arm}"``).
        cost_pattern: pattern of the cost columns, or None when the costs come from
            elsewhere (per-model prices): every score-pattern match is then an arm.
        reserved: columns that are never arm columns (id, text, split, group, token
            counts); with ``score_pattern="{arm}"`` every other column would match.
        source: named in the error.

    Raises:
        TableError: no name matches both patterns (the message lists what each matched).
    """
    cost_cols = set()
    if cost_pattern is not None:
        cost_regex = pattern_regex(cost_pattern, "cost_pattern")
        cost_cols = {c for c in columns if cost_regex.match(c)}
    scored = pattern_arms(columns, score_pattern, "score_pattern", [*reserved, *cost_cols])
    if cost_pattern is None:
        arms = scored
    else:
        costed_order = pattern_arms(columns, cost_pattern, "cost_pattern", reserved)
        costed = set(costed_order)
        arms = [a for a in scored if a in costed]
        # A pattern with a fixed part ("score:{arm}", "{arm}_cost") names arm columns on
        # purpose, so a match without its partner is an error; a bare "{arm}" matches
        # every column and its unpaired matches (text, ids, ...) are ignored.
        half = []
        if score_pattern != "{arm}":
            half += [column_of(cost_pattern, a) for a in scored if a not in costed]
        if cost_pattern != "{arm}":
            half += [column_of(score_pattern, a) for a in costed_order if a not in set(scored)]
        if arms and half:
            raise TableError(
                f"{source}: every arm needs a score column ({score_pattern!r}) and a cost "
                f"column ({cost_pattern!r}); missing {half}"
            )
    if not arms:
        costed_list = (
            pattern_arms(columns, cost_pattern, "cost_pattern", reserved) if cost_pattern else []
        )
        raise TableError(
            f"{source}: no arm matches both score_pattern={score_pattern!r} and "
            f"cost_pattern={cost_pattern!r} (score matches: {scored[:8]}, cost matches: "
            f"{costed_list[:8]}); columns are {list(columns)[:12]}"
        )
    return arms


def numeric_column(
    values: pd.Series, column: str, source: str, row_names: Sequence[str] | None = None
) -> np.ndarray:
    """``[n]`` float64 from one score/cost column: numbers, booleans as 0/1, blanks as NaN.

    Booleans are accepted as a boolean column or as ``True``/``False`` text (any case, as
    CSV readers leave them when a blank cell is present).

    Raises:
        TableError: a cell is neither a number, a boolean nor blank; names the column, the
            row (by ``row_names`` when given) and the value.
    """
    if pd.api.types.is_bool_dtype(values):
        return values.to_numpy(dtype=np.float64)
    if pd.api.types.is_numeric_dtype(values):
        return values.to_numpy(dtype=np.float64)
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values.tolist()):
        if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
            continue
        if isinstance(v, (bool, np.bool_)):
            out[i] = float(v)
            continue
        if isinstance(v, (int, float, np.integer, np.floating)):
            out[i] = float(v)
            continue
        text = str(v).strip()
        if text == "":
            continue
        if text.lower() in _BOOL_TEXT:
            out[i] = _BOOL_TEXT[text.lower()]
            continue
        try:
            out[i] = float(text)
        except ValueError:
            row = repr(row_names[i]) if row_names is not None else str(i)
            raise TableError(
                f"{source}: column {column!r} must be numeric (numbers, or True/False), got "
                f"{v!r} in row {row}"
            ) from None
    return out
