"""Per-token prices: ``{model: {input_per_mtok, output_per_mtok}}`` -> per-query dollars.

Providers publish prices per million input and output tokens. The cost of calling model
``k`` on query ``i`` is ``(in[i, k] * input_per_mtok[k] + out[i, k] * output_per_mtok[k])
/ 1e6`` dollars, with token counts from the table's columns, a constant, or (input tokens
only) an estimate from the query text: the given tokenizer's count, else ``chars / 4``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from torchroute.data.table import TableError

log = logging.getLogger(__name__)

PRICE_KEYS = ("input_per_mtok", "output_per_mtok")


def read_prices(
    prices: Mapping[str, Any] | str | Path, *, trust_pickle: bool = False
) -> dict[str, tuple[float, float]]:
    """``{model: (input_per_mtok, output_per_mtok)}`` from a mapping or a CSV.

    Args:
        prices: ``{model: {"input_per_mtok": p, "output_per_mtok": q}}`` or a CSV/Parquet
            file with columns ``model``, ``input_per_mtok``, ``output_per_mtok``. Every
            model is also keyed by the last ``/`` part of its name.
        trust_pickle: allow a pickled price table (unpickling runs code).

    Raises:
        TableError: a model lacks a price key, or a price is not a number ``>= 0``.
    """
    where = "prices"
    if not isinstance(prices, Mapping):
        from torchroute.data.generic import read_frame

        where = str(prices)
        frame = read_frame(prices, trust_pickle=trust_pickle)
        need = [c for c in ("model", *PRICE_KEYS) if c not in frame.columns]
        if need:
            raise TableError(
                f"{where}: price table needs columns {need}; got {list(frame.columns)}"
            )
        prices = {
            str(m): {k: row[k] for k in PRICE_KEYS}
            for m, (_, row) in zip(frame["model"], frame.iterrows(), strict=True)
        }
    out: dict[str, tuple[float, float]] = {}
    for model, entry in prices.items():
        if not isinstance(entry, Mapping) or any(k not in entry for k in PRICE_KEYS):
            raise TableError(
                f"{where}: the price of {model!r} must be {{input_per_mtok, output_per_mtok}} "
                f"(dollars per million tokens), got {entry!r}"
            )
        pair = []
        for k in PRICE_KEYS:
            try:
                value = float(entry[k])
            except (TypeError, ValueError):
                value = float("nan")
            if not (value >= 0 and np.isfinite(value)):
                raise TableError(f"{where}: {model!r} {k} must be a number >= 0, got {entry[k]!r}")
            pair.append(value)
        out[str(model).split("/")[-1]] = (pair[0], pair[1])
    out.update({str(m): out[str(m).split("/")[-1]] for m in prices})
    return out


def price_matrix(
    lookup: Mapping[str, tuple[float, float]], arms: Sequence[str], where: str
) -> np.ndarray:
    """``[2, K]`` input / output prices of ``arms`` (by full name or last ``/`` part)."""
    found = [lookup.get(a, lookup.get(a.split("/")[-1])) for a in arms]
    missing = [a for a, p in zip(arms, found, strict=True) if p is None]
    if missing:
        raise TableError(f"{where}: no price for models {missing}; it has {sorted(lookup)}")
    return np.asarray(found, dtype=np.float64).T


def count_tokens(texts: Sequence[str], tokenizer: Any = None) -> tuple[np.ndarray, str]:
    """Token counts ``[n]`` of ``texts`` and how they were counted (for the log).

    Args:
        texts: the query strings.
        tokenizer: None (estimate ``len(text) / 4``), a Hugging Face tokenizer or its name
            (loaded with ``AutoTokenizer``), an encoder holding one as ``.tokenizer`` (the
            run's text encoder), or any callable ``str -> sequence of tokens``.
    """
    if tokenizer is None:
        return np.asarray([len(t) / 4.0 for t in texts], dtype=np.float64), "chars / 4"
    if isinstance(tokenizer, str):
        from transformers import AutoTokenizer

        name = tokenizer
        tokenizer = AutoTokenizer.from_pretrained(name)
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    name = getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
    if hasattr(tokenizer, "encode"):
        counts = [len(tokenizer.encode(t, add_special_tokens=False)) for t in texts]
    elif callable(tokenizer):
        counts = [len(tokenizer(t)) for t in texts]
    else:
        raise TableError(f"tokenizer must be None, a name or a callable, got {type(tokenizer)}")
    return np.asarray(counts, dtype=np.float64), f"tokenizer {name}"


def token_costs(prices: np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray):
    """Dollars ``[n, K]``: ``(in * input_per_mtok + out * output_per_mtok) / 1e6``.

    Args:
        prices: ``[2, K]`` from :func:`price_matrix`.
        input_tokens: ``[n, K]`` or ``[n, 1]`` (NaN where unknown).
        output_tokens: ``[n, K]`` or ``[n, 1]``.
    """
    return (input_tokens * prices[0] + output_tokens * prices[1]) / 1e6
