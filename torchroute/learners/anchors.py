"""Static anchor routers: the kinds of router the field ships, fitted once on the train split.

Each router predicts every model's score for a query and plays
``argmax_k y^_k(x) - rho c_k(x)`` per trial, never learning online (``update`` only counts
rounds). Costs that are constant per model on the train split (a price per query) are used
as known; otherwise a ridge regression of each model's cost on the features predicts them.
With ``Context.prices`` (a known price change) either is taken at this round's prices
(``c p_now / p_ref``: a known price becomes the price now, a ridge prediction scales with
its model's price; :class:`~torchroute.learners.static._StaticRouter`).
The hyper-parameter candidates (a list) are scored on the validation split
(``Problem.validation``; without one, on a seeded 20% of the train rows held out from the
fit, :func:`held_out`): each trial keeps the candidate whose router has the highest mean
validation utility for its own ``rho``, and reports that mean as ``val_utility [R]`` (a
``results.csv`` column; NaN with a single candidate and no validation split); a trial with
a spend target (``Problem.budget``, a paced trial) takes the candidate of the best
validation quality at that cost instead where it is better by one standard error
(:meth:`_FittedRouter.choose_for_budget`). Fitting is
full-batch Adam in torch, every candidate (and, for the best-arm classifier, every
distinct set of labels) at once. A score fit does not depend on the trials: it runs once
per process for a config and train split (:mod:`torchroute.learners.fits`), so the
residual learners' ``base`` reuses the run's own router's fit.

- :class:`LogisticScoreRouter`: one logistic regression per model (the score in ``[0, 1]``
  as a soft label), L2 strength chosen on validation;
- :class:`MLPScoreRouter`: a one-hidden-layer MLP with ``K`` sigmoid outputs, weight decay
  chosen on validation;
- :class:`MFScoreRouter`: matrix factorisation (RouteLLM-style): ``sigmoid(<v_k, P x> + b_k)``
  with a shared projection ``P`` and one embedding per model, rank chosen on validation;
- :class:`KNNScoreRouter`: cosine kNN score averaging, ``k`` chosen on validation;
- :class:`BestArmClassifier`: a linear softmax classifier of each trial's best arm on the
  train split (labels depend on ``rho``), L2 chosen on validation.

A model of ``Problem.hidden_arms`` (a scenario's new model, absent when the router was
fitted) has unknown offline scores (0 in ``Problem.train``): the router learns nothing
about it, predicts a score of 0 for it (``_StaticRouter.hide``) and knows its price.

(Over 400 lines: the five fitted routers share one base and its fitting and choice code;
split apart they would import each other's pieces.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Self

import torch
from torch import Tensor
from torch.nn import functional as F

from torchroute.functional.availability import mask_scores
from torchroute.functional.budget_choice import (
    budget_bracket,
    budget_rho_grid,
    choose_for_budget,
    cost_quality_curves,
    quality_at_budget,
)
from torchroute.functional.cost_ridge import fit_cost_ridge, predict_costs
from torchroute.functional.cost_ridge import with_bias as _with_bias
from torchroute.functional.distinct_rows import distinct_rows
from torchroute.functional.random import Source
from torchroute.functional.sampling import argmax_random_ties, one_hot_probs
from torchroute.functional.utility import utility
from torchroute.learners.fits import fingerprint, fitted, skipping
from torchroute.learners.objective import refuse_request_rho
from torchroute.learners.static import _StaticRouter, known_costs
from torchroute.types import Context, Decision, Problem, TrainSplit


def _candidates(name: str, value: float | Sequence[float]) -> tuple[float, ...]:
    values = (
        tuple(value) if isinstance(value, Sequence) and not isinstance(value, str) else (value,)
    )
    if not values or not all(isinstance(v, (int, float)) and v >= 0 for v in values):
        raise ValueError(f"{name} must be a number >= 0 or a non-empty list of them, got {value!r}")
    return tuple(float(v) for v in values)


def held_out(
    train: TrainSplit, validation: TrainSplit | None, num_candidates: int, share: float = 0.2
) -> tuple[TrainSplit, TrainSplit | None]:
    """``(fit split, choice split)``: the train and validation splits as given, or, with
    several candidates and no validation split, a seeded ``share`` of the train rows held
    out for the choice (the router is then fitted on the rest)."""
    if num_candidates == 1 or validation is not None:
        return train, validation
    n = train.features.shape[0]
    order = torch.randperm(n, generator=torch.Generator().manual_seed(0)).to(train.scores.device)
    cut = n - max(1, int(share * n))
    if cut < 1:
        raise ValueError(f"{n} train row(s) cannot spare a held-out share for the choice")
    pick = lambda rows: TrainSplit(*(t[rows] for t in (train.features, train.scores, train.costs)))  # noqa: E731
    return pick(order[:cut]), pick(order[cut:])


class _FittedRouter(_StaticRouter):
    """Shared parts: known or ridge-predicted costs, the per-trial choice of a candidate.

    Buffers: ``choice [R]`` (the candidate of each trial, in the state_dict), ``cost_known
    [K]`` or ``cost_w [d + 1, K]`` (ridge of the costs on the features plus a bias,
    :func:`~torchroute.functional.cost_ridge.fit_cost_ridge`, kept in float32). The fitted
    weights are buffers outside the state_dict (no trial dimension; refitted
    deterministically from the train split when a router is built, as for ``KNNRouter``).
    """

    #: :meth:`predict` computes the scores once per distinct table row of a round
    #: (:func:`~torchroute.functional.distinct_rows.distinct_rows`): set where a query's
    #: scores cost far more than finding the distinct rows (the kNN router's search)
    scores_per_row: ClassVar[bool] = False
    chooses_for_budget = True  # its candidate: :meth:`choose_for_budget`

    def __init__(self, num_trials: int, num_arms: int, dim: int, rho: Tensor, train: TrainSplit):
        super().__init__(num_trials, num_arms, rho)
        self.dim = int(dim)
        known = known_costs(train.costs.float())
        self.register_buffer("cost_known", known, persistent=False)
        if known is None:
            cost_w = fit_cost_ridge(train.features, train.costs).float()
            self.register_buffer("cost_w", cost_w, persistent=False)
        else:
            self.register_buffer("cost_w", None, persistent=False)
        self.register_buffer("choice", torch.zeros(num_trials, dtype=torch.long))
        # recomputed with the choice when the router is built, so outside the state_dict
        nan = torch.full((num_trials,), float("nan"))
        self.register_buffer("val_utility", nan, persistent=False)

    @classmethod
    def from_problem(cls, problem: Problem, **hp: Any) -> Self:
        """Fitted on ``problem.train`` (for :class:`KNNScoreRouter`, its neighbours), the
        candidates scored on ``problem.validation``; ``problem.hidden_arms`` hidden."""
        train = problem.require_train(cls.__name__)
        router = cls(problem.num_trials, problem.num_arms, problem.dim, problem.rho, train,
                     problem.validation, **hp)  # fmt: skip
        if problem.budget is not None and problem.validation is not None and cls.chooses_for_budget:
            router.choose_for_budget(problem.validation, problem.budget)
        return router.hide(problem.hidden_arms)

    def _grid(
        self, name: str, value: float | Sequence[float], train: TrainSplit, val: TrainSplit | None
    ) -> tuple[tuple[float, ...], TrainSplit, TrainSplit | None]:
        """The candidates of hyper-parameter ``name`` (checked, :func:`_candidates`) and the
        ``(fit, choice)`` splits for them (:func:`held_out`)."""
        grid = _candidates(f"{type(self).__name__}: {name}", value)
        return (grid, *held_out(train, val, len(grid)))

    def _keep(self, **weights: Tensor) -> None:
        """Keep fitted weights as buffers outside the state_dict (detached)."""
        for name, t in weights.items():
            self.register_buffer(name, t.detach(), persistent=False)

    def _fit_once(self, train: TrainSplit, fit: Callable[[], dict[str, Tensor]], **hp: Any) -> None:
        """Keep the weights ``fit()`` returns, fitted once per process for this class, the
        hyper-parameters ``hp`` and the fit split's features and scores
        (:func:`~torchroute.learners.fits.fitted`): a router of the same config on the same
        train split (the residual learners' base, another piece of the trials) reuses them."""
        key = (type(self).__qualname__, tuple(sorted(hp.items())))
        self._keep(**fitted((*key, fingerprint(train.features, train.scores)), fit))

    def costs(self, x: Tensor) -> Tensor:
        """Known or predicted costs ``[..., K]`` for features ``x [..., d]``."""
        if self.cost_known is not None:
            return self.cost_known.to(x.dtype).expand(*x.shape[:-1], self.num_arms)
        return predict_costs(self.cost_w, x)

    def candidate_scores(self, x: Tensor) -> Tensor:
        """Predicted scores of every candidate, ``x [n, d]`` -> ``[C, n, K]``."""
        raise NotImplementedError

    def choose(self, validation: TrainSplit | None, rho: Tensor, num_candidates: int) -> Tensor:
        """Each trial's candidate: the best mean validation utility (``[R]``).

        Also sets ``val_utility [R]``: the chosen candidate's mean utility on ``validation``
        (the choice split: the validation split, or the held-out share of train), NaN when
        there is none (a single candidate and no validation split).
        """
        if validation is None:
            if num_candidates == 1:
                return self.choice
            raise ValueError(
                f"{type(self).__name__} chooses among {num_candidates} candidates on the "
                "validation split, but the environment has none (give the table a 'val' split, "
                "e.g. data.val_fraction=0.1, or a single value)"
            )
        with torch.no_grad():
            mean = self.candidate_utility(validation, rho.float())  # [C, R]
        self.choice = mean.argmax(0)  # [R], the first of equal values
        self.val_utility = mean.gather(0, self.choice[None])[0]
        return self.choice

    def choose_for_budget(self, validation: TrainSplit, budget: Tensor) -> Tensor:
        """Each trial's candidate for its spend target ``budget [R]`` (mean cost per
        request, ``Problem.budget``). A pacer moves the trial's ``rho`` until it spends
        its budget, so the candidate best at the trial's starting ``rho`` (:meth:`choose`,
        the incumbent) need not be the best at that cost: another is taken where its
        validation quality at the budget is better by more than one standard error
        (:mod:`~torchroute.functional.budget_choice`: each candidate's cost-quality curve
        over a grid of ``rho``, read at the budget). ``val_utility`` stays the chosen
        candidate's mean validation utility at the trial's ``rho``. Returns the choice
        ``[R]``."""
        with torch.no_grad():
            x = validation.features.float()
            budgets, budget_of = budget.double().unique(return_inverse=True)  # [N], [R]
            rho = budget_rho_grid(budgets)
            predicted, priced = self.candidate_scores(x), self.costs(x)
            cost, _ = cost_quality_curves(
                predicted, priced, validation.scores, validation.costs, rho
            )  # [C, G]
            bracket = budget_bracket(cost, budgets)
            per_query = quality_at_budget(predicted, priced, validation.scores, rho, bracket)
            choice = choose_for_budget(
                per_query, bracket[3], cost.amin(1), self.choice, budget_of.to(self.choice.device)
            )
            self.choice = choice.to(self.choice.device)
            utility = self._utility_of(predicted, priced, validation, self.rho.float())
            self.val_utility = utility.gather(0, self.choice[None])[0]
        return self.choice

    def candidate_utility(self, validation: TrainSplit, rho: Tensor) -> Tensor:
        """Mean utility ``[C, R]`` of each candidate's choices on ``validation`` per trial."""
        x = validation.features.float()
        return self._utility_of(self.candidate_scores(x), self.costs(x), validation, rho)

    @staticmethod
    def _utility_of(
        predicted: Tensor, priced: Tensor, validation: TrainSplit, rho: Tensor
    ) -> Tensor:
        """Mean utility ``[C, R]`` on ``validation`` of the arms ``argmax predicted -
        rho priced`` (``predicted [C, m, K]``, ``priced [m, K]``, ``rho [R]``)."""
        value = predicted[:, None] - rho[None, :, None, None] * priced[None, None]
        pick = value.argmax(-1, keepdim=True)  # [C, R, m, 1]
        return _mean_utility(validation, rho, pick)

    def result_columns(self) -> dict[str, Tensor]:
        """``{"val_utility": [R]}``, the chosen candidate's mean validation utility."""
        return {"val_utility": self.val_utility}

    def predict(self, context: Context) -> tuple[Tensor, Tensor]:
        """Scores of each trial's candidate and the costs, each ``[R, B, K]`` (with
        :attr:`scores_per_row`, computed once per distinct table row of the round)."""
        x = context.x.to(self.rho.dtype)  # the buffers' dtype (float32 unless moved)
        r, b, d = x.shape
        flat = x.reshape(r * b, d)
        rows = distinct_rows(flat, context.index) if self.scores_per_row else None
        if rows is None:
            scores = self.candidate_scores(flat)
        else:  # the distinct rows (or every row, in order, when none repeats)
            first, inverse = rows
            scores = self.candidate_scores(flat[first])[:, inverse]
        scores = scores.reshape(-1, r, b, self.num_arms)
        picked = scores.gather(0, self.choice.view(1, r, 1, 1).expand(1, r, b, self.num_arms))[0]
        return picked, self.costs(x)


def _mean_utility(split: TrainSplit, rho: Tensor, pick: Tensor) -> Tensor:
    """Mean utility ``[C, R]`` on ``split`` of the arms ``pick [C, R, m, 1]``, rho ``[R]``."""
    u = utility(split.scores[None].float(), split.costs[None].float(), rho[:, None, None])
    return u[None].expand(pick.shape[0], -1, -1, -1).gather(-1, pick)[..., 0].mean(-1)


def _chosen(per_candidate: Callable[[Tensor], Tensor], x: Tensor, choice: Tensor) -> Tensor:
    """``per_candidate`` (``[n, d]`` -> ``[C, n, h]``) of ``x [R, B, d]`` (in the router's
    dtype) at each trial's candidate ``choice [R]`` -> ``[R, B, h]``."""
    r, b, d = x.shape
    out = per_candidate(x.reshape(r * b, d))  # [C, R * B, h]
    out = out.reshape(out.shape[0], r, b, out.shape[-1])
    index = choice.view(1, r, 1, 1).expand(1, r, b, out.shape[-1])
    return out.gather(0, index)[0]


def _adam(params: list[Tensor], loss_fn, steps: int, lr: float) -> None:
    """``steps`` full-batch Adam steps on ``loss_fn()`` (none within
    :func:`~torchroute.learners.fits.fits_skipped`, an option check)."""
    opt = torch.optim.Adam(params, lr=lr)
    for _ in range(0 if skipping() else steps):
        opt.zero_grad()
        loss_fn().backward()
        opt.step()


def _fit_scores(
    x: Tensor,
    scores: Tensor,
    logits: Callable[[], Tensor],
    penalties: Callable[[], Sequence[Tensor]],
    params: list[Tensor],
    steps: int,
    lr: float,
) -> None:
    """Full-batch Adam on every candidate's score model at once.

    The loss is the sum over candidates of the mean binary cross-entropy between
    ``sigmoid(logits())`` ``[C, n, K]`` and ``scores [n, K]`` (clamped to ``[0, 1]`` as soft
    labels), plus the ``penalties()`` terms, added in order.
    """
    y = scores.float().clamp(0, 1)

    def loss() -> Tensor:
        out = logits()
        total = F.binary_cross_entropy_with_logits(out, y.expand_as(out), reduction="none")
        total = total.mean((1, 2)).sum()
        for term in penalties():
            total = total + term
        return total

    _adam(params, loss, steps, lr)


class LogisticScoreRouter(_FittedRouter):
    """One logistic regression per model, ``y^_k = sigmoid(x w_k + b_k)``.

    Args:
        num_trials, num_arms, dim, rho: ``R``, ``K``, ``d``, ``[R]``.
        train: the train split (features ``[n, d]``, scores, costs ``[n, K]``).
        validation: the validation split (needed with several ``l2`` values).
        l2: L2 strength (a number, or candidates chosen on validation).
        steps, lr: full-batch Adam steps and learning rate.

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
        l2: float | Sequence[float] = (1e-5, 1e-4, 1e-3, 1e-2),
        steps: int = 300,
        lr: float = 0.05,
    ) -> None:
        super().__init__(num_trials, num_arms, dim, rho, train)
        grid, train, validation = self._grid("l2", l2, train, validation)

        def fit() -> dict[str, Tensor]:
            x = _with_bias(train.features.float())
            w = torch.zeros(len(grid), x.shape[1], num_arms, requires_grad=True)
            lam = torch.tensor(grid)[:, None, None]
            _fit_scores(
                x,
                train.scores,
                lambda: torch.einsum("nd,cdk->cnk", x, w),
                lambda: [(lam * w[:, :-1].pow(2)).sum()],
                [w],
                steps,
                lr,
            )
            return {"weights": w}  # [C, d + 1, K]

        self._fit_once(train, fit, l2=grid, steps=int(steps), lr=float(lr))
        self.choose(validation, self.rho, len(grid))

    def candidate_scores(self, x: Tensor) -> Tensor:
        """``x [n, d]`` -> ``[C, n, K]`` predicted scores of every candidate."""
        return torch.sigmoid(torch.einsum("nd,cdk->cnk", _with_bias(x), self.weights))


class MLPScoreRouter(_FittedRouter):
    """A one-hidden-layer MLP (ReLU, ``hidden`` units) with ``K`` sigmoid score outputs.

    Args: as :class:`LogisticScoreRouter`, with ``weight_decay`` (candidates) in place of
    ``l2``, ``hidden`` the width and ``seed`` the initial weights.
    """

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        rho: Tensor,
        train: TrainSplit,
        validation: TrainSplit | None = None,
        hidden: int = 64,
        weight_decay: float | Sequence[float] = (1e-5, 1e-4, 1e-3),
        steps: int = 300,
        lr: float = 0.01,
        seed: int = 0,
    ) -> None:
        super().__init__(num_trials, num_arms, dim, rho, train)
        grid, train, validation = self._grid("weight_decay", weight_decay, train, validation)
        c, d = len(grid), train.features.shape[1]

        def fit() -> dict[str, Tensor]:
            g = torch.Generator().manual_seed(seed)
            w1 = (torch.randn(c, d, hidden, generator=g) / d**0.5).requires_grad_()
            b1 = torch.zeros(c, 1, hidden, requires_grad=True)
            w2 = (torch.randn(c, hidden, num_arms, generator=g) / hidden**0.5).requires_grad_()
            b2 = torch.zeros(c, 1, num_arms, requires_grad=True)
            x = train.features.float()
            lam = torch.tensor(grid)[:, None, None]
            _fit_scores(
                x,
                train.scores,
                lambda: self._logits(x, w1, b1, w2, b2),
                lambda: [(lam * w1.pow(2)).sum(), (lam * w2.pow(2)).sum()],
                [w1, b1, w2, b2],
                steps,
                lr,
            )
            return {"w1": w1, "b1": b1, "w2": w2, "b2": b2}

        hp = {"hidden": int(hidden), "steps": int(steps), "lr": float(lr), "seed": int(seed)}
        self._fit_once(train, fit, weight_decay=grid, **hp)
        self.choose(validation, self.rho, c)

    @staticmethod
    def _logits(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
        h = torch.relu(torch.einsum("nd,cdh->cnh", x, w1) + b1)
        return torch.einsum("cnh,chk->cnk", h, w2) + b2

    def candidate_scores(self, x: Tensor) -> Tensor:
        """``x [n, d]`` -> ``[C, n, K]`` predicted scores of every candidate."""
        return torch.sigmoid(self._logits(x, self.w1, self.b1, self.w2, self.b2))

    def candidate_representation(self, x: Tensor) -> Tensor:
        """The last hidden layer ``relu(x W_1 + b_1)`` of every candidate, ``x [n, d]`` ->
        ``[C, n, hidden]``."""
        return torch.relu(torch.einsum("nd,cdh->cnh", x, self.w1) + self.b1)

    def representation(self, x: Tensor) -> Tensor:
        """Each trial's chosen candidate's last hidden layer, ``x [R, B, d]`` ->
        ``[R, B, hidden]``."""
        return _chosen(self.candidate_representation, x, self.choice)


class MFScoreRouter(_FittedRouter):
    """Matrix factorisation: ``y^_k(x) = sigmoid(<v_k, P x> + b_k)`` (RouteLLM's MF router
    scores a model by such a product of a projected query and a model embedding).

    Args: as :class:`LogisticScoreRouter`, with ``rank`` (candidates) the size of ``P x``
    and ``l2`` a fixed penalty; ``seed`` the initial weights.
    """

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        rho: Tensor,
        train: TrainSplit,
        validation: TrainSplit | None = None,
        rank: int | Sequence[int] = (4, 16, 64),
        l2: float = 1e-4,
        steps: int = 300,
        lr: float = 0.02,
        seed: int = 0,
    ) -> None:
        super().__init__(num_trials, num_arms, dim, rho, train)
        grid, train, validation = self._grid("rank", rank, train, validation)
        ranks = [int(r) for r in grid]
        if min(ranks) < 1:
            raise ValueError(f"{type(self).__name__}: rank must be >= 1, got {ranks}")
        c, d, top = len(ranks), train.features.shape[1], max(ranks)

        def fit() -> dict[str, Tensor]:
            g = torch.Generator().manual_seed(seed)
            # One model of the largest rank per candidate; a mask keeps the first ``rank`` dims.
            mask = (torch.arange(top)[None] < torch.tensor(ranks)[:, None]).float()[:, None]
            p = (torch.randn(c, d, top, generator=g) / d**0.5).requires_grad_()
            v = (torch.randn(c, top, num_arms, generator=g) / top**0.5).requires_grad_()
            b = torch.zeros(c, 1, num_arms, requires_grad=True)
            x = train.features.float()
            _fit_scores(
                x,
                train.scores,
                lambda: self._logits(x, p, v, b, mask),
                lambda: [l2 * (p.pow(2).sum() + v.pow(2).sum())],
                [p, v, b],
                steps,
                lr,
            )
            return {"p": p, "v": v, "b": b, "rank_mask": mask}  # mask [C, 1, r]

        hp = {"l2": float(l2), "steps": int(steps), "lr": float(lr), "seed": int(seed)}
        self._fit_once(train, fit, rank=tuple(ranks), **hp)
        self.choose(validation, self.rho, c)

    @staticmethod
    def _logits(x: Tensor, p: Tensor, v: Tensor, b: Tensor, mask: Tensor) -> Tensor:
        z = torch.einsum("nd,cdr->cnr", x, p) * mask
        return torch.einsum("cnr,crk->cnk", z, v) + b

    def candidate_scores(self, x: Tensor) -> Tensor:
        """``x [n, d]`` -> ``[C, n, K]`` predicted scores of every candidate."""
        return torch.sigmoid(self._logits(x, self.p, self.v, self.b, self.rank_mask))

    def candidate_representation(self, x: Tensor) -> Tensor:
        """The query vector ``P x`` of every candidate (its dimensions past the candidate's
        rank are 0), ``x [n, d]`` -> ``[C, n, max rank]``."""
        return torch.einsum("nd,cdr->cnr", x, self.p) * self.rank_mask

    def representation(self, x: Tensor) -> Tensor:
        """Each trial's chosen candidate's query vector, ``x [R, B, d]`` ->
        ``[R, B, max rank]``."""
        return _chosen(self.candidate_representation, x, self.choice)


class KNNScoreRouter(_FittedRouter):
    """Cosine kNN score averaging over the train split, ``k`` chosen on validation.

    The score prediction is the mean score of the ``k`` most cosine-similar train queries;
    costs are known per model or ridge-predicted (see the module).

    Args: as :class:`LogisticScoreRouter`, with ``k`` (candidates) the neighbour counts;
    candidates above the number of train rows are left out.
    """

    scores_per_row: ClassVar[bool] = True  # a search over the train rows per query

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        rho: Tensor,
        train: TrainSplit,
        validation: TrainSplit | None = None,
        k: int | Sequence[int] = (3, 10, 30, 100, 200),
    ) -> None:
        super().__init__(num_trials, num_arms, dim, rho, train)
        grid, train, validation = self._grid("k", k, train, validation)
        asked = [int(v) for v in grid]
        n = train.features.shape[0]
        ks = [v for v in asked if 1 <= v <= n]  # candidates above the train rows are dropped
        if not ks:
            raise ValueError(
                f"{type(self).__name__}: k must be in 1..{n} (train rows), got {asked}"
            )
        self.ks = ks
        self.register_buffer(
            "train_unit", F.normalize(train.features.float(), dim=-1), persistent=False
        )
        self.register_buffer("train_scores", train.scores.float(), persistent=False)
        self.choose(validation, self.rho, len(ks))

    def candidate_scores(self, x: Tensor) -> Tensor:
        """``x [n, d]`` -> ``[C, n, K]``: mean train score of the ``k`` nearest, each ``k``."""
        out = []
        for lo in range(0, x.shape[0], 4096):  # [chunk, n] similarities at a time
            sim = F.normalize(x[lo : lo + 4096], dim=-1) @ self.train_unit.T
            idx = sim.topk(max(self.ks), dim=-1).indices  # [b, kmax], nearest first
            running = self.train_scores[idx].cumsum(1)  # [b, kmax, K]
            out.append(torch.stack([running[:, k - 1] / k for k in self.ks]))
        return torch.cat(out, 1)  # [C, n, K]


def label_sets(label: Tensor) -> tuple[Tensor, Tensor]:
    """The distinct rows of ``label [R, n]`` in the order they first occur, ``[U, n]``, and
    each row's set ``[R]`` (``label == sets[group]``); ``label`` itself and ``arange(R)``
    when every row differs."""
    sets, inverse = label.unique(dim=0, return_inverse=True)  # sorted: [U, n], [R]
    r, u = label.shape[0], sets.shape[0]
    if u == r:
        return label, torch.arange(r, device=label.device)
    trial = torch.arange(r, device=label.device)
    first = torch.full((u,), r, device=label.device).scatter_reduce(0, inverse, trial, "amin")
    order = first.argsort()  # the sets by their first trial
    rank = torch.empty_like(order)
    rank[order] = torch.arange(u, device=label.device)
    return label[first[order]], rank[inverse]


class BestArmClassifier(_FittedRouter):
    """A linear softmax classifier of each trial's best arm (``argmax_k u_k`` for its ``rho``
    on the train split), plays the most probable arm.

    Trials whose labels are the same (the seeds of one ``rho``) share one fit: every
    distinct label set (:func:`label_sets`) is fitted once, all of them in one batched
    Adam run.

    Prices: its labels mix quality and cost, so it has no cost to reprice. With
    ``Context.prices`` it keeps the classifier's arm ``a`` unless another arm gains by the
    price change: arm ``k``'s gain is ``min(m_k - m_a, 0) + s_k - s_a``, with ``m [R, K]``
    each arm's mean train utility (the gap to ``a``, capped at 0 since the classifier
    ranks ``a`` first for this query) and ``s = -rho (p_now - p_ref)`` the utility shift of
    the prices (:func:`~torchroute.functional.prices.utility_shift`); the arm of largest
    positive gain replaces ``a`` (no gain: ``a``, so unchanged prices change nothing).

    Its labels bake each trial's ``rho`` in: a request that carries another trade-off
    (``Context.rho``) is refused with a one-line error (:attr:`per_request_rho` is
    ``False``).

    Args: as :class:`LogisticScoreRouter` (``l2`` candidates); the classifier of trial ``r``
    and candidate ``c`` is ``weights[r, c]`` (``[R, C, d + 1, K]``, in the state_dict).
    """

    per_request_rho = False
    chooses_for_budget = False  # never paced: its labels are its trial's rho's

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        rho: Tensor,
        train: TrainSplit,
        validation: TrainSplit | None = None,
        l2: float | Sequence[float] = (1e-5, 1e-3),
        steps: int = 300,
        lr: float = 0.05,
    ) -> None:
        super().__init__(num_trials, num_arms, dim, rho, train)
        grid, train, validation = self._grid("l2", l2, train, validation)
        x = _with_bias(train.features.float())
        u = utility(train.scores[None].float(), train.costs[None].float(), self.rho[:, None, None])
        label = u.argmax(-1)  # [R, n]; a hidden arm's train scores are 0 (Problem.train)
        # [R, K] each arm's mean train utility: what a price change is weighed against
        self.register_buffer("mean_utility", u.mean(1).detach(), persistent=False)
        labels, group = label_sets(label)  # one fit per distinct label set (seeds of a rho)
        num_sets = labels.shape[0]
        w = torch.zeros(len(grid), num_sets, x.shape[1], num_arms, requires_grad=True)
        lam = torch.tensor(grid)[:, None, None, None]

        def loss() -> Tensor:
            logits = torch.einsum("nd,crdk->crnk", x, w)
            ce = F.cross_entropy(logits.permute(0, 3, 1, 2), labels.expand(len(grid), -1, -1))
            return ce * len(grid) * num_sets + (lam * w[:, :, :-1].pow(2)).sum()

        _adam([w], loss, steps, lr)
        # [R, C, d + 1, K]: per trial, so in the state_dict with the trial dimension first
        fits = w.detach() if num_sets == num_trials else w.detach()[:, group]
        self.register_buffer("weights", fits.transpose(0, 1).contiguous())
        self.choose(validation, self.rho, len(grid))

    def candidate_utility(self, validation: TrainSplit, rho: Tensor) -> Tensor:
        """Mean validation utility ``[C, R]`` of each trial's classifier of each candidate."""
        x = _with_bias(validation.features.float())
        pick = torch.einsum("nd,rcdk->crnk", x, self.weights).argmax(-1, keepdim=True)
        return _mean_utility(validation, rho, pick)

    def values(self, context: Context) -> Tensor:
        """The classifier's logits ``[R, B, K]`` (``-inf`` for a hidden arm: a model unknown
        when fitted is never chosen)."""
        with torch.no_grad():
            w = self.weights[torch.arange(self.num_trials), self.choice]  # [R, d + 1, K]
            logits = torch.einsum("rbd,rdk->rbk", _with_bias(context.x.to(w.dtype)), w)
        if self.hidden is not None:
            logits = logits.masked_fill(self.hidden[:, None], float("-inf"))
        return logits

    def act(self, context: Context, generator: Source = None) -> Decision:
        """The most probable best arm (repriced under known prices, the class doc):
        ``x [R, B, d]`` -> one-hot ``probs [R, B, K]``."""
        self._check_context(context)
        refuse_request_rho(type(self).__name__, context, self.rho)
        logits = mask_scores(self.values(context), context.available)
        action = argmax_random_ties(logits, generator)
        if self._knows_prices(context):
            action = self._repriced(action, logits, context)
        return Decision(probs=one_hot_probs(action, self.num_arms, context.x.dtype), action=action)

    def _repriced(self, action: Tensor, logits: Tensor, context: Context) -> Tensor:
        """The arm of largest positive price gain over ``action [R, B]`` (the class doc),
        else ``action``; arms with ``logits [R, B, K]`` at ``-inf`` (unavailable, unknown
        when fitted) are never chosen."""
        mean = self.mean_utility.to(logits.dtype)[:, None]  # [R, 1, K]
        shift = self.priced_scores(torch.zeros_like(logits), context)  # [R, B, K]
        pick = action[..., None]
        gap = (mean - mean.expand_as(logits).gather(-1, pick)).clamp_max(0.0)
        gain = gap + shift - shift.gather(-1, pick)
        gain = gain.masked_fill(logits == float("-inf"), float("-inf"))
        best = gain.argmax(-1)  # [R, B]
        better = gain.gather(-1, best[..., None])[..., 0] > 0
        return torch.where(better, best, action)


__all__ = [
    "BestArmClassifier",
    "KNNScoreRouter",
    "LogisticScoreRouter",
    "MFScoreRouter",
    "MLPScoreRouter",
    "known_costs",
]
