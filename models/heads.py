"""Oracle heads on a frozen encoder output, and the :class:`MultiHeadOracle` that bundles them.

``docs/papers/cabs.md`` (oracles). Every head is a plain ``nn.Module`` on a ``[n, d]`` input; in the
:class:`MultiHeadOracle` the :class:`FeatureHead` is the shared trunk (``[n, d_e] -> [n, 128]``)
and the accuracy, propagation and cost heads read its output, so the bandit features are
trained by every head's loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn


def _mlp(dim_in: int, hidden: int, dim_out: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(dim_in, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, dim_out)
    )


class FeatureHead(nn.Module):
    """Bandit features ``phi = tanh(MLP(e))`` in ``[-1, 1]^{d_out}``.

    Args:
        dim_in: ``d_e``, the encoder output dimension (384 for MiniLM).
        dim_out: ``d_phi``, the feature dimension (128 by default).
        hidden: hidden width.
        dropout: dropout after the hidden layer.

    Shapes:
        ``e [n, d_e]`` -> ``phi [n, d_phi]``.
    """

    def __init__(self, dim_in: int, dim_out: int = 128, hidden: int = 256, dropout: float = 0.1):
        super().__init__()
        self.net = _mlp(dim_in, hidden, dim_out, dropout)

    def forward(self, e: Tensor) -> Tensor:
        """Bandit features ``phi [n, 128]`` in ``(-1, 1)`` from embeddings ``e [n, d_e]``."""
        return torch.tanh(self.net(e))


class AccuracyHead(nn.Module):
    """Context-only accuracy ``y_bar = sigmoid(MLP(x))`` in ``[0, 1]^K``.

    Shapes:
        ``x [n, d]`` -> ``y_bar [n, K]``.
    """

    def __init__(self, dim_in: int, num_arms: int, hidden: int = 128, dropout: float = 0.1):
        super().__init__()
        self.net = _mlp(dim_in, hidden, num_arms, dropout)

    def forward(self, x: Tensor) -> Tensor:
        """Per-arm accuracies ``[n, K]`` in ``(0, 1)`` from ``x [n, d_in]``."""
        return torch.sigmoid(self.net(x))


class PropagationHead(nn.Module):
    """Score differences ``delta^_j ~ Y[x, j] - Y[x, i]`` given anchor arm ``i`` and ``y_i``.

    The input is ``[x, onehot(i), y_i]``; the output is ``tanh`` (a difference of two
    scores in ``[0, 1]`` lies in ``[-1, 1]``) and is exactly zero at the anchor.

    Shapes:
        ``x [n, d]``, ``anchor [n]`` (long), ``y_anchor [n]`` -> ``delta^ [n, K]``.
    """

    def __init__(self, dim_in: int, num_arms: int, hidden: int = 128, dropout: float = 0.1):
        super().__init__()
        self.num_arms = num_arms
        self.net = _mlp(dim_in + num_arms + 1, hidden, num_arms, dropout)

    def forward(self, x: Tensor, anchor: Tensor, y_anchor: Tensor) -> Tensor:
        """Predicted accuracy differences ``[n, K]`` from the anchor (0 at the anchor).

        Args:
            x: ``[n, d_in]`` inputs.
            anchor: ``[n]`` index of the observed arm.
            y_anchor: ``[n]`` its observed accuracy.
        """
        onehot = nn.functional.one_hot(anchor, self.num_arms).to(x.dtype)  # [n, K]
        inp = torch.cat([x, onehot, y_anchor.to(x.dtype)[:, None]], dim=-1)
        return torch.tanh(self.net(inp)) * (1.0 - onehot)


class CostHead(nn.Module):
    """Per-arm cost, trained on z-scored targets and de-normalised on output.

    Buffers ``mean [K]`` and ``std [K]`` hold the per-arm statistics of the training costs
    (set them with :meth:`set_normalization`); :meth:`normalized` returns the z-scores the
    head regresses, :meth:`forward` returns ``max(z * std + mean, 0)`` in cost units.

    Shapes:
        ``x [n, d]`` -> ``c^ [n, K]``.
    """

    def __init__(self, dim_in: int, num_arms: int, hidden: int = 128, dropout: float = 0.1):
        super().__init__()
        self.net = _mlp(dim_in, hidden, num_arms, dropout)
        self.register_buffer("mean", torch.zeros(num_arms))
        self.register_buffer("std", torch.ones(num_arms))

    @torch.no_grad()
    def set_normalization(self, costs: Tensor) -> None:
        """Per-arm mean and std of ``costs [n, K]`` (a constant arm gets ``std = 1``)."""
        costs = costs.to(self.mean)
        std = costs.std(0, unbiased=False) if costs.shape[0] > 1 else torch.ones_like(self.std)
        self.mean.copy_(costs.mean(0))
        self.std.copy_(torch.where(std > 0, std, torch.ones_like(std)))

    def normalize(self, costs: Tensor) -> Tensor:
        """Costs ``[n, K]`` -> z-scores ``[n, K]`` with the stored statistics."""
        return (costs.to(self.mean) - self.mean) / self.std

    def normalized(self, x: Tensor) -> Tensor:
        """Predicted z-scored costs ``[n, K]``."""
        return self.net(x)

    def forward(self, x: Tensor) -> Tensor:
        """Per-arm costs ``[n, K]``, de-normalised and ``>= 0``, from ``x [n, d_in]``."""
        return (self.net(x) * self.std + self.mean).clamp_min(0.0)


class MultiHeadOracle(nn.Module):
    """Feature trunk plus accuracy, propagation and cost heads over encoder embeddings.

    Args:
        embed_dim: ``d_e``, the encoder output dimension the oracle reads.
        num_arms: ``K``.
        feature_dim: ``d_phi`` of the :class:`FeatureHead` (128).
        hidden: hidden width of the trunk; the heads use half of it.
        dropout: dropout in every head.
        arm_names: the ``K`` arm names the heads were trained for (kept for checks).
        encoder_name: name or path of the encoder whose embeddings the oracle reads.

    Shapes:
        every method takes embeddings ``e [n, d_e]``; outputs as documented there.
    """

    def __init__(
        self,
        embed_dim: int,
        num_arms: int,
        feature_dim: int = 128,
        hidden: int = 256,
        dropout: float = 0.1,
        arm_names: Sequence[str] | None = None,
        encoder_name: str | None = None,
    ) -> None:
        super().__init__()
        if arm_names is not None and len(arm_names) != num_arms:
            raise ValueError(f"got {len(arm_names)} arm names for num_arms={num_arms}")
        self.embed_dim, self.num_arms, self.feature_dim = embed_dim, num_arms, feature_dim
        self.hidden, self.dropout = hidden, dropout
        self.arm_names = tuple(arm_names) if arm_names is not None else None
        self.encoder_name = encoder_name
        head_hidden = max(hidden // 2, 1)
        self.feature = FeatureHead(embed_dim, feature_dim, hidden, dropout)
        self.accuracy_head = AccuracyHead(feature_dim, num_arms, head_hidden, dropout)
        self.propagation_head = PropagationHead(feature_dim, num_arms, head_hidden, dropout)
        self.cost_head = CostHead(feature_dim, num_arms, head_hidden, dropout)

    def config(self) -> dict[str, Any]:
        """Constructor arguments (plain Python values): ``MultiHeadOracle(**config())``."""
        return {
            "embed_dim": self.embed_dim,
            "num_arms": self.num_arms,
            "feature_dim": self.feature_dim,
            "hidden": self.hidden,
            "dropout": self.dropout,
            "arm_names": list(self.arm_names) if self.arm_names is not None else None,
            "encoder_name": self.encoder_name,
        }

    def check_compatible(
        self,
        arm_names: Sequence[str] | None = None,
        embed_dim: int | None = None,
        source: str = "oracle",
    ) -> None:
        """Raise ``ValueError`` when the oracle was built for other arms or embeddings."""
        known = arm_names is not None and self.arm_names is not None
        if known and tuple(arm_names) != self.arm_names:
            missing = sorted(set(arm_names) - set(self.arm_names))
            extra = sorted(set(self.arm_names) - set(arm_names))
            raise ValueError(
                f"{source} was trained for arms {list(self.arm_names)}, but the data has "
                f"arms {list(arm_names)} (not in the oracle: {missing}; only in the "
                f"oracle: {extra}); arm sets and order must match"
            )
        if embed_dim is not None and embed_dim != self.embed_dim:
            raise ValueError(
                f"{source} reads {self.embed_dim}-d embeddings (encoder "
                f"{self.encoder_name!r}), but the data has {embed_dim}-d embeddings; embed "
                "the queries with the encoder the oracle was trained on"
            )

    def features(self, e: Tensor) -> Tensor:
        """Bandit features ``[n, d_phi]``."""
        return self.feature(e)

    def accuracy(self, e: Tensor) -> Tensor:
        """Context-only accuracies ``y_bar [n, K]`` in ``[0, 1]``."""
        return self.accuracy_head(self.feature(e))

    def cost(self, e: Tensor) -> Tensor:
        """Costs ``c^ [n, K]`` (de-normalised, ``>= 0``)."""
        return self.cost_head(self.feature(e))

    def propagation(self, e: Tensor, anchor: Tensor, y_anchor: Tensor) -> Tensor:
        """Differences ``delta^ [n, K]`` for anchor arms ``[n]`` with accuracies ``[n]``."""
        return self.propagation_head(self.feature(e), anchor, y_anchor)

    def forward(self, e: Tensor) -> dict[str, Tensor]:
        """``e [n, d_e]`` -> ``{"features": [n, d_phi], "accuracy": [n, K], "cost": [n, K]}``."""
        phi = self.feature(e)
        return {"features": phi, "accuracy": self.accuracy_head(phi), "cost": self.cost_head(phi)}
