"""A ridge regression of each model's cost per query on the features, fitted in closed form.

The routers that know no cost per query learn one from the train split: per model ``k``,
``w_k = argmin_w sum_i ([x_i, 1] w - c_ik)^2 + lam ||w||^2`` (the bias is penalised too),
solved at once for all ``K`` models in float64 as ``(X^T X + lam I) W = X^T C`` with
``X = [x, 1]``. The static score routers (:mod:`torchroute.learners.anchors`) and the
ridge learners' ``cost_model: ridge`` (:mod:`torchroute.learners.objective`) both use it.
"""

from __future__ import annotations

import torch
from torch import Tensor


def with_bias(x: Tensor) -> Tensor:
    """``x [..., d]`` with a column of ones appended, ``[..., d + 1]``."""
    return torch.cat([x, x.new_ones(*x.shape[:-1], 1)], -1)


def fit_cost_ridge(features: Tensor, costs: Tensor, lam: float = 1.0) -> Tensor:
    """The ridge weights ``W [d + 1, K]`` (float64) of ``costs [n, K]`` on
    ``[features, 1]`` (``features [n, d]``), regulariser ``lam > 0``.

    Example:
        >>> x = torch.tensor([[0.0], [1.0], [2.0]])
        >>> fit_cost_ridge(x, 2 * x + 1, lam=1e-9).round(decimals=6)
        tensor([[2.],
                [1.]], dtype=torch.float64)
    """
    if lam <= 0:
        raise ValueError(f"cost ridge lambda must be > 0, got {lam}")
    x = with_bias(features.double())
    gram = x.T @ x + lam * torch.eye(x.shape[1], dtype=x.dtype, device=x.device)
    return torch.linalg.solve(gram, x.T @ costs.double())


def predict_costs(weights: Tensor, x: Tensor) -> Tensor:
    """Predicted costs ``[..., K]`` of ``x [..., d]`` with ``weights [d + 1, K]``, in
    ``x``'s dtype (the weights are cast to it)."""
    return with_bias(x) @ weights.to(x.dtype)


__all__ = ["fit_cost_ridge", "predict_costs", "with_bias"]
