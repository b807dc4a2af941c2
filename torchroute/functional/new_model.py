"""A new model's prior: the known models' mean, as uncertain as the models are spread.

A model that did not exist when a learner was warm-started (or its base router fitted) is
believed to be an average one: its prediction starts at the known models' mean, and its
uncertainty is how far a model is from that mean, ``s^2``, along one direction ``E``: the
bias column where the features have one (a model's offset), else ``I / mean |x|^2``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def spread_direction(features: Tensor) -> Tensor:
    """``E [d, d]`` float64 for ``features [n, d]``: ``e e^T`` with ``e`` the (last) column
    equal to 1 on every row, else ``I / mean |x|^2`` (a unit of squared prediction)."""
    x = features.double()
    d = x.shape[1]
    ones = (x == 1).all(0).cpu()
    if bool(ones.any()):
        e = torch.zeros(d, dtype=torch.float64)
        e[int(ones.nonzero()[-1])] = 1.0
        return torch.outer(e, e)
    return torch.eye(d, dtype=torch.float64) / float(x.pow(2).sum(-1).mean())


def linear_spread(theta: Tensor, known: Tensor, features: Tensor) -> Tensor:
    """``s^2 [R]``: the variance across each trial's known models of their linear predictions
    ``x . theta_k``, averaged over the rows ``features [n, d]`` (float64).

    ``theta [R, K, d]``, ``known [R, K]`` bool. With ``m`` known models, the variance is
    ``sum_k (x . (theta_k - mean))^2 / (m - 1)`` (``m - 1`` at least 1), so its mean over
    the rows is ``sum_k (theta_k - mean)^T S (theta_k - mean) / (m - 1)`` with
    ``S = X^T X / n``; 0 for a trial with no known model.
    """
    x = features.double()
    t = theta.double()
    w = known.to(t)[..., None]  # [R, K, 1]
    count = w.sum(1)  # [R, 1]
    mean = (t * w).sum(1) / count.clamp_min(1.0)  # [R, d]
    dev = (t - mean[:, None]) * w  # [R, K, d]
    second = x.T @ x / x.shape[0]  # [d, d]
    total = torch.einsum("rkd,de,rke->r", dev, second, dev)
    return total / (count[:, 0] - 1).clamp_min(1.0)


__all__ = ["linear_spread", "spread_direction"]
