"""``load_table``: a routing table from a file in the generic format or as people publish it.

The layouts and column conventions are described in :mod:`torchroute.data.generic`; the
pieces are :mod:`torchroute.data.columns` (patterns, cells), :mod:`torchroute.data.layouts`
(long/wide) and :mod:`torchroute.data.prices` (per-token prices).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from torchroute.buildable import buildable
from torchroute.data.columns import column_of, numeric_column
from torchroute.data.generic import model_costs, read_costs, read_frame
from torchroute.data.layouts import LONG_VALUES, WideArrays, long_to_wide, read_wide
from torchroute.data.options import checked_options
from torchroute.data.prices import count_tokens, price_matrix, read_prices, token_costs
from torchroute.data.splits import DefaultSplit, missing_rows, resolve_splits
from torchroute.data.table import SPLITS, RoutingTable, TableError

log = logging.getLogger(__name__)

Tokens = str | float | None


@checked_options
@buildable
def load_table(
    path: str | Path | pd.DataFrame,
    format: Literal["auto", "long", "wide"] = "auto",
    *,
    score_pattern: str = "score:{arm}",
    cost_pattern: str = "cost:{arm}",
    text_column: str | None = "text",
    id_column: str | None = "query_id",
    split_column: str | None = "split",
    group_column: str | None = "group",
    score_scale: float = 1.0,
    models: Sequence[str] | None = None,
    costs: Mapping[str, float] | str | Path | None = None,
    prices: Mapping[str, Any] | str | Path | None = None,
    input_tokens: Tokens = None,
    output_tokens: Tokens = None,
    tokenizer: Any = None,
    drop_missing: bool = False,
    default_split: DefaultSplit = "random",
    test_fraction: float = 0.3,
    val_fraction: float = 0.0,
    seed: int = 0,
    trust_pickle: bool = False,
) -> RoutingTable:
    """Load a table in the long or wide layout (see :mod:`torchroute.data.generic`).

    Args:
        path: a CSV/TSV/Parquet/pandas-pickle file or a DataFrame.
        format: ``"long"``, ``"wide"``, or ``"auto"`` (long when ``arm`` and ``score``
            columns exist, else wide).
        score_pattern: wide layout: the score column of arm ``{arm}`` (``"{arm}"`` reads a
            column named after the model).
        cost_pattern: wide layout: the cost column of arm ``{arm}`` (``"{arm}_cost"``,
            ``"{arm}|total_cost"``). The arms are the names for which both patterns match
            a column (only the score pattern with ``costs`` or ``prices``). The log lists
            the arms found.
        text_column: the query text column (optional in the file).
        id_column: the query id column; None uses the row index (or an unnamed first
            column, as a CSV written with its index has).
        split_column: the split column (``train``/``val``/``test``; optional in the file).
        group_column: the group column (optional in the file).
        score_scale: scores are divided by it (100 reads percent). Booleans read as 0/1.
        models: the arms to keep, in this order (default: every arm found).
        costs: one constant cost per model (``{model: cost}`` or a CSV, see
            :func:`~torchroute.data.generic.model_costs`) instead of cost columns.
        prices: per-token prices ``{model: {input_per_mtok, output_per_mtok}}`` (dollars
            per million tokens) or a CSV with those columns and ``model``; costs are then
            ``(in * input_per_mtok + out * output_per_mtok) / 1e6`` dollars per query.
        input_tokens: with ``prices``: a column (``"prompt_tokens"``), a per-arm pattern
            (``"{arm}|in_tokens"``) or a number; None estimates them from the text (the
            ``tokenizer``'s count, else ``chars / 4``; the log says which).
        output_tokens: with ``prices``: a column, a per-arm pattern or a number; None
            counts no output tokens (with a warning in the log).
        tokenizer: for the input-token estimate: None (``chars / 4``), a Hugging Face
            tokenizer name, or the run's encoder (``data.tokenizer=${encoder.encoder}``).
        drop_missing: drop queries with missing cells or rows (warns with the count)
            instead of raising.
        default_split: how queries without a split are split (``splits.resolve_splits``;
            a random split is logged with its seed and sizes).
        test_fraction: with ``default_split="random"``, the seeded share sent to test.
        val_fraction: the share of train moved to val.
        seed: the seed of those random splits.
        trust_pickle: allow a ``.pkl``/``.pickle`` file. Unpickling runs arbitrary code, so
            without it a pickle raises :class:`TableError`; set it only for trusted files.

    Returns:
        A validated table: ``scores``/``costs`` ``[n, K]``, with ``text``/``groups`` if given.
    """
    frame = path if isinstance(path, pd.DataFrame) else read_frame(path, trust_pickle=trust_pickle)
    source = "<DataFrame>" if isinstance(path, pd.DataFrame) else str(path)
    if len(frame.index) == 0:
        raise TableError(f"{source}: the table has no rows (columns {list(frame.columns)})")
    if not (
        isinstance(score_scale, (int, float)) and score_scale > 0 and math.isfinite(score_scale)
    ):
        raise TableError(f"score_scale must be a finite number > 0, got {score_scale!r}")
    if costs is not None and prices is not None:
        raise TableError("give costs (one per model) or prices (per token), not both")
    if prices is None and (input_tokens is not None or output_tokens is not None):
        raise TableError("input_tokens/output_tokens are read only with prices; prices is None")
    per_query = (text_column, split_column, group_column)
    auto = format == "auto"
    if auto:
        format = "long" if {"arm", "score"} <= set(map(str, frame.columns)) else "wide"
    if format == "long":
        tokens = [t for t in (input_tokens, output_tokens) if isinstance(t, str)]
        own_costs = costs is None and prices is None
        values = ["score", *(["cost"] if own_costs else []), *tokens]
        frame = long_to_wide(
            frame,
            source,
            id_column=id_column,
            per_query=per_query,
            values=values,
            drop_missing=drop_missing,
        )
        score_pattern, cost_pattern = "score:{arm}", "cost:{arm}"
        input_tokens, output_tokens = (
            f"{t}:{{arm}}" if isinstance(t, str) else t for t in (input_tokens, output_tokens)
        )
    elif format != "wide":
        raise TableError(f"format must be 'auto', 'long' or 'wide', got {format!r}")
    reserved = [c for c in (id_column, *per_query) if c]
    reserved += [
        t for t in (input_tokens, output_tokens) if isinstance(t, str) and "{arm}" not in t
    ]
    lookup: Mapping[str, Any] | None = None
    if prices is not None:
        lookup = read_prices(prices, trust_pickle=trust_pickle)
    elif costs is not None:
        lookup = read_costs(costs, trust_pickle=trust_pickle)
    try:
        wide = read_wide(
            frame,
            source,
            score_pattern=score_pattern,
            cost_pattern=cost_pattern if costs is None and prices is None else None,
            id_column=id_column,
            reserved=reserved,
            models=models,
            score_scale=score_scale,
            known=None if lookup is None else (lambda a: a in lookup or a.split("/")[-1] in lookup),
        )
    except TableError as err:
        if not auto or format != "wide" or "no arm matches" not in str(err):
            raise
        raise TableError(
            f"neither the long layout (columns {[id_column, 'arm', *LONG_VALUES]}) nor the "
            f"wide layout: {err}"
        ) from err
    text = _strings(frame, text_column)
    if costs is not None:
        cost = np.broadcast_to(model_costs(costs, wide.arms), wide.scores.shape).copy()
    elif prices is not None:
        where = "prices" if isinstance(prices, Mapping) else str(prices)
        matrix = price_matrix(lookup, wide.arms, where)
        cost = _priced(frame, wide, source, matrix, text, input_tokens, output_tokens, tokenizer)
    else:
        cost = wide.costs
    keep = missing_rows(
        wide.scores, cost, wide.arms, wide.ids, source=source, drop_missing=drop_missing
    )
    frame = frame.iloc[np.flatnonzero(keep)]
    marks: list[str | None] = [None] * len(frame)
    if split_column in frame.columns:
        marks = [None if pd.isna(s) else str(s) for s in frame[split_column]]
        bad = sorted({m for m in marks if m is not None} - set(SPLITS))
        if bad:
            raise TableError(f"{source}: column {split_column!r} must hold {SPLITS}, got {bad}")
    split = resolve_splits(
        marks,
        default_split=default_split,
        test_fraction=test_fraction,
        val_fraction=val_fraction,
        seed=seed,
        source=source,
    )
    groups = _strings(frame, group_column)
    return RoutingTable(
        scores=wide.scores[keep],
        costs=cost[keep],
        arm_names=tuple(wide.arms),
        query_ids=tuple(np.asarray(wide.ids, dtype=object)[keep]),
        split=split,
        text=None if text is None else tuple(np.asarray(text, dtype=object)[keep]),
        groups=groups,
        source=source,
    )


def _strings(frame: pd.DataFrame, column: str | None) -> tuple[str, ...] | None:
    if not column or column not in frame.columns:
        return None
    return tuple("" if pd.isna(v) else str(v) for v in frame[column])


def _tokens(
    frame: pd.DataFrame,
    spec: Tokens,
    arms: Sequence[str],
    ids: Sequence[str],
    source: str,
    what: str,
) -> np.ndarray:
    """``[n, K]`` or ``[n, 1]`` token counts from a column, a per-arm pattern or a number."""
    where = [f"query {q!r}" for q in ids]
    if isinstance(spec, str) and "{arm}" in spec:
        cols = [column_of(spec, a) for a in arms]
        absent = [c for c in cols if c not in frame.columns]
        if absent:
            raise TableError(f"{source}: {what}={spec!r} but there is no column {absent[:3]}")
        return np.stack([numeric_column(frame[c], c, source, where) for c in cols], axis=1)
    if isinstance(spec, str):
        if spec not in frame.columns:
            raise TableError(
                f"{source}: {what}={spec!r} is not a column of {list(frame.columns)[:12]}"
            )
        return numeric_column(frame[spec], spec, source, where)[:, None]
    value = float(spec)
    if not (value >= 0 and math.isfinite(value)):
        raise TableError(f"{what} must be a column name, a pattern or a number >= 0, got {spec!r}")
    return np.full((len(frame), 1), value)


def _priced(
    frame: pd.DataFrame,
    wide: WideArrays,
    source: str,
    matrix: np.ndarray,
    text: Sequence[str] | None,
    input_tokens: Tokens,
    output_tokens: Tokens,
    tokenizer: Any,
) -> np.ndarray:
    """Per-query dollars ``[n, K]`` from prices ``[2, K]`` and token counts (logged)."""
    arms, ids = wide.arms, wide.ids
    if input_tokens is None:
        if text is None:
            raise TableError(
                f"{source}: prices need input token counts: give input_tokens (a column or "
                f"'{{arm}}' pattern) or a text column to estimate them (text_column)"
            )
        counted, how = count_tokens(text, tokenizer)
        tokens_in, in_from = counted[:, None], f"estimated from the text ({how})"
    else:
        tokens_in = _tokens(frame, input_tokens, arms, ids, source, "input_tokens")
        in_from = f"{input_tokens!r}"
    if output_tokens is None:
        tokens_out, out_from = np.zeros((len(frame), 1)), "none (output_tokens not given)"
        log.warning(
            "%s: no output token counts (output_tokens=None): costs count input tokens only",
            source,
        )
    else:
        tokens_out = _tokens(frame, output_tokens, arms, ids, source, "output_tokens")
        out_from = f"{output_tokens!r}"
    log.info(
        "%s: costs in dollars from per-token prices; input tokens %s, output tokens %s",
        source,
        in_from,
        out_from,
    )
    return token_costs(matrix, tokens_in, tokens_out)
