"""Oracle math (``docs/papers/cabs.md``): surrogate utilities, IQR pruning, feedback graphs.

Pure tensor functions; :class:`torchroute.models.RewardOracle` and
:class:`torchroute.models.AffinityOracle` are thin modules that feed them the outputs of the
pre-trained heads.
"""

from __future__ import annotations

import torch
from torch import Tensor

from torchroute.functional.random import Source, uniform
from torchroute.functional.utility import utility


def surrogate_utility(y_anchor: Tensor, delta: Tensor, cost: Tensor, rho: Tensor) -> Tensor:
    """Surrogate utilities ``s_j = clip(y_i + delta^_j - rho c^_j, 0, 1)`` of the reward oracle.

    The played (anchor) arm ``i`` revealed its score ``y_i``; the propagation head predicts
    ``delta^_j ~ Y[x, j] - Y[x, i]`` and the cost head ``c^_j``. At the anchor ``delta^_i = 0``
    so ``s_i`` is the anchor's own utility under the predicted cost.

    Args:
        y_anchor: observed score of the played arm ``[R, B]``.
        delta: predicted score differences ``[R, B, K]``.
        cost: predicted costs ``[R, B, K]``.
        rho: cost sensitivity of each trial ``[R]``.

    Returns:
        ``s [R, B, K]`` in ``[0, 1]``, in the dtype of ``delta``.

    Example:
        >>> surrogate_utility(
        ...     torch.tensor([[0.8]]), torch.tensor([[[0.0, 0.5, -0.3]]]),
        ...     torch.tensor([[[1e-3, 1e-3, 2e-3]]]), torch.tensor([100.0]))
        tensor([[[0.7000, 1.0000, 0.3000]]])
    """
    y_tilde = y_anchor.to(delta.dtype)[..., None] + delta  # [R, B, K]
    return utility(y_tilde, cost, rho.to(delta.dtype)[:, None, None])


def iqr_keep_mask(delta: Tensor, anchor: Tensor) -> Tensor:
    """IQR pruning of surrogate observations (CABS Appendix D).

    Keeps arm ``j != i`` only if ``|delta^_j| > Q3 + 1.5 (Q3 - Q1)``, the quartiles taken over
    the ``K - 1`` values ``|delta^_j|``, ``j != i``, of the same round (the anchor's own
    ``delta^_i = 0`` is not a prediction and is left out). Quartiles interpolate linearly,
    as ``numpy.percentile`` does by default.

    Args:
        delta: predicted differences ``[..., K]`` (e.g. ``[R, B, K]``).
        anchor: the played arm ``[...]`` (long).

    Returns:
        ``keep [..., K]`` bool, ``False`` at the anchor.

    Example:
        >>> iqr_keep_mask(torch.tensor([0.0, 0.01, 0.02, 0.9, 0.015]), torch.tensor(0))
        tensor([False, False, False,  True, False])
    """
    k = delta.shape[-1]
    arms = torch.arange(k, device=delta.device)
    off = arms != anchor[..., None]  # [..., K]
    # Off-anchor |delta| of each row, [..., K-1] (every row has exactly K - 1 of them).
    values = delta.abs()[off].reshape(*delta.shape[:-1], k - 1)
    q = torch.quantile(
        values, torch.tensor([0.25, 0.75], dtype=values.dtype, device=values.device), dim=-1
    )  # [2, ...]
    threshold = q[1] + 1.5 * (q[1] - q[0])
    return (delta.abs() > threshold[..., None]) & off


def affinity_from_accuracy(y_bar: Tensor) -> Tensor:
    """Arm affinities ``R[i, j] = 1 - 2 |y_bar_i - y_bar_j|`` with ``-inf`` on the diagonal.

    The diagonal is ``-inf`` so that self-loops are always drawn (CABS-C line 6).

    Args:
        y_bar: context-only accuracies ``[..., K]`` (e.g. ``[R, B, K]``).

    Returns:
        ``R [..., K, K]``, symmetric, off-diagonal values in ``[-1, 1]`` for ``y_bar`` in
        ``[0, 1]``.

    Example:
        >>> affinity_from_accuracy(torch.tensor([0.9, 0.5]))
        tensor([[  -inf, 0.2000],
                [0.2000,   -inf]])
    """
    aff = 1.0 - 2.0 * (y_bar[..., :, None] - y_bar[..., None, :]).abs()  # [..., K, K]
    eye = torch.eye(y_bar.shape[-1], dtype=torch.bool, device=y_bar.device)
    return aff.masked_fill(eye, float("-inf"))


#: Edge rules of :func:`sample_graph`.
GRAPH_RULES = ("paper", "affinity")


def edge_probability(affinity: Tensor, rule: str = "paper") -> Tensor:
    """Edge probabilities ``P(A[i, j] = 1)`` of a feedback-graph rule, ``[..., K, K]``.

    ``"paper"`` (CABS-C line 6): ``sigmoid((1 - R[i, j]) / 2)``, at least 0.5 and larger for
    *dissimilar* arms. ``"affinity"``: ``clamp((1 + R[i, j]) / 2, 0, 1)``, which for
    ``R = 1 - 2 |y_bar_i - y_bar_j|`` is ``1 - |y_bar_i - y_bar_j|``: similar arms are
    likely neighbours. Both give the ``-inf`` diagonal probability 1 (self-loops).

    Args:
        affinity: ``R [..., K, K]``, diagonal ``-inf``.
        rule: ``"paper"`` or ``"affinity"``.

    Example:
        >>> edge_probability(affinity_from_accuracy(torch.tensor([0.9, 0.5])), "affinity")
        tensor([[1.0000, 0.6000],
                [0.6000, 1.0000]])
    """
    if rule not in GRAPH_RULES:
        raise ValueError(f"graph rule must be one of {GRAPH_RULES}, got {rule!r}")
    if rule == "paper":
        return torch.sigmoid((1.0 - affinity) / 2.0)
    eye = torch.eye(affinity.shape[-1], dtype=torch.bool, device=affinity.device)
    return ((1.0 + affinity) / 2.0).clamp(0.0, 1.0).masked_fill(eye, 1.0)


def sample_graph(affinity: Tensor, generator: Source = None, *, rule: str = "paper") -> Tensor:
    """Feedback graph ``A[i, j] ~ Bernoulli(P_ij)``, ``A[i, i] = 1``.

    ``P_ij`` is :func:`edge_probability` of ``rule``: ``"paper"`` (the default,
    ``sigmoid((1 - R[i, j]) / 2)``) or ``"affinity"`` (``clamp((1 + R[i, j]) / 2, 0, 1)``).
    Every edge is an independent draw (one uniform per entry, whatever the rule).

    Args:
        affinity: ``R [..., K, K]`` (e.g. ``[R, B, K, K]``), diagonal ``-inf``.
        generator: the run's generator or per-trial streams (on the device of ``affinity``).
        rule: ``"paper"`` or ``"affinity"``.

    Returns:
        ``A [..., K, K]`` bool; row ``i`` is the neighbourhood revealed by playing ``i``.
    """
    prob = edge_probability(affinity, rule)  # [..., K, K]
    u = uniform(generator, affinity.shape, dtype=prob.dtype, device=affinity.device)
    eye = torch.eye(affinity.shape[-1], dtype=torch.bool, device=affinity.device)
    return (u < prob) | eye


__all__ = [
    "GRAPH_RULES",
    "affinity_from_accuracy",
    "edge_probability",
    "iqr_keep_mask",
    "sample_graph",
    "surrogate_utility",
]
