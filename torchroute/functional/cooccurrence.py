"""K-means clusters of embeddings and the co-occurrence table ``P(Y_j = 1 | Y_i = b, cluster)``.

Used by the co-occurrence propagation head of :class:`torchroute.models.MultiHeadOracle`
(``propagation="cooccurrence"``) and by the co-occurrence baseline of the pre-training
metrics.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def kmeans(x: Tensor, k: int, seed: int = 0, iters: int = 50) -> Tensor:
    """Lloyd's k-means from ``k`` distinct rows drawn with ``seed``: ``x [n, d]`` -> ``[k, d]``.

    ``k`` is capped at ``n``; an empty cluster keeps its previous centroid.
    """
    x = x.double()
    k = min(k, x.shape[0])
    gen = torch.Generator().manual_seed(seed)
    centroids = x[torch.randperm(x.shape[0], generator=gen)[:k]].clone()
    for _ in range(iters):
        onehot = nn.functional.one_hot(assign_clusters(x, centroids), k).double()  # [n, k]
        count = onehot.sum(0)
        mean = (onehot.T @ x) / count.clamp_min(1.0)[:, None]
        centroids = torch.where(count[:, None] > 0, mean, centroids)
    return centroids


def assign_clusters(x: Tensor, centroids: Tensor) -> Tensor:
    """Index ``[n]`` of the nearest centroid (Euclidean; first on ties) of ``x [n, d]``."""
    return torch.cdist(x.double(), centroids.double()).argmin(1)


def cooccurrence_table(cluster: Tensor, scores: Tensor, clusters: int, prior: float) -> Tensor:
    """Smoothed ``P[c, i, b, j] ~ P(Y_j = 1 | 1[Y_i > 1/2] = b, cluster c)``, ``[C, K, 2, K]``.

    With ``n[c, i, b]`` the queries of cluster ``c`` whose arm ``i`` has bit ``b`` and
    ``s[c, i, b, j]`` the sum of their ``Y_j``: ``g[i, b, j] = (S + prior m_j) / (N + prior)``
    (clusters pooled, shrunk to the arm mean ``m_j``) and
    ``P[c, i, b, j] = (s + prior g) / (n + prior)``.

    Args:
        cluster: ``[n]`` cluster index of each query.
        scores: ``[n, K]`` in ``[0, 1]``.
        clusters: ``C``.
        prior: pseudo-count ``>= 0``.
    """
    scores = scores.double()
    c = nn.functional.one_hot(cluster, clusters).double()  # [n, C]
    bit = (scores > 0.5).double()
    sides = torch.stack([1.0 - bit, bit], dim=-1)  # [n, K(i), 2]
    n_cib = torch.einsum("nc,nib->cib", c, sides)  # [C, K, 2]
    s_cibj = torch.einsum("nc,nib,nj->cibj", c, sides, scores)  # [C, K, 2, K]
    m = scores.mean(0)
    g = (s_cibj.sum(0) + prior * m) / (n_cib.sum(0)[..., None] + prior)  # [K, 2, K]
    return (s_cibj + prior * g) / (n_cib[..., None] + prior)


def cooccurrence_lookup(table: Tensor, cluster: Tensor, anchor: Tensor, y_anchor: Tensor) -> Tensor:
    """Rows ``table[cluster, anchor, 1[y_anchor > 1/2]] -> [n, K]`` of a ``[C, K, 2, K]`` table."""
    return table[cluster, anchor, (y_anchor > 0.5).long()]
