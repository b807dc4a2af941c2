"""Drawing arms from batched distributions with an explicit source of randomness.

``generator`` is a ``torch.Generator`` (``None``: torch's global one) or per-trial streams
(:class:`torchroute.functional.random.TrialRNG`, shapes then lead with ``R``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from torchroute.functional.random import Source, TrialRNG, uniform


def sample_categorical(probs: Tensor, generator: Source = None) -> Tensor:
    """Draw one arm per row by inverting the CDF (the entry point of categorical draws).

    Args:
        probs: ``[..., K]`` rows summing to one (``[R, ..., K]`` with a ``TrialRNG``).
        generator: source of randomness (on the device of ``probs``).

    Returns:
        ``[...]`` long tensor of arm indices.
    """
    u = uniform(generator, (*probs.shape[:-1], 1), dtype=probs.dtype, device=probs.device)
    cdf = probs.cumsum(-1)
    # Count the arms whose cumulative mass lies below u; clamp guards rounding at the top end.
    # a uniform can be exactly 0: leading arms with no mass (cdf == 0) are counted too,
    # so a zero-probability arm is never drawn.
    action = ((cdf < u * cdf[..., -1:]) | (cdf <= 0)).sum(-1)
    return action.clamp_(max=probs.shape[-1] - 1)


def sample_multinomial(probs: Tensor, generator: Source = None) -> Tensor:
    """One draw per row of ``probs [R, ..., n]`` -> ``[R, ...]`` long.

    ``torch.multinomial`` with a torch generator (its numbers), :func:`sample_categorical`
    with a ``TrialRNG``.
    """
    if isinstance(generator, TrialRNG):
        return sample_categorical(probs, generator)
    flat = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=generator)
    return flat.reshape(probs.shape[:-1])


def argmax_random_ties(scores: Tensor, generator: Source = None, tol: float = 0.0) -> Tensor:
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
    noise = uniform(generator, scores.shape, device=scores.device)
    return torch.where(tied, noise, noise.new_full((), -1.0)).argmax(-1)


def tie_probs(scores: Tensor, action: Tensor | None = None) -> Tensor:
    """Uniform over the arms tied at the top of ``scores [R, B, K]`` -> ``[R, B, K]`` float64.

    The distribution of :func:`argmax_random_ties`. With
    ``action [R, B]``, a row whose ``action`` is not among the tied arms (another kernel
    rounded the scores differently) is that action's one-hot vector.
    """
    tied = (scores >= scores.amax(-1, keepdim=True)).double()  # [R, B, K]
    probs = tied / tied.sum(-1, keepdim=True)
    if action is None:
        return probs
    chosen = torch.nn.functional.one_hot(action, scores.shape[-1]).double()
    inside = (tied * chosen).sum(-1, keepdim=True) > 0  # [R, B, 1]
    return torch.where(inside, probs, chosen)


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
