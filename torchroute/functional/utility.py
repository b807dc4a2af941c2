"""The cost-aware utility of a routing decision (``docs/reference/problem.md``)."""

from __future__ import annotations

from torch import Tensor


def utility(scores: Tensor, costs: Tensor, rho: float | Tensor) -> Tensor:
    """``u = clip(Y - rho C, 0, 1)``, elementwise.

    Args:
        scores: quality ``Y``, any shape (e.g. ``[n, K]`` or ``[R, B, K]``).
        costs: cost ``C``, the shape of ``scores``.
        rho: cost sensitivity ``>= 0``: a float, or a tensor that broadcasts against
            ``scores`` (``[R, 1, 1]`` for ``scores [R, B, K]``).

    Returns:
        utilities with the broadcast shape of the inputs, in ``[0, 1]``.

    Example:
        >>> import torch
        >>> utility(torch.tensor([0.9, 0.6]), torch.tensor([1e-3, 1e-4]), 500.0)
        tensor([0.4000, 0.5500])
    """
    return (scores - rho * costs).clamp(0.0, 1.0)
