"""How good the reward oracle's surrogates are on held-out queries, against trivial predictors.

CABS-C builds the surrogate utility of an unplayed arm ``j`` from the played arm ``i`` and its
score ``y_i`` as ``s_j = clip(y^_j - rho c^_j, 0, 1)`` with ``y^_j = y_i + delta^_j``. This
module scores ``y^`` over every held-out query, every anchor ``i`` (each arm in turn) and
every neighbour ``j != i``, against the truth ``u_j = clip(Y_j - rho C_j, 0, 1)``, for:

- ``oracle``: the propagation head, ``y^_j = y_i + delta^_j`` (as CABS-C);
- ``anchor_copy``: the anchor's own score, ``y^_j = y_i``;
- ``context_head``: the context-only accuracy head, ``y^_j = y_bar_j(x)``;
- ``train_mean``: the per-arm mean train score;
- ``cooccurrence``: the train-split table ``P(Y_j = 1 | Y_i = y_i, cluster(x))`` over k-means
  clusters of the embeddings (:class:`CooccurrenceTable`).

All of them use the same cost ``c^`` (the oracle's cost head, as CABS-C does), so they differ
only in ``y^``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from torchroute.functional.cooccurrence import (
    assign_clusters,
    cooccurrence_lookup,
    cooccurrence_table,
    kmeans,
)

PREDICTORS = ("oracle", "anchor_copy", "context_head", "train_mean", "cooccurrence")
TRIVIAL = ("anchor_copy", "context_head", "train_mean")


class CooccurrenceTable:
    """``P(Y_j = 1 | Y_i = y, cluster)`` from train-split counts, smoothed.

    With ``b = 1[y_i > 1/2]``, ``n[c, i, b]`` the train queries of cluster ``c`` whose arm
    ``i`` has bit ``b`` and ``s[c, i, b, j]`` the sum of their ``Y_j``:
    ``P[c, i, b, j] = (s + prior g) / (n + prior)`` with ``g`` the same ratio over all
    clusters shrunk to the arm mean
    (:func:`~torchroute.functional.cooccurrence.cooccurrence_table`).

    Args:
        embeddings: train embeddings ``[n, d_e]``; scores: ``[n, K]`` in ``[0, 1]``.
        clusters: k-means clusters of the embeddings.
        prior: pseudo-count of the shrinkage (``>= 0``).
        seed: k-means seed.
    """

    def __init__(
        self,
        embeddings: Tensor,
        scores: Tensor,
        clusters: int = 8,
        prior: float = 2.0,
        seed: int = 0,
    ) -> None:
        self.centroids = kmeans(embeddings, clusters, seed)
        cluster = assign_clusters(embeddings, self.centroids)
        self.table = cooccurrence_table(cluster, scores, len(self.centroids), prior)

    def predict(self, embeddings: Tensor, scores: Tensor) -> Tensor:
        """``y^ [n, K(anchor i), K(j)]`` for queries ``[n, d_e]`` with true scores ``[n, K]``."""
        n, k = scores.shape
        cluster = assign_clusters(embeddings, self.centroids).repeat_interleave(k)
        anchor = torch.arange(k).repeat(n)  # query-major
        rows = cooccurrence_lookup(self.table, cluster, anchor, scores.reshape(-1))
        return rows.reshape(n, k, k)


@torch.no_grad()
def oracle_predictions(oracle: nn.Module, embeddings: Tensor, scores: Tensor) -> Tensor:
    """``y^ [n, K(anchor i), K(j)] = y_i + delta^_j(x, i, y_i)`` for every anchor."""
    n, k = scores.shape
    anchor = torch.arange(k).repeat(n)  # query-major
    y_anchor = scores.reshape(-1).float()
    delta = oracle.propagation(embeddings.float().repeat_interleave(k, 0), anchor, y_anchor)
    return (y_anchor[:, None] + delta).reshape(n, k, k).double()


def surrogate_quality(
    predictions: Mapping[str, Tensor],
    scores: Tensor,
    costs: Tensor,
    cost_used: Tensor,
    rhos: Sequence[float],
) -> dict[str, Any]:
    """Score and utility errors of surrogate predictors over ``(query, anchor i, j != i)``.

    Args:
        predictions: name -> ``y^ [n, K(anchor), K(j)]``.
        scores: true ``Y [n, K]``.
        costs: true ``C [n, K]``.
        cost_used: ``c^ [n, K]``, the cost every predictor's surrogate uses.
        rhos: cost sensitivities.

    Returns:
        ``score_mae`` (name -> mean ``|y^_j - Y_j|``), ``utility_mae`` and
        ``best_arm_rate`` (``"rho=<rho>"`` -> name -> value): the mean
        ``|clip(y^_j - rho c^_j, 0, 1) - clip(Y_j - rho C_j, 0, 1)|``, and the share of
        ``(query, anchor)`` pairs where the ``j != i`` with the largest surrogate utility
        (first on ties) has the largest true utility among ``j != i``; and
        ``oracle_beats_trivial`` (``"rho=<rho>"`` -> whether ``oracle`` has a lower
        utility MAE than each of :data:`TRIVIAL`).
    """
    scores, costs, cost_used = scores.double(), costs.double(), cost_used.double()
    n, k = scores.shape
    off = ~torch.eye(k, dtype=torch.bool)  # [i, j]: j != i
    truth = scores[:, None, :].expand(n, k, k)
    out: dict[str, Any] = {
        "score_mae": {
            name: float((y - truth).abs()[:, off].mean()) for name, y in predictions.items()
        },
        "utility_mae": {},
        "best_arm_rate": {},
    }
    beats: dict[str, bool] = {}
    for rho in rhos:
        key = f"rho={rho:g}"
        u = (scores - rho * costs).clamp(0.0, 1.0)[:, None, :].expand(n, k, k)  # [n, i, j]
        u_off = u.masked_fill(~off, -torch.inf)
        best = u_off.amax(-1)  # [n, i]
        mae, hit = {}, {}
        for name, y in predictions.items():
            s = (y - rho * cost_used[:, None, :]).clamp(0.0, 1.0)
            mae[name] = float((s - u).abs()[:, off].mean())
            pick = s.masked_fill(~off, -torch.inf).argmax(-1, keepdim=True)  # [n, i, 1]
            hit[name] = float((u.gather(-1, pick)[..., 0] >= best).double().mean())
        out["utility_mae"][key], out["best_arm_rate"][key] = mae, hit
        if "oracle" in mae:
            beats[key] = all(mae["oracle"] < mae[t] for t in TRIVIAL if t in mae)
    out["oracle_beats_trivial"] = beats
    return out


def predictor_table(
    oracle: nn.Module,
    embeddings: Tensor,
    scores: Tensor,
    train_mean: Tensor,
    cooccurrence: CooccurrenceTable | None,
) -> dict[str, Tensor]:
    """The ``y^ [n, K, K]`` of every predictor of the module docstring on held-out queries."""
    n, k = scores.shape
    scores = scores.double()
    with torch.no_grad():
        y_bar = oracle.accuracy(embeddings.float()).double()  # [n, K]
    preds = {
        "oracle": oracle_predictions(oracle, embeddings, scores),
        "anchor_copy": scores[:, :, None].expand(n, k, k),
        "context_head": y_bar[:, None, :].expand(n, k, k),
        "train_mean": train_mean.double()[None, None, :].expand(n, k, k),
    }
    if cooccurrence is not None:
        preds["cooccurrence"] = cooccurrence.predict(embeddings, scores)
    return preds
