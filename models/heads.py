"""Oracle heads on a frozen encoder output, and the :class:`MultiHeadOracle` that bundles them.

``docs/papers/cabs.md`` (oracles). Every head is a plain ``nn.Module`` on a ``[n, d]`` input; in the
:class:`MultiHeadOracle` the :class:`FeatureHead` is the shared trunk (``[n, d_e] -> [n, 128]``)
and the accuracy, propagation and cost heads read its output, so the bandit features are
trained by every head's loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor, nn

from torchroute.buildable import buildable
from torchroute.functional.cooccurrence import (
    assign_clusters,
    cooccurrence_lookup,
    cooccurrence_table,
    kmeans,
)


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


PropagationOutput = Literal["delta", "bce", "cooccurrence"]
Conditioning = Literal["concat", "film", "split"]
PROPAGATION_OUTPUTS = ("delta", "bce")
CONDITIONINGS = ("concat", "film", "split")


class PropagationHead(nn.Module):
    """Score differences ``delta^_j ~ Y[x, j] - Y[x, i]`` given anchor arm ``i`` and ``y_i``.

    Two outputs (``output``):

    - ``"delta"``: ``delta^ = tanh(z)`` (a difference of two scores in ``[0, 1]`` lies in
      ``[-1, 1]``), fitted to ``Y_j - y_i`` with L1/Huber;
    - ``"bce"``: ``p^_j = sigmoid(z)`` estimates ``P(Y_j = 1 | x, i, y_i)``, fitted to ``Y_j``
      with binary cross-entropy; ``delta^ = p^_j - y_i``.

    Three ways to read the anchor (``conditioning``), ``z = `` (``[n, K]`` pre-activations):

    - ``"concat"``: ``MLP([x, onehot(i), y_i])``;
    - ``"film"``: ``W2 drop(GELU((W1 x) * (1 + g) + b))`` with ``[g, b] = V [onehot(i), y_i]``
      (feature-wise scale and shift of the hidden layer by the anchor);
    - ``"split"``: one output row per anchor value, ``z = (1 - y_i) M(x)[0, i] + y_i M(x)[1, i]``
      with ``M(x) = MLP(x)`` reshaped to ``[2, K, K]`` (exactly the row of ``(i, y_i)`` for
      0/1 scores).

    Both outputs are exactly zero at the anchor.

    Shapes:
        ``x [n, d]``, ``anchor [n]`` (long), ``y_anchor [n]`` -> ``delta^ [n, K]``.
    """

    def __init__(
        self,
        dim_in: int,
        num_arms: int,
        hidden: int = 128,
        dropout: float = 0.1,
        output: PropagationOutput = "delta",
        conditioning: Conditioning = "concat",
    ):
        super().__init__()
        if output not in PROPAGATION_OUTPUTS:
            raise ValueError(f"output must be one of {PROPAGATION_OUTPUTS}, got {output!r}")
        if conditioning not in CONDITIONINGS:
            raise ValueError(f"conditioning must be one of {CONDITIONINGS}, got {conditioning!r}")
        self.num_arms, self.output, self.conditioning = num_arms, output, conditioning
        k = num_arms
        if conditioning == "concat":
            self.net = _mlp(dim_in + k + 1, hidden, k, dropout)
        elif conditioning == "split":
            self.net = _mlp(dim_in, hidden, 2 * k * k, dropout)
        else:
            self.inp, self.film = nn.Linear(dim_in, hidden), nn.Linear(k + 1, 2 * hidden)
            self.out, self.drop = nn.Linear(hidden, k), nn.Dropout(dropout)

    def logits(self, x: Tensor, anchor: Tensor, y_anchor: Tensor) -> Tensor:
        """Pre-activations ``z [n, K]`` (logits of ``p^`` for ``output="bce"``)."""
        k = self.num_arms
        y = y_anchor.to(x.dtype)[:, None]  # [n, 1]
        onehot = nn.functional.one_hot(anchor, k).to(x.dtype)  # [n, K]
        if self.conditioning == "concat":
            return self.net(torch.cat([x, onehot, y], dim=-1))
        if self.conditioning == "split":
            table = self.net(x).reshape(-1, 2, k, k)  # [n, y, i, j]
            rows = table.gather(2, anchor[:, None, None, None].expand(-1, 2, 1, k))[:, :, 0]
            return (1.0 - y) * rows[:, 0] + y * rows[:, 1]  # [n, K]
        g, b = self.film(torch.cat([onehot, y], dim=-1)).chunk(2, dim=-1)
        h = nn.functional.gelu(self.inp(x) * (1.0 + g) + b)
        return self.out(self.drop(h))

    def forward(self, x: Tensor, anchor: Tensor, y_anchor: Tensor) -> Tensor:
        """Predicted accuracy differences ``[n, K]`` from the anchor (0 at the anchor).

        Args:
            x: ``[n, d_in]`` inputs.
            anchor: ``[n]`` index of the observed arm.
            y_anchor: ``[n]`` its observed accuracy.
        """
        z = self.logits(x, anchor, y_anchor)
        off = 1.0 - nn.functional.one_hot(anchor, self.num_arms).to(x.dtype)
        if self.output == "bce":
            return (torch.sigmoid(z) - y_anchor.to(x.dtype)[:, None]) * off
        return torch.tanh(z) * off


class CooccurrenceHead(nn.Module):
    """``delta^_j = P[cluster(e), i, 1[y_i > 1/2], j] - y_i``: a train-split co-occurrence table.

    ``P ~ P(Y_j = 1 | Y_i, cluster)`` over k-means clusters of the encoder embeddings
    (:func:`~torchroute.functional.cooccurrence.cooccurrence_table`); no trainable weights.
    Buffers ``centroids [C, d_e]`` and ``table [C, K, 2, K]`` (0.5 until :meth:`fit`).

    Shapes:
        ``e [n, d_e]``, ``anchor [n]`` (long), ``y_anchor [n]`` -> ``delta^ [n, K]``.
    """

    output = "cooccurrence"

    def __init__(self, embed_dim: int, num_arms: int, clusters: int = 8) -> None:
        super().__init__()
        self.num_arms = num_arms
        self.register_buffer("centroids", torch.zeros(clusters, embed_dim))
        self.register_buffer("table", torch.full((clusters, num_arms, 2, num_arms), 0.5))

    @torch.no_grad()
    def fit(self, e: Tensor, scores: Tensor, prior: float = 2.0, seed: int = 0) -> None:
        """Cluster ``e [n, d_e]`` (k-means, ``seed``) and count ``scores [n, K]``."""
        centroids = kmeans(e, self.centroids.shape[0], seed)
        if centroids.shape[0] < self.centroids.shape[0]:
            raise ValueError(
                f"{self.centroids.shape[0]} clusters need at least as many train queries, "
                f"got {e.shape[0]}"
            )
        table = cooccurrence_table(assign_clusters(e, centroids), scores, len(centroids), prior)
        self.centroids.copy_(centroids)
        self.table.copy_(table)

    def forward(self, e: Tensor, anchor: Tensor, y_anchor: Tensor) -> Tensor:
        """Differences ``[n, K]`` from the anchor (0 at the anchor)."""
        cluster = assign_clusters(e, self.centroids)
        p = cooccurrence_lookup(self.table, cluster, anchor, y_anchor).to(e.dtype)
        off = 1.0 - nn.functional.one_hot(anchor, self.num_arms).to(e.dtype)
        return (p - y_anchor.to(e.dtype)[:, None]) * off


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


@buildable
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
        propagation: the propagation head: ``"delta"`` or ``"bce"``
            (:class:`PropagationHead` on the features), or ``"cooccurrence"``
            (:class:`CooccurrenceHead` on the embeddings, filled by its ``fit``).
        conditioning: how it reads the anchor, ``"concat"``, ``"film"`` or ``"split"``.
        point: the surrogate score :meth:`propagation` returns: ``"mean"`` (the head's
            estimate, ``y_i + delta^``) or ``"median"`` (``1[y_i + delta^ > 1/2]``: for 0/1
            scores the value that minimises the expected absolute error; the head and its
            training are unchanged).
        clusters: k-means clusters of a ``"cooccurrence"`` head.

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
        propagation: PropagationOutput = "delta",
        conditioning: Conditioning = "concat",
        point: Literal["mean", "median"] = "mean",
        clusters: int = 8,
    ) -> None:
        super().__init__()
        if arm_names is not None and len(arm_names) != num_arms:
            raise ValueError(f"got {len(arm_names)} arm names for num_arms={num_arms}")
        self.embed_dim, self.num_arms, self.feature_dim = embed_dim, num_arms, feature_dim
        self.hidden, self.dropout = hidden, dropout
        self.arm_names = tuple(arm_names) if arm_names is not None else None
        self.encoder_name = encoder_name
        if point not in ("mean", "median"):
            raise ValueError(f"point must be 'mean' or 'median', got {point!r}")
        self.propagation_output, self.conditioning, self.point = propagation, conditioning, point
        head_hidden = max(hidden // 2, 1)
        self.feature = FeatureHead(embed_dim, feature_dim, hidden, dropout)
        self.accuracy_head = AccuracyHead(feature_dim, num_arms, head_hidden, dropout)
        self.clusters = clusters
        self.propagation_head: nn.Module
        if propagation == "cooccurrence":
            self.propagation_head = CooccurrenceHead(embed_dim, num_arms, clusters)
        else:
            self.propagation_head = PropagationHead(
                feature_dim, num_arms, head_hidden, dropout, propagation, conditioning
            )
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
            "propagation": self.propagation_output,
            "conditioning": self.conditioning,
            "point": self.point,
            "clusters": self.clusters,
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
        x = e if self.propagation_output == "cooccurrence" else self.feature(e)
        delta = self.propagation_head(x, anchor, y_anchor)
        if self.point == "mean":
            return delta
        y = y_anchor.to(delta.dtype)[:, None]
        off = 1.0 - nn.functional.one_hot(anchor, self.num_arms).to(delta.dtype)
        return (((y + delta) > 0.5).to(delta.dtype) - y) * off

    def forward(self, e: Tensor) -> dict[str, Tensor]:
        """``e [n, d_e]`` -> ``{"features": [n, d_phi], "accuracy": [n, K], "cost": [n, K]}``."""
        phi = self.feature(e)
        return {"features": phi, "accuracy": self.accuracy_head(phi), "cost": self.cost_head(phi)}
