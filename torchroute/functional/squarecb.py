"""SquareCB's inverse-gap-weighting distribution (Foster & Rakhlin 2020; CABS Algorithm 3)."""

from __future__ import annotations

import torch
from torch import Tensor


def squarecb_probs(rewards: Tensor, gamma: float, mu: float | None = None) -> Tensor:
    """Inverse gap weighting in reward form.

    With ``b = argmax_k r_k``: ``p_k = 1 / (mu + gamma (r_b - r_k))`` for ``k != b`` and
    ``p_b = 1 - sum_{k != b} p_k``.

    Args:
        rewards: predicted rewards ``[..., K]``.
        gamma: exploitation strength (> 0).
        mu: ``K`` by default (must be ``>= K`` for a valid distribution).

    Returns:
        ``[..., K]`` probabilities.
    """
    k = rewards.shape[-1]
    mu = float(k) if mu is None else mu
    if mu < k:
        raise ValueError(f"mu must be >= K={k}, got {mu}")
    if gamma <= 0:
        raise ValueError(f"gamma must be > 0, got {gamma}")
    best = rewards.argmax(-1, keepdim=True)  # [..., 1]
    gap = rewards.gather(-1, best) - rewards  # >= 0
    probs = 1.0 / (mu + gamma * gap)
    is_best = torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, best, True)
    probs = probs.masked_fill(is_best, 0.0)
    return probs.scatter(-1, best, 1.0 - probs.sum(-1, keepdim=True))
