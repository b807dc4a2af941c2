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
:func:`~torchroute.ope.replay.replay` (it drives a learner, so it lives with the off-policy
evaluation commands); the direct method's reward model is
:func:`~torchroute.functional.ope_model.ridge_reward_model`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from torchroute.functional.random import Source, integers
from torchroute.functional.threads import single_threaded

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


def _chunk_terms(
    probs: Tensor,
    action: Tensor,
    propensity: Tensor,
    reward: Tensor,
    q_hat: Tensor | None,
    q_logged: Tensor | None,
    estimators: tuple[str, ...],
    switch_tau: float,
    clip: float,
    terms: Tensor,
    weights: Tensor,
) -> None:
    """Write the terms ``[E, c, n]`` and weights ``[c, n]`` of ``c`` targets into ``terms``
    and ``weights``; ``reward`` is ``[n]`` or ``[c, n]``, ``q_hat`` ``[n, K]`` or
    ``[c, n, K]``, ``q_logged`` (the model at the logged arm) ``[n]`` or ``[c, n]``."""
    c, n, k = probs.shape
    dm = residual = None
    if q_hat is not None:
        # sum over the K arms as a matrix-vector product (faster than a last-dim sum)
        dm = (probs * q_hat) @ probs.new_ones(k)  # [c, n]
        residual = reward - q_logged  # [n] or [c, n]
    index = action.view(1, n, 1).expand(c, n, 1)  # probs is in cache after the product
    torch.div(probs.gather(2, index).view(c, n), propensity, out=weights)
    for e, name in enumerate(estimators):
        if name in ("ips", "snips"):
            torch.mul(weights, reward, out=terms[e])
        elif name == "dm":
            terms[e] = dm
        elif name == "dr":
            torch.addcmul(dm, weights, residual, out=terms[e])
        elif name == "switch_dr":
            torch.addcmul(
                dm, torch.where(weights <= switch_tau, weights, 0.0), residual, out=terms[e]
            )
        else:  # clipped_dr
            torch.addcmul(dm, weights.clamp(max=clip), residual, out=terms[e])


def _logged_model(q_hat: Tensor | None, action: Tensor) -> Tensor | None:
    """``q_hat`` at the logged arms: ``[n, K]`` -> ``[n]``, ``[P, n, K]`` -> ``[P, n]``."""
    if q_hat is None:
        return None
    n = action.shape[0]
    if q_hat.ndim == 2:
        return q_hat.gather(1, action.view(n, 1)).view(n)
    return q_hat.gather(2, action.view(1, n, 1).expand(q_hat.shape[0], n, 1)).view(-1, n)


def _check_estimators(estimators: tuple[str, ...], q_hat: Tensor | None) -> None:
    unknown = sorted(set(estimators) - set(ESTIMATORS))
    if unknown:
        raise ValueError(f"unknown estimators {unknown}; choose from {list(ESTIMATORS)}")
    if q_hat is None and set(estimators) & set(NEEDS_MODEL):
        raise ValueError(f"estimators {sorted(set(estimators) & set(NEEDS_MODEL))} need q_hat")


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
    _check_estimators(estimators, q_hat)
    p, n, _ = target_probs.shape
    terms = target_probs.new_empty(len(estimators), p, n)  # [E, P, n]
    w = target_probs.new_empty(p, n)
    q_logged = _logged_model(q_hat, action)
    _chunk_terms(
        target_probs,
        action,
        propensity,
        reward,
        q_hat,
        q_logged,
        estimators,
        switch_tau,
        clip,
        terms,
        w,
    )
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


def _rows_of(x: Tensor | None, lo: int, hi: int, p: int, ndim: int) -> Tensor | None:
    """Rows ``lo:hi`` of a per-target tensor, or the tensor itself when shared by all."""
    if x is None or x.ndim < ndim or x.shape[0] != p:
        return x
    return x[lo:hi]


