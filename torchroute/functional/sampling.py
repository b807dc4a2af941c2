"""Drawing arms from batched distributions with an explicit generator."""

from __future__ import annotations

import torch
from torch import Tensor


def sample_categorical(probs: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Draw one arm per row by inverting the CDF.

    Args:
        probs: ``[..., K]`` rows summing to one.
        generator: source of randomness (on the device of ``probs``).

    Returns:
        ``[...]`` long tensor of arm indices.
    """
    u = torch.rand(
        (*probs.shape[:-1], 1), generator=generator, device=probs.device, dtype=probs.dtype
    )
    cdf = probs.cumsum(-1)
    # Count the arms whose cumulative mass lies below u; clamp guards rounding at the top end.
    # torch.rand can return exactly 0: leading arms with no mass (cdf == 0) are counted too,
    # so a zero-probability arm is never drawn.
    action = ((cdf < u * cdf[..., -1:]) | (cdf <= 0)).sum(-1)
    return action.clamp_(max=probs.shape[-1] - 1)


def argmax_random_ties(
    scores: Tensor, generator: torch.Generator | None = None, tol: float = 0.0
) -> Tensor:
    """Argmax over the last dimension, breaking ties uniformly at random.

    Args:
        scores: ``[..., K]``.
        generator: source of randomness for the tie-break.
        tol: scores within ``tol`` of the maximum count as tied.

    Returns:
        ``[...]`` long tensor.
    """
    best = scores.amax(-1, keepdim=True)
    tied = scores >= best - tol
    noise = torch.rand(scores.shape, generator=generator, device=scores.device)
    return torch.where(tied, noise, noise.new_full((), -1.0)).argmax(-1)


def one_hot_probs(action: Tensor, num_arms: int, dtype: torch.dtype) -> Tensor:
    """``[...]`` arm indices -> ``[..., K]`` one-hot distribution."""
    return torch.nn.functional.one_hot(action, num_arms).to(dtype)


def probability_floor(probs: Tensor, floor: float) -> Tensor:
    """Mix ``probs`` with the uniform distribution, as little as needed for ``p_k >= floor``.

    ``p' = (1 - lam) p + lam / K`` with the smallest ``lam in [0, 1]`` that lifts the
    smallest entry of each row to ``floor`` (CABS Assumption 4.5).

    Args:
        probs: ``[..., K]`` distributions.
        floor: minimum probability, at most ``1 / K``.

    Returns:
        ``[..., K]`` distributions with every entry ``>= floor``.
    """
    k = probs.shape[-1]
    if floor <= 0:
        return probs
    if floor > 1.0 / k:
        raise ValueError(f"floor={floor} is above 1/K={1.0 / k:.4g}; no distribution meets it")
    p_min = probs.amin(-1, keepdim=True)
    lam = ((floor - p_min) / (1.0 / k - p_min).clamp_min(1e-12)).clamp(0.0, 1.0)
    return (1 - lam) * probs + lam / k
