"""The direct method's reward model: ridge regression per arm, cross-fitted on the log."""

from __future__ import annotations

import torch
from torch import Tensor

from torchroute.functional.random import Source, uniform


def fold_assignment(n: int, folds: int, generator: Source = None) -> Tensor:
    """``[n]`` fold of each decision: a random permutation cut into ``folds`` equal parts."""
    if folds < 1 or folds > n:
        raise ValueError(f"folds must be in 1..n={n}, got {folds}")
    order = uniform(generator, (n,), dtype=torch.float64).argsort()
    fold = torch.empty(n, dtype=torch.long)
    fold[order.cpu()] = torch.arange(n) * folds // n
    return fold


def time_blocks(n: int, folds: int) -> Tensor:
    """``[n]`` block of each decision in log order: ``folds`` consecutive equal parts (for
    :func:`ridge_reward_model` with ``forward=True``)."""
    if folds < 1 or folds > n:
        raise ValueError(f"folds must be in 1..n={n}, got {folds}")
    return torch.arange(n) * folds // n


def ridge_reward_model(
    features: Tensor,
    action: Tensor,
    reward: Tensor,
    num_arms: int,
    lam: float = 1.0,
    fold: Tensor | None = None,
    forward: bool = False,
) -> Tensor:
    """Predicted reward of every arm on every logged context, ridge per arm, cross-fitted.

    For fold ``f`` the model of arm ``k`` is the ridge fit
    ``theta = (X^T X + lam I)^{-1} X^T r`` on the decisions outside ``f`` that chose ``k``;
    decisions of fold ``f`` are predicted with it (no decision predicts its own reward).
    With ``fold=None`` (or one fold) every decision is fitted and predicted on the whole log.
    Predictions are clipped to ``[0, 1]`` (utilities lie there).

    With ``forward=True`` the folds are blocks in log order (:func:`time_blocks`) and fold
    ``f`` is predicted by the fit on the folds *before* it (fold 0 by the fit on nothing,
    ``q = 0``): each decision's prediction depends on earlier decisions only, so with a
    behaviour policy that learns while it logs the doubly robust terms stay martingale
    differences (unbiased, and their bootstrap or normal intervals valid); a model fitted
    on other folds in random order also sees the decisions that the logged reward steered.

    Args:
        features: ``[n, d]`` contexts.
        action: ``[n]`` logged arms.
        reward: ``[n]`` or ``[G, n]`` rewards (one row per cost sensitivity).
        num_arms: ``K``.
        lam: the ridge penalty (``> 0``).
        fold: ``[n]`` fold of each decision (:func:`fold_assignment`, or
            :func:`time_blocks` with ``forward``).
        forward: fit each fold on the folds before it instead of on all the others.

    Returns:
        ``q_hat [n, K]`` or ``[G, n, K]`` like ``reward``.
    """
    if lam <= 0:
        raise ValueError(f"lam must be > 0, got {lam}")
    squeeze = reward.ndim == 1
    r = reward[None] if squeeze else reward  # [G, n]
    x = features.to(r.dtype)
    n, d = x.shape
    if fold is None:
        fold = torch.zeros(n, dtype=torch.long)
    fold = fold.to(x.device)
    num_folds = int(fold.max()) + 1
    onehot = torch.nn.functional.one_hot(action, num_arms).to(x.dtype)  # [n, K]
    infold = torch.nn.functional.one_hot(fold, num_folds).to(x.dtype)  # [n, F]
    if forward:  # [n, F]: rows fitted for fold f are those of earlier folds
        outside = (fold[:, None] < torch.arange(num_folds, device=x.device)).to(x.dtype)
    else:
        outside = 1.0 - infold if num_folds > 1 else infold  # [n, F]: rows fitted for fold f
    gram = torch.einsum("nf,nk,nd,ne->fkde", outside, onehot, x, x)  # [F, K, d, d]
    gram = gram + lam * torch.eye(d, dtype=x.dtype, device=x.device)
    rhs = torch.einsum("nf,nk,nd,gn->fkdg", outside, onehot, x, r)  # [F, K, d, G]
    theta = torch.linalg.solve(gram, rhs)  # [F, K, d, G]
    q = torch.einsum("nd,fkdg,nf->gnk", x, theta, infold)  # [G, n, K]
    q = q.clamp(0.0, 1.0)
    return q[0] if squeeze else q


__all__ = ["fold_assignment", "ridge_reward_model", "time_blocks"]
