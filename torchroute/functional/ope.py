"""Off-policy estimators of a target policy's value from logged decisions, batched.

A log holds ``n`` decisions ``(x_i, a_i, mu_i, r_i)``: context, chosen arm, the behaviour
policy's probability of it, and the reward (utility) that came back. A target policy gives
``pi(k | x_i)``; with the importance weight ``w_i = pi(a_i | x_i) / mu_i`` and a reward model
``q(x_i, k)``, the estimators of ``V(pi) = E_x E_{k ~ pi} r(x, k)`` are the means of::

    ips         w_i r_i                                          (Horvitz-Thompson)
    snips       sum_i w_i r_i / sum_i w_i                        (self-normalised)
    dm          sum_k pi(k|x_i) q(x_i, k)                        (direct method)
    dr          dm_i + w_i (r_i - q(x_i, a_i))                   (doubly robust)
    switch_dr   dm_i + 1[w_i <= tau] w_i (r_i - q(x_i, a_i))     (switch: no correction
                                                                  where the weight is large)
    clipped_dr  dm_i + min(w_i, M) (r_i - q(x_i, a_i))           (weight clipping)

Everything is computed at once for ``P`` target policies and ``B`` bootstrap replicates
(resampling the ``n`` decisions with replacement): per-decision terms ``[E, P, n]`` times
the replicate counts ``[n, B]`` give the replicate estimates ``[E, P, B]`` in one matmul.

Learning policies, whose probabilities change with what they see, are evaluated by
:func:`~torchroute.functional.replay.replay` (re-exported here); the direct method's reward
model is :func:`~torchroute.functional.ope_model.ridge_reward_model`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from torchroute.functional.random import Source, integers
from torchroute.functional.replay import ReplayResult, replay

ESTIMATORS = ("ips", "snips", "dm", "dr", "switch_dr", "clipped_dr")
NEEDS_MODEL = ("dm", "dr", "switch_dr", "clipped_dr")
Interval = Literal["bootstrap", "bernstein", "normal"]


@dataclass(frozen=True)
class OPEEstimate:
    """Estimates of ``E`` estimators for ``P`` targets.

    Attributes:
        estimators: the ``E`` estimator names.
        value: ``[E, P]`` point estimates.
        std_error: ``[E, P]`` standard errors (sample std of the per-decision terms over
            ``sqrt(n)``; SNIPS by the delta method).
        lower, upper: ``[E, P]`` bounds of the ``1 - alpha`` interval.
        ess: ``[P]`` effective sample size ``(sum w)^2 / sum w^2`` of each target.
        replicates: ``[E, P, B]`` bootstrap estimates, or ``None``.
    """

    estimators: tuple[str, ...]
    value: Tensor
    std_error: Tensor
    lower: Tensor
    upper: Tensor
    ess: Tensor
    replicates: Tensor | None = None


def importance_weights(target_probs: Tensor, action: Tensor, propensity: Tensor) -> Tensor:
    """``w = pi(a_i | x_i) / mu_i``: ``target_probs [P, n, K]``, ``action [n]``,
    ``propensity [n]`` -> ``[P, n]``."""
    p, n, k = target_probs.shape
    flat = torch.arange(n, device=action.device) * k + action  # [n]
    return target_probs.reshape(p, n * k)[:, flat] / propensity  # [P, n]


def effective_sample_size(weights: Tensor) -> Tensor:
    """``(sum_i w_i)^2 / sum_i w_i^2`` over the last dimension: ``[P, n]`` -> ``[P]``."""
    return weights.sum(-1) ** 2 / (weights**2).sum(-1).clamp_min(torch.finfo(weights.dtype).tiny)


def ope_terms(
    target_probs: Tensor,
    action: Tensor,
    propensity: Tensor,
    reward: Tensor,
    q_hat: Tensor | None = None,
    estimators: tuple[str, ...] = ESTIMATORS,
    switch_tau: float = 10.0,
    clip: float = 10.0,
) -> tuple[Tensor, Tensor]:
    """Per-decision terms of every estimator, and the importance weights.

    Args:
        target_probs: ``[P, n, K]`` the targets' distributions on the logged contexts.
        action: ``[n]`` long, the logged arms.
        propensity: ``[n]`` the behaviour policy's probability of ``action`` (``> 0``).
        reward: ``[n]`` or ``[P, n]`` reward of the logged arm (per target when targets use
            different cost sensitivities).
        q_hat: ``[n, K]`` or ``[P, n, K]`` reward model; needed by ``dm`` and the DR family.
        estimators: names from :data:`ESTIMATORS`.
        switch_tau: the weight threshold of ``switch_dr``.
        clip: the weight cap ``M`` of ``clipped_dr``.

    Returns:
        ``terms [E, P, n]`` (for ``snips`` the numerator ``w r``) and ``weights [P, n]``.
        ``mean(terms, -1)`` is each estimate except ``snips`` (divide by ``mean(w)``).
    """
    unknown = sorted(set(estimators) - set(ESTIMATORS))
    if unknown:
        raise ValueError(f"unknown estimators {unknown}; choose from {list(ESTIMATORS)}")
    if q_hat is None and set(estimators) & set(NEEDS_MODEL):
        raise ValueError(f"estimators {sorted(set(estimators) & set(NEEDS_MODEL))} need q_hat")
    p, n, k = target_probs.shape
    w = importance_weights(target_probs, action, propensity)  # [P, n]
    r = reward.expand(p, n)
    terms = target_probs.new_empty(len(estimators), p, n)  # [E, P, n]
    dm = residual = None
    if q_hat is not None:
        rows = torch.arange(n, device=action.device)
        if q_hat.ndim == 2:  # one model for every target: [n, K]
            dm = torch.einsum("pnk,nk->pn", target_probs, q_hat)
            residual = r - q_hat[rows, action]  # [P, n]
        else:  # [P, n, K]
            dm = torch.einsum("pnk,pnk->pn", target_probs, q_hat.expand(p, n, k))
            residual = r - q_hat.expand(p, n, k)[:, rows, action]
    for e, name in enumerate(estimators):
        if name in ("ips", "snips"):
            torch.mul(w, r, out=terms[e])
        elif name == "dm":
            terms[e] = dm
        elif name == "dr":
            torch.addcmul(dm, w, residual, out=terms[e])
        elif name == "switch_dr":
            torch.addcmul(dm, torch.where(w <= switch_tau, w, 0.0), residual, out=terms[e])
        else:  # clipped_dr
            torch.addcmul(dm, w.clamp(max=clip), residual, out=terms[e])
    return terms, w


def bootstrap_counts(
    n: int, num_replicates: int, generator: Source = None, dtype=torch.float64, device=None
) -> tuple[Tensor, Tensor]:
    """Resample ``n`` decisions with replacement ``B`` times.

    Returns:
        ``index [B, n]`` (the drawn rows) and ``counts [B, n]`` (how often each row was drawn).
    """
    where = generator.device if isinstance(generator, torch.Generator) else device
    index = integers(generator, n, (num_replicates, n), device=where).to(device)  # [B, n]
    counts = torch.zeros(num_replicates, n, dtype=dtype, device=index.device)
    counts.scatter_add_(1, index, torch.ones_like(index, dtype=dtype))
    return index, counts


def estimate(
    target_probs: Tensor,
    action: Tensor,
    propensity: Tensor,
    reward: Tensor,
    q_hat: Tensor | None = None,
    *,
    estimators: tuple[str, ...] = ESTIMATORS,
    switch_tau: float = 10.0,
    clip: float = 10.0,
    num_bootstrap: int = 200,
    interval: Interval = "bootstrap",
    alpha: float = 0.05,
    counts: Tensor | None = None,
    generator: Source = None,
) -> OPEEstimate:
    """Value estimates with intervals for ``P`` targets, every estimator in one batch.

    Args:
        target_probs, action, propensity, reward, q_hat, estimators, switch_tau, clip:
            see :func:`ope_terms` (shapes ``[P, n, K]``, ``[n]``, ``[n]``, ``[n]`` or
            ``[P, n]``, ``[n, K]`` or ``[P, n, K]``).
        num_bootstrap: ``B`` replicates (``0``: none; then ``interval`` may not be
            ``"bootstrap"``).
        interval: ``"bootstrap"`` (percentile interval of the replicates),
            ``"bernstein"`` (empirical Bernstein bound of Maurer & Pontil 2009, two-sided,
            with the observed range of the terms as the range) or ``"normal"``
            (``value +- z std_error``).
        alpha: the intervals cover with probability ``1 - alpha``.
        counts: ``[B, n]`` replicate counts to reuse (default: drawn with ``generator``).
        generator: the source of the bootstrap draws.

    Returns:
        An :class:`OPEEstimate`; ``value``, ``std_error``, ``lower``, ``upper`` ``[E, P]``,
        ``ess [P]``, ``replicates [E, P, B]``.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if interval not in ("bootstrap", "bernstein", "normal"):
        raise ValueError(f"interval must be bootstrap, bernstein or normal, got {interval!r}")
    # IPS and SNIPS share their terms (w r): one row of terms for both.
    base = tuple(dict.fromkeys("ips" if e == "snips" else e for e in estimators))
    terms, w = ope_terms(target_probs, action, propensity, reward, q_hat, base, switch_tau, clip)
    n = terms.shape[-1]
    if n < 2:
        raise ValueError(f"off-policy estimates need >= 2 decisions, got {n}")
    row = [base.index("ips" if e == "snips" else e) for e in estimators]  # estimator -> row
    e_snips = [e for e, name in enumerate(estimators) if name == "snips"]
    w_mean = w.mean(-1)  # [P]
    var, value = torch.var_mean(terms, -1, correction=1)  # [E', P] each
    var, value = var[row], value[row]  # [E, P] (copies)
    span = None
    if interval == "bernstein":
        span = (terms.amax(-1) - terms.amin(-1))[row]
    for e in e_snips:
        value[e] = value[e] / w_mean
        # SNIPS by the delta method: its influence terms w_i (r_i - V) / mean(w).
        influence = (terms[row[e]] - w * value[e][:, None]) / w_mean[:, None]  # [P, n]
        var[e] = influence.var(-1, correction=1)
        if span is not None:
            span[e] = influence.amax(-1) - influence.amin(-1)
    std_error = (var / n).sqrt()
    replicates = None
    if counts is None and num_bootstrap > 0:
        counts = bootstrap_counts(n, num_bootstrap, generator, terms.dtype, terms.device)[1]
    if counts is not None:
        counts_t = counts.to(terms.dtype).T  # [n, B]
        e_base, p_num = terms.shape[:2]
        sums = (terms.reshape(e_base * p_num, n) @ counts_t).reshape(e_base, p_num, -1)
        replicates = sums[row] / n  # [E, P, B]
        if e_snips:
            w_sums = w @ counts_t  # [P, B]
            for e in e_snips:
                replicates[e] = sums[row[e]] / w_sums
    if interval == "bootstrap":
        if replicates is None:
            raise ValueError("interval='bootstrap' needs num_bootstrap >= 1")
        q = torch.tensor([alpha / 2, 1 - alpha / 2], dtype=terms.dtype, device=terms.device)
        lower, upper = torch.quantile(replicates, q, dim=-1)
    elif interval == "bernstein":
        log_term = math.log(4.0 / alpha)
        half = (2 * var * log_term / n).sqrt() + 7 * span * log_term / (3 * (n - 1))
        lower, upper = value - half, value + half
    else:
        z = math.sqrt(2.0) * torch.special.erfinv(torch.tensor(1 - alpha, dtype=torch.float64))
        lower, upper = value - float(z) * std_error, value + float(z) * std_error
    return OPEEstimate(
        tuple(estimators), value, std_error, lower, upper, effective_sample_size(w), replicates
    )


__all__ = [
    "ESTIMATORS",
    "NEEDS_MODEL",
    "OPEEstimate",
    "ReplayResult",
    "bootstrap_counts",
    "effective_sample_size",
    "estimate",
    "importance_weights",
    "ope_terms",
    "replay",
]