def _quantiles(x: Tensor, q: tuple[float, float]) -> tuple[Tensor, Tensor]:
    """``np.quantile(x, q, axis=-1)`` (linear interpolation) of a ``[..., B]`` tensor for a
    low and a high level; only the few order statistics they need are selected."""
    b = x.shape[-1]
    h_lo, h_hi = (b - 1) * q[0], (b - 1) * q[1]
    i_lo, i_hi = math.floor(h_lo), math.floor(h_hi)
    smallest = x.topk(min(i_lo + 2, b), -1, largest=False).values  # ascending
    largest = x.topk(min(b - i_hi, b), -1).values  # descending: order stat m at b - 1 - m

    def order(m: int, low: bool) -> Tensor:
        m = min(m, b - 1)
        return smallest[..., m] if low else largest[..., b - 1 - m]

    out = []
    for h, i, low in ((h_lo, i_lo, True), (h_hi, i_hi, False)):
        a, c = order(i, low), order(i + 1, low)
        out.append(a + (h - i) * (c - a))
    return out[0], out[1]


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
    bootstrap_dtype: torch.dtype = torch.float32,
) -> OPEEstimate:
    """Value estimates with intervals for ``P`` targets, every estimator in one batch.

    The per-decision terms are computed a few targets at a time (a chunk that stays in
    cache), centred on their mean, and the bootstrap replicates are the mean plus the
    centred terms ``[R, P, n]`` times the replicate counts ``[n, B]``: one matmul in
    ``bootstrap_dtype``. The point estimates and standard errors are in the inputs' dtype.

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
        bootstrap_dtype: the dtype of the replicate matmul. ``float32`` (default; integer
            counts are exact in it) leaves each replicate within about ``1e-7`` of the
            bootstrap spread of its float64 value, since the terms are centred first;
            ``float64`` makes the replicates exact.

    Returns:
        An :class:`OPEEstimate`; ``value``, ``std_error``, ``lower``, ``upper`` ``[E, P]``,
        ``ess [P]``, ``replicates [E, P, B]`` (in the inputs' dtype).
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if interval not in ("bootstrap", "bernstein", "normal"):
        raise ValueError(f"interval must be bootstrap, bernstein or normal, got {interval!r}")
    _check_estimators(estimators, q_hat)
    p, n, k = target_probs.shape
    if n < 2:
        raise ValueError(f"off-policy estimates need >= 2 decisions, got {n}")
    dtype, device = target_probs.dtype, target_probs.device
    # IPS and SNIPS share their terms (w r): one row of terms for both.
    base = tuple(dict.fromkeys("ips" if e == "snips" else e for e in estimators))
    row = [base.index("ips" if e == "snips" else e) for e in estimators]  # estimator -> row
    e_snips = [e for e, name in enumerate(estimators) if name == "snips"]
    i_ips = base.index("ips") if e_snips else -1
    if counts is None and num_bootstrap > 0:
        counts = bootstrap_counts(n, num_bootstrap, generator, bootstrap_dtype, device)[1]
    if interval == "bootstrap" and counts is None:
        raise ValueError("interval='bootstrap' needs num_bootstrap >= 1")
    e_base = len(base)
    num_rows = e_base + (1 if e_snips else 0)  # the centred weights go last, for SNIPS
    value = target_probs.new_empty(num_rows, p)  # means of the terms (and of w)
    sq = target_probs.new_empty(num_rows, p)  # sums of squared deviations
    # max - min of the terms (snips: of its influence terms), for the Bernstein bound
    span = target_probs.new_empty(num_rows, p) if interval == "bernstein" else None
    w_sums = target_probs.new_empty(2, p)  # sum w and sum w^2, for the ESS
    centred = None
    if counts is not None:
        centred = torch.empty(num_rows, p, n, dtype=bootstrap_dtype, device=device)
    # a chunk of targets whose probabilities and terms take about 2 MB
    step = max(1, (1 << 18) // (n * (k + num_rows + 2)))
    with single_threaded(device):
        q_logged = _logged_model(q_hat, action)
        terms = target_probs.new_empty(num_rows, min(step, p), n)
        w_buffer = terms[e_base] if e_snips else target_probs.new_empty(min(step, p), n)
        for lo in range(0, p, step):
            hi = min(lo + step, p)
            t = terms[:, : hi - lo]
            _chunk_terms(
                target_probs[lo:hi],
                action,
                propensity,
                _rows_of(reward, lo, hi, p, 2),
                _rows_of(q_hat, lo, hi, p, 3),
                _rows_of(q_logged, lo, hi, p, 2),
                base,
                switch_tau,
                clip,
                t[:e_base],
                w_buffer[: hi - lo],
            )
            w_chunk = w_buffer[: hi - lo]
            w_sums[0, lo:hi] = w_chunk.sum(-1)
            w_sums[1, lo:hi] = (w_chunk * w_chunk).sum(-1)
            mean = t.mean(-1, keepdim=True)  # [R, c, 1]
            value[:, lo:hi] = mean[..., 0]
            dev = t - mean  # [R, c, n]
            sq[:, lo:hi] = (dev * dev).sum(-1)
            if span is not None:
                span[:, lo:hi] = t.amax(-1) - t.amin(-1)
            if e_snips:
                # SNIPS by the delta method: influence terms w_i (r_i - V) / mean(w), which are
                # (dev_wr_i - V dev_w_i) / mean(w) with V = mean(w r) / mean(w).
                v = mean[i_ips] / mean[e_base]  # [c, 1]
                influence = (dev[i_ips] - v * dev[e_base]) / mean[e_base]
                sq[e_base, lo:hi] = (influence * influence).sum(-1)
                if span is not None:
                    span[e_base, lo:hi] = influence.amax(-1) - influence.amin(-1)
            if centred is not None:
                centred[:, lo:hi] = dev
    var = (sq / (n - 1))[row]  # [E, P]
    out_value = value[row]  # [E, P] (copies)
    spans = span[row] if span is not None else None
    for e in e_snips:
        out_value[e] = value[i_ips] / value[e_base]
        var[e] = sq[e_base] / (n - 1)
        if spans is not None:
            spans[e] = span[e_base]
    std_error = (var / n).sqrt()
    replicates = None
    if centred is not None:
        counts_t = counts.to(bootstrap_dtype).T  # [n, B]
        deviation = (centred.view(num_rows * p, n) @ counts_t).view(num_rows, p, -1)
        with single_threaded(device):
            total = counts.to(dtype).sum(1)  # [B]: sum of the counts (n for a resample)
            sums = deviation.to(dtype) + value[..., None] * total  # [R, P, B]: sum_i c_bi t_i
            replicates = sums[row] / n  # [E, P, B]
            for e in e_snips:
                replicates[e] = sums[i_ips] / sums[e_base]
    with single_threaded(device):
        if interval == "bootstrap":
            lower, upper = _quantiles(replicates, (alpha / 2, 1 - alpha / 2))
        elif interval == "bernstein":
            log_term = math.log(4.0 / alpha)
            half = (2 * var * log_term / n).sqrt() + 7 * spans * log_term / (3 * (n - 1))
            lower, upper = out_value - half, out_value + half
        else:
            z = float(
                math.sqrt(2.0) * torch.special.erfinv(torch.tensor(1 - alpha, dtype=torch.float64))
            )
            lower, upper = out_value - z * std_error, out_value + z * std_error
        ess = w_sums[0] ** 2 / w_sums[1].clamp_min(torch.finfo(dtype).tiny)
    return OPEEstimate(tuple(estimators), out_value, std_error, lower, upper, ess, replicates)


__all__ = [
    "ESTIMATORS",
    "NEEDS_MODEL",
    "OPEEstimate",
    "bootstrap_counts",
    "effective_sample_size",
    "estimate",
    "importance_weights",
    "ope_terms",
]
