"""Batched math of multinomial subset routing with sum-max rewards (paper 002).

docs/papers/subset.md: ``M`` i.i.d. draws from ``q``; the routed subset is the set of
distinct draws; the reward is ``r(A) = sum_n max_{i in A} V[n, i]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from torchroute.functional.random import Source
from torchroute.functional.sampling import sample_categorical


def draw_multiset(q: Tensor, draws: int, generator: Source = None) -> Tensor:
    """``M`` i.i.d. draws from each row of ``q [..., K]``; returns ``[..., M]`` (long)."""
    expanded = q[..., None, :].expand(*q.shape[:-1], draws, q.shape[-1])
    return sample_categorical(expanded, generator)


def draw_counts(action: Tensor, num_arms: int, dtype: torch.dtype) -> Tensor:
    """``#{j : a_j = i}`` for a multiset ``action [..., M]``; returns ``[..., K]``."""
    counts = torch.zeros(*action.shape[:-1], num_arms, dtype=dtype, device=action.device)
    return counts.scatter_add_(-1, action, torch.ones_like(action, dtype=dtype))


def subset_mask(action: Tensor, num_arms: int) -> Tensor:
    """The routed subset (distinct draws) of ``action [..., M]`` as a ``[..., K]`` bool mask."""
    return draw_counts(action, num_arms, torch.float32) > 0


def sum_max_reward(values: Tensor, mask: Tensor) -> Tensor:
    """``r(A) = sum_n max_{i in A} V[n, i]``.

    Args:
        values: ``[..., N, K]`` facet values ``V >= 0``.
        mask: ``[..., K]`` bool, the subset ``A`` (non-empty).

    Returns:
        ``[...]``.
    """
    masked = torch.where(mask[..., None, :], values, torch.finfo(values.dtype).min)
    return masked.amax(-1).sum(-1)


def expected_sum_max(q: Tensor, values: Tensor, draws: int) -> Tensor:
    """``Phi(q) = E_{A ~ q}[r(A)]`` in closed form (concave in ``q``).

    With the values of facet ``n`` sorted decreasingly ``v_(1) >= ... >= v_(K)``
    (``v_(K+1) = 0``) and ``Q_j`` the mass of the top ``j``:
    ``E[max_{i in A} V[n, i]] = sum_j (v_(j) - v_(j+1)) (1 - (1 - Q_j)^M)``.

    Args:
        q: ``[..., K]`` policies.
        values: ``[..., N, K]`` facet values (``>= 0``).
        draws: ``M``, the draws per round.

    Returns:
        ``[...]``.
    """
    v, order = values.sort(-1, descending=True)  # [..., N, K]
    qs = q[..., None, :].expand_as(values).gather(-1, order)
    mass = qs.cumsum(-1).clamp(max=1.0)
    gaps = v - torch.cat([v[..., 1:], torch.zeros_like(v[..., :1])], -1)
    return (gaps * (1.0 - (1.0 - mass) ** draws)).sum((-2, -1))


def inclusion_probs(q: Tensor, draws: int) -> Tensor:
    """``P(i in A) = 1 - (1 - q_i)^M``, ``[..., K]``."""
    return 1.0 - (1.0 - q) ** draws
