"""The posterior of one change in the mean of a sequence (a Bayesian single change point).

Model, for observations ``y_1..y_n`` (oldest first): either no change, with prior weight 1,
or one change after observation ``s`` (``1 <= s < n``), each with prior weight ``h`` (the
``hazard``: prior odds of a change at a given position against none). Within a segment the
observations are ``N(mu, sigma^2)`` and the segment's mean ``mu`` has the prior
``N(0, sigma^2 / lam)``. A segment of ``m`` observations of sum ``S`` then has the
marginal likelihood

    (2 pi sigma^2)^{-m/2} sqrt(lam / (m + lam)) exp(-(Q - S^2 / (m + lam)) / (2 sigma^2)),

``Q`` the sum of squares, so the Bayes factor of a change after ``s`` against none is

    log BF(s) = (S_1^2 / (s + lam) + S_2^2 / (n - s + lam) - S^2 / (n + lam)) / (2 sigma^2)
                + log(lam (n + lam) / ((s + lam) (n - s + lam))) / 2,

``S_1`` the sum of ``y_1..y_s``, ``S_2`` of the rest, ``S`` of all (the squares cancel).
The posterior of a change after ``s`` is ``P(s) = h BF(s) / (1 + h sum_s' BF(s'))``, and
the posterior mean of the last segment's mean, had it started after ``s``, is
``S_2 / (n - s + lam)``. Every split is read at once through cumulative sums, as in
:mod:`~torchroute.functional.glr` (:func:`~torchroute.functional.glr.split_sums`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from torchroute.functional.glr import split_sums


def one_change_posterior(
    values: Tensor, count: Tensor, sigma2: float, lam: float, hazard: float
) -> tuple[Tensor, Tensor]:
    """The posterior probability of a change and the change-weighted mean after it.

    Args:
        values: ``[..., M]`` the observations, oldest first; the first ``count`` of each
            sequence are read, the rest never (a NaN there does not leak in).
        count: ``[...]`` integer ``n`` per sequence, ``0 <= n <= M``.
        sigma2: the observations' variance ``sigma^2`` (> 0).
        lam: the segment means' prior precision in units of ``1 / sigma^2`` (> 0).
        hazard: ``h``, the prior odds of a change at each position (> 0).

    Returns:
        ``(p_change, after)``, each ``[...]`` float64: ``sum_s P(s)`` and
        ``sum_s P(s) S_2(s) / (n - s + lam)`` (the module doc); both 0 where ``n < 2``.
    """
    n, s, head, total = split_sums(values, count)  # S_1 = head at each s
    tail = total - head  # S_2
    rest = n - s
    log_bf = (
        head.square() / (s + lam) + tail.square() / (rest + lam) - total.square() / (n + lam)
    ) / (2.0 * sigma2) + 0.5 * torch.log(lam * (n + lam) / ((s + lam) * (rest + lam)))
    split = rest >= 1  # a change after s needs s < n
    log_w = torch.where(split, log_bf + math.log(hazard), -torch.inf)
    none = torch.zeros_like(n)  # the no-change weight, log 1
    p = torch.softmax(torch.cat([none, log_w], -1), -1)[..., 1:]  # [..., M]
    after = torch.where(split, tail / (rest + lam), 0.0)
    return p.sum(-1), (p * after).sum(-1)


__all__ = ["one_change_posterior"]
