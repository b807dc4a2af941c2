"""The static router that knows each model's averages and nothing about the query.

:class:`MeanScoreRouter` predicts every model's score for any query as its mean score on
the train split and plays ``argmax_k m_k - rho c_k``. With ``costs: mean`` (the default)
``c_k`` is the model's mean train cost too, so each trial routes every query to one model,
the best on average at its ``rho``: :class:`~torchroute.learners.simple.BestSingleArm`'s
choice without the clip of each query's utility at 0 (the two differ only where that clip
reorders two models' means). With ``costs: fitted`` it takes the costs every fitted router
takes (known per-model prices, else a ridge of the costs on the features), and sends a query
whose predicted cost outweighs its model's edge to a cheaper model. Under a known price change
either is taken at this round's prices.

What it is for: where one model is best almost everywhere (a table with a dominant model at
a low ``rho``), the best static router is often the best single model, which no query-level
predictor beats on validation. A residual learner cannot build on
:class:`~torchroute.learners.simple.BestSingleArm` (it predicts no score); on this router it
can (``base: mean_router``): with no update it makes this router's choices, and its
correction learns the query-level differences online from there.
"""

from __future__ import annotations

from torch import Tensor

from torchroute.learners.anchors import _FittedRouter
from torchroute.types import TrainSplit

#: ``mean``: each model's mean train cost for every query; ``fitted``: the costs every
#: fitted router takes (known per model, else a ridge of them on the features)
COST_KINDS = ("mean", "fitted")


class MeanScoreRouter(_FittedRouter):
    """Every model's mean train score as its prediction for every query.

    Args:
        num_trials, num_arms, dim, rho: ``R``, ``K``, ``d``, ``[R]``.
        train: the train split (scores ``[n, K]``: their column means are the predictions;
            a model the router never saw, ``Problem.hidden_arms``, is predicted 0).
        validation: the validation split, or ``None``: then ``val_utility`` is NaN (one
            candidate, nothing to choose).
        costs: ``"mean"`` (each model's mean train cost for every query: one model per
            trial) or ``"fitted"`` (known per-model prices, else a ridge of the costs).

    Shapes:
        ``act``: ``x [R, B, d]`` -> one-hot ``probs [R, B, K]``, ``action [R, B]``.
    """

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        rho: Tensor,
        train: TrainSplit,
        validation: TrainSplit | None = None,
        costs: str = "mean",
    ) -> None:
        if costs not in COST_KINDS:
            raise ValueError(f"MeanScoreRouter: costs must be one of {COST_KINDS}, got {costs!r}")
        super().__init__(num_trials, num_arms, dim, rho, train)
        if costs == "mean" and self.cost_known is None:  # a price per model stays exact
            self.cost_known = train.costs.float().mean(0).to(self.rho.device)  # [K]
            self.cost_w = None
        self._keep(means=train.scores.float().mean(0)[None])  # [1, K]
        self.choose(validation, self.rho, 1)

    def candidate_scores(self, x: Tensor) -> Tensor:
        """``x [n, d]`` -> ``[1, n, K]``: each model's mean train score, for every row."""
        return self.means.to(x.dtype)[:, None].expand(1, x.shape[0], self.num_arms)


__all__ = ["COST_KINDS", "MeanScoreRouter"]
