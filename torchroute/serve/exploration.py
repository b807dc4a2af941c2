"""An exploration floor for a served learner: epsilon-mixing of its routing probabilities.

A deterministic rule (LinUCB's argmax, a greedy regressor) logs propensity 1 for every
decision, and a log of such decisions cannot evaluate any other router off-policy. With
``epsilon > 0`` the router plays, for each query, the learner's choice with probability
``1 - epsilon`` and a model drawn uniformly at random otherwise, so every model has
probability at least ``epsilon / K`` and the logged propensity is that of the mixture:

    p_mixed = (1 - epsilon) p + epsilon / K

where ``p [B, K]`` are the learner's routing probabilities (whatever rule produced them).
"""

from __future__ import annotations

import torch
from torch import Tensor

from torchroute.checks import check_number


def check_epsilon(epsilon: float) -> float:
    """``epsilon`` as a float in ``[0, 1]`` (else a one-line ``ValueError``)."""
    check_number("Router", "explore", epsilon, ge=0, le=1)
    return float(epsilon)


def mix_uniform(probs: Tensor, epsilon: float) -> Tensor:
    """``(1 - epsilon) probs + epsilon / K`` for ``probs [B, K]`` (rows stay on the simplex)."""
    return (1.0 - epsilon) * probs + epsilon / probs.shape[-1]


def explore(
    action: Tensor, probs: Tensor, epsilon: float, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """The served actions and their mixed probabilities.

    Args:
        action: ``[B]`` the learner's choices (drawn from ``probs``).
        probs: ``[B, K]`` the learner's routing probabilities.
        epsilon: the exploration floor in ``[0, 1]``.
        generator: the source of the coin flips and uniform draws.

    Returns:
        ``(action [B], mixed [B, K])``: each action replaced, with probability ``epsilon``,
        by a uniformly drawn model, so that it is distributed as ``mixed``.
    """
    if epsilon == 0:
        return action, probs
    b, k = probs.shape
    coin = torch.rand(b, generator=generator, dtype=torch.float64) < epsilon
    uniform = torch.randint(k, (b,), generator=generator)
    return torch.where(coin, uniform, action), mix_uniform(probs, epsilon)


__all__ = ["check_epsilon", "explore", "mix_uniform"]
