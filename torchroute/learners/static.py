"""Static routers fitted offline: a regressor on oracle heads and cosine k-nearest neighbours.

Both pick ``argmax_k y^_k - rho c^_k`` per trial (each trial has its own ``rho``; a request
that carries its own trade-off, ``Context.rho [R, B]``, is decided with it) and do not learn
online (``update`` only counts rounds). The core never imports
:mod:`torchroute.models`: the oracle module or the precomputed tensors come in as
constructor arguments.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from torchroute.checks import check_number
from torchroute.functional.availability import mask_scores
from torchroute.functional.distinct_rows import distinct_rows
from torchroute.functional.random import Source
from torchroute.functional.sampling import argmax_random_ties, one_hot_probs
from torchroute.learners.base import FixedPolicy
from torchroute.learners.objective import request_rho
from torchroute.types import Context, Decision, Problem


def _check_rho(rho: Tensor, num_trials: int) -> Tensor:
    rho = torch.as_tensor(rho, dtype=torch.float32)
    if rho.shape != (num_trials,):
        raise ValueError(f"rho must be [R={num_trials}], got {tuple(rho.shape)}")
    if not (torch.isfinite(rho) & (rho >= 0)).all():
        raise ValueError(f"rho must be finite and >= 0, got {rho.tolist()}")
    return rho


def _check_table(name: str, value: Tensor | None, num_arms: int) -> Tensor | None:
    if value is None:
        return None
    value = torch.as_tensor(value).float()
    if value.ndim != 2 or value.shape[1] != num_arms:
        raise ValueError(f"{name} must be [n, K={num_arms}], got {tuple(value.shape)}")
    if not torch.isfinite(value).all():
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return value


def known_costs(costs: Tensor, rtol: float = 1e-9) -> Tensor | None:
    """The per-model cost ``[K]`` when ``costs [n, K]`` is constant per model, else ``None``."""
    first = costs[0]
    spread = (costs - first).abs().amax(0)
    return first.clone() if bool((spread <= rtol * first.abs().clamp_min(1e-12)).all()) else None


class _StaticRouter(FixedPolicy):
    """Shared ``act`` of the static routers: argmax of ``y^ - rho c^`` (random tie-break),
    ``rho`` the request's (``Context.rho``) when the context carries one, else the trial's.

    Prices: with ``Context.prices`` (a known price change) the predicted costs ``c^`` (at
    the train prices ``Problem.prices``) are taken at this round's prices,
    ``c^ p_now / p_ref`` (:meth:`~torchroute.learners.Learner.priced_costs`): a cost known
    per model becomes the price now, a predicted one scales with its model's price. The
    choice moves on the round the price changes; nothing is refitted.
    """

    reads_prices = True
    per_request_rho = True

    def __init__(self, num_trials: int, num_arms: int, rho: Tensor) -> None:
        super().__init__(num_trials, num_arms)
        self.register_buffer("rho", _check_rho(rho, num_trials))  # [R]
        self.register_buffer("hidden", None, persistent=False)  # [R, K] bool, or None

    def hide(self, hidden: Tensor | None) -> _StaticRouter:
        """Treat the arms ``hidden [R, K]`` (``Problem.hidden_arms``: models that did not
        exist when the router was fitted) as unknown: their predicted score is 0, their
        cost prediction is kept (a price is known). Returns ``self``."""
        if hidden is not None:
            self.hidden = hidden.bool().to(self.rho.device).clone()
        return self

    def predict(self, context: Context) -> tuple[Tensor, Tensor]:
        """Predicted scores and costs, each ``[R, B, K]``."""
        raise NotImplementedError

    def values(self, context: Context) -> Tensor:
        """What ``act`` maximises, ``[R, B, K]``: ``y^ - rho c^`` (a hidden arm's ``y^``
        is 0; the unavailable arms are not masked here)."""
        with torch.no_grad():
            y_hat, c_hat = self.predict(context)
            if self.hidden is not None:
                y_hat = y_hat.masked_fill(self.hidden[:, None], 0.0)
            c_hat = self.priced_costs(c_hat, context)  # at this round's known prices
            rho = request_rho(context, self.rho, y_hat)  # [R, B or 1, 1]
            return y_hat - rho * c_hat  # [R, B, K]

    def act(self, context: Context, generator: Source = None) -> Decision:
        """The argmax of :meth:`values` over the available arms (random tie-break):
        ``x [R, B, d]`` -> one-hot ``probs [R, B, K]``, ``action [R, B]``."""
        self._check_context(context)
        value = self.values(context)
        action = argmax_random_ties(mask_scores(value, context.available), generator)
        return Decision(probs=one_hot_probs(action, self.num_arms, context.x.dtype), action=action)


class RegressorRouter(_StaticRouter):
    """Route with pre-trained score and cost regressors: ``argmax_k y^_k(x) - rho c^_k(x)``.

    Give either ``oracle`` (a module with ``accuracy(e) -> [n, K]`` and ``cost(e) -> [n, K]``,
    e.g. ``torchroute.models.MultiHeadOracle``), which then reads the encoder embeddings
    ``context.embedding [R, B, e]`` (the bandit features ``context.x`` are not used); or
    per-query predictions ``predicted_scores`` and ``predicted_costs`` ``[n, K]`` of the
    whole table, looked up with ``context.index``.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        rho: cost sensitivity per trial, ``[R]``.
        oracle: the regressor module (kept in eval mode; its weights join the state_dict).
        predicted_scores: ``[n, K]`` precomputed ``y^``.
        predicted_costs: ``[n, K]`` precomputed ``c^``.

    Shapes:
        ``act``: ``Context(x [R, B, d], index [R, B])`` -> one-hot ``probs [R, B, K]``.
    """

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        rho: Tensor,
        oracle: nn.Module | None = None,
        predicted_scores: Tensor | None = None,
        predicted_costs: Tensor | None = None,
    ) -> None:
        super().__init__(num_trials, num_arms, rho)
        tables = (predicted_scores is not None, predicted_costs is not None)
        if (oracle is not None) == all(tables) or any(tables) != all(tables):
            raise ValueError("give either oracle, or both predicted_scores and predicted_costs")
        scores = _check_table("predicted_scores", predicted_scores, num_arms)
        costs = _check_table("predicted_costs", predicted_costs, num_arms)
        if scores is not None and costs is not None and scores.shape != costs.shape:
            raise ValueError(
                f"predicted_scores {tuple(scores.shape)} and predicted_costs "
                f"{tuple(costs.shape)} must have the same shape"
            )
        self.oracle = oracle.eval() if oracle is not None else None
        self.register_buffer("predicted_scores", scores, persistent=False)  # [n, K] or None
        self.register_buffer("predicted_costs", costs, persistent=False)

    @classmethod
    def from_problem(
        cls, problem: Problem, oracle: nn.Module | None = None, costs: str = "predicted"
    ) -> RegressorRouter:
        """The router for ``problem`` on ``oracle``, checked against its arms and embeddings.

        An oracle with ``check_compatible(arm_names, embed_dim, source)`` (a
        ``MultiHeadOracle``) must have been trained for the same arms, in the same order,
        and for the size of ``Context.embedding``. ``costs="known"``: the train split's
        per-model cost (constant per model, checked) replaces the oracle's cost head;
        ``"predicted"`` (the default) keeps the head.
        """
        if costs not in ("predicted", "known"):
            raise ValueError(
                f"RegressorRouter: costs must be 'predicted' or 'known', got {costs!r}"
            )
        if oracle is None:
            raise ValueError("RegressorRouter.from_problem needs an oracle")
        if problem.embed_dim is None:
            raise ValueError(
                "RegressorRouter reads Context.embedding (the encoder output), but the "
                "environment gives no embeddings"
            )
        if hasattr(oracle, "check_compatible"):
            oracle.check_compatible(problem.arm_names, problem.embed_dim, source="the oracle")
        router = cls(problem.num_trials, problem.num_arms, problem.rho, oracle=oracle)
        if costs == "known":
            price = known_costs(problem.require_train(cls.__name__).costs.float())
            if price is None:
                raise ValueError(
                    "RegressorRouter: costs='known' needs costs constant per model on the "
                    "train split; this table's vary per query (use costs='predicted')"
                )
            router.register_buffer("known_price", price.to(router.rho.device), persistent=False)
        return router.hide(problem.hidden_arms)

    def predict(self, context: Context) -> tuple[Tensor, Tensor]:
        """Predicted ``(scores, costs)``, each ``[R, B, K]``, from the oracle heads."""
        if self.oracle is None:
            if context.index is None:
                raise ValueError(
                    "RegressorRouter with precomputed predictions needs "
                    "Context.index (rows of the table)"
                )
            return self.predicted_scores[context.index], self.predicted_costs[context.index]
        if context.embedding is None:
            raise ValueError(
                "RegressorRouter with an oracle reads Context.embedding (the encoder output), "
                "but the context has none"
            )
        r, b, d = context.embedding.shape
        self.oracle.eval()
        flat = context.embedding.reshape(r * b, d)
        y_hat = self.oracle.accuracy(flat).reshape(r, b, -1)
        price = getattr(self, "known_price", None)  # costs="known": the per-model price
        if price is not None:
            c_hat = price.to(y_hat.dtype).expand_as(y_hat)
        else:
            c_hat = self.oracle.cost(flat).reshape(r, b, -1)
        if y_hat.shape[-1] != self.num_arms:
            raise ValueError(
                f"the oracle predicts {y_hat.shape[-1]} arms, the router has {self.num_arms}"
            )
        return y_hat, c_hat


class KNNRouter(_StaticRouter):
    """k-nearest-neighbour routing: average score and cost of the ``k`` most similar train queries.

    Similarity is the cosine of the contexts (``context.x``, or rows of ``features`` looked
    up with ``context.index`` when given) and the train features; the prediction for each
    arm is the plain mean over the ``k`` neighbours, then ``argmax_k y_k - rho c_k``.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        rho: ``[R]``.
        train_x: ``[n_train, d]`` features of the training queries.
        train_scores: ``[n_train, K]``.
        train_costs: ``[n_train, K]``.
        k: number of neighbours (3).
        features: optional ``[n, d]`` features of the whole table, read by ``context.index``.
    """

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        rho: Tensor,
        train_x: Tensor,
        train_scores: Tensor,
        train_costs: Tensor,
        k: int = 3,
        features: Tensor | None = None,
    ) -> None:
        super().__init__(num_trials, num_arms, rho)
        train_x = torch.as_tensor(train_x).float()
        scores = _check_table("train_scores", train_scores, num_arms)
        costs = _check_table("train_costs", train_costs, num_arms)
        if train_x.ndim != 2 or len({train_x.shape[0], scores.shape[0], costs.shape[0]}) != 1:
            raise ValueError("train_x [n, d], train_scores and train_costs [n, K] must share n")
        check_number("KNNRouter", "k", k, ge=1, le=train_x.shape[0], integer=True)
        if not torch.isfinite(train_x).all():
            raise ValueError("train_x must be finite (no NaN or inf)")
        self.k = int(k)
        self.register_buffer("train_unit", F.normalize(train_x, dim=-1), persistent=False)
        self.register_buffer("train_scores", scores, persistent=False)
        self.register_buffer("train_costs", costs, persistent=False)
        feats = None if features is None else torch.as_tensor(features).float()
        if feats is not None and (feats.ndim != 2 or feats.shape[1] != train_x.shape[1]):
            raise ValueError(
                f"features must be [n, d={train_x.shape[1]}], got {tuple(feats.shape)}"
            )
        self.register_buffer("features", feats, persistent=False)
        self.dim = None if feats is not None else train_x.shape[1]

    @classmethod
    def from_problem(cls, problem: Problem, k: int = 3) -> KNNRouter:
        """Neighbours among ``problem``'s train split (required), on the bandit features."""
        train = problem.require_train(cls.__name__)
        return cls(
            problem.num_trials,
            problem.num_arms,
            problem.rho,
            train.features,
            train.scores,
            train.costs,
            k=k,
        ).hide(problem.hidden_arms)

    def neighbours(self, context: Context) -> Tensor:
        """Indices of the ``k`` most cosine-similar train queries, ``[R, B, k]`` (searched
        once per distinct table row of the round:
        :func:`~torchroute.functional.distinct_rows.distinct_rows`)."""
        x = context.x
        if self.features is not None:
            if context.index is None:
                raise ValueError("KNNRouter with features needs Context.index")
            x = self.features[context.index]
        if x.shape[-1] != self.train_unit.shape[-1]:
            raise ValueError(
                f"KNNRouter was built for d={self.train_unit.shape[-1]} features but the "
                f"context has d={x.shape[-1]}"
            )
        flat = x.reshape(-1, x.shape[-1]).to(self.train_unit.dtype)  # [R B, d]
        rows = distinct_rows(flat, context.index)  # a search once per distinct table row
        query = flat if rows is None else flat[rows[0]]
        sim = F.normalize(query, dim=-1) @ self.train_unit.T  # [R B or U, n]
        found = sim.topk(self.k, dim=-1).indices
        if rows is not None:
            found = found[rows[1]]
        return found.reshape(*x.shape[:-1], self.k)

    def predict(self, context: Context) -> tuple[Tensor, Tensor]:
        """Mean ``(scores, costs)`` ``[R, B, K]`` of the ``k`` nearest train queries."""
        idx = self.neighbours(context)  # [R, B, k]
        return self.train_scores[idx].mean(-2), self.train_costs[idx].mean(-2)
