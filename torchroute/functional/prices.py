"""Known per-model prices: the costs and utilities at the prices of this round.

A learner fitted or warmed at reference prices ``p_ref`` (``Problem.prices``, each model's
mean train cost per query) reads the prices in force now, ``p_now`` (``Context.prices``),
and converts with these rules instead of learning a price change (``docs/guides/
scenarios.md``). A price change scales every cost of a model by one factor, so a cost ``c``
at ``p_ref`` is ``c p_now / p_ref`` at ``p_now``; a model whose reference price is 0 (no
ratio) has its costs shifted by ``p_now - p_ref`` instead.

Shapes: ``costs`` and ``now`` are ``[R, B, K]``; ``ref`` broadcasts against them (``[R, 1,
K]`` or ``[K]``); ``rho`` is ``[R, B, 1]`` or ``[R, 1, 1]`` (or a float).
"""

from __future__ import annotations

import torch
from torch import Tensor


def costs_at(costs: Tensor, ref: Tensor, now: Tensor) -> Tensor:
    """The costs ``[R, B, K]`` at the prices ``now`` of ``costs`` at the prices ``ref``.

    ``costs * now / ref`` where ``ref > 0``; ``costs + (now - ref)`` where ``ref == 0``.
    With ``now == ref`` the costs come back bit for bit (a ratio of exactly 1, a shift of
    exactly 0).

    Example:
        >>> costs_at(torch.tensor([2.0, 1.0]), torch.tensor([4.0, 0.0]), torch.tensor([1.0, 3.0]))
        tensor([0.5000, 4.0000])
    """
    positive = ref > 0
    ratio = now / torch.where(positive, ref, torch.ones_like(ref))
    return torch.where(positive, costs * ratio, costs + (now - ref))


def utility_shift(ref: Tensor, now: Tensor, rho: float | Tensor) -> Tensor:
    """``-rho (p_now - p_ref)``, ``[R, B, K]``: how a model's mean utility moves when its price
    goes from ``ref`` to ``now`` (exact for ``y - rho c`` in expectation over queries;
    ``clip(., 0, 1)`` is not accounted for). Exactly 0 where ``now == ref``.

    Example:
        >>> utility_shift(torch.tensor([0.01, 0.02]), torch.tensor([0.001, 0.02]), 10.0)
        tensor([0.0900, -0.0000])
    """
    return -rho * (now - ref)


def reference_utility(
    reward: Tensor, cost: Tensor, ref: Tensor, now: Tensor, rho: float | Tensor
) -> Tensor:
    """An observed utility ``[R, B, K]`` translated to the reference prices:
    ``reward + rho (cost - c_ref)``, with ``reward = clip(y - rho cost, 0, 1)`` observed at
    the prices ``now`` (``cost`` paid there) and ``c_ref = costs_at(cost, now, ref)`` the
    same cost at the prices ``ref`` (a model priced 0 now is charged its reference price).

    Where nothing is clipped this is ``y - rho c_ref``, the utility at the reference
    prices; the clip is applied at the prices in force, so a learner whose estimates are
    moved back by :func:`utility_shift` learns the utility it is paid now (for a model
    whose utility was clipped to 0 at its reference price, what clipping at the reference
    would hide: its quality). At ``now == ref`` the reward comes back bit for bit.

    Example:
        >>> reference_utility(torch.tensor([0.9]), torch.tensor([0.001]),
        ...                   torch.tensor([0.01]), torch.tensor([0.001]), 50.0)
        tensor([0.4500])
    """
    return reward + rho * (cost - costs_at(cost, now, ref))


__all__ = ["costs_at", "reference_utility", "utility_shift"]
