"""The distinct table rows of a round's contexts, so that a costly function of a query is
computed once per query and not once per trial.

In a table replay the trials that share a seed read the same row each round (a run of
10 seeds x 21 rhos reads 10 distinct rows a round, not 210), and a choice on validation
replays every candidate on the same rows. ``Context.index`` names each context's row;
:func:`distinct_rows` finds the distinct ones and checks that the rows named alike carry
the same features (a context whose index and features disagree is computed row by row).
"""

from __future__ import annotations

import torch
from torch import Tensor


def distinct_rows(x: Tensor, index: Tensor | None) -> tuple[Tensor, Tensor] | None:
    """``(first [U], inverse [n])`` for the features ``x [n, d]`` of the table rows
    ``index [n]``: ``first`` the position of each distinct row's first context, ``inverse``
    each context's distinct row, so that ``x[first][inverse]`` equals ``x`` exactly.

    When nothing can be shared (every row differs, or two contexts of one index have
    different features) both are ``arange(n)``: ``x[first]`` is ``x`` itself, row by row
    in its order. The torch operations are the same either way, so a round's operation
    count does not depend on how many trials share a row. ``None`` (compute ``x`` as it
    is) when there is no index or the rows are off the CPU (finding them would wait on
    the device).
    """
    if index is None or x.device.type != "cpu":
        return None
    rows = index.reshape(-1)
    if rows.numel() != x.shape[0]:
        raise ValueError(f"index names {rows.numel()} rows, x has {x.shape[0]}")
    distinct, inverse = rows.unique(return_inverse=True)
    count, n = distinct.numel(), rows.numel()
    position = torch.arange(n)
    first = torch.full((count,), n).scatter_reduce(0, inverse, position, "amin")
    same = torch.equal(x[first][inverse], x)  # checked at any count: the same operations
    if count == n or not same:
        return position, position
    return first, inverse


__all__ = ["distinct_rows"]
