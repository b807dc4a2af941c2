"""What a ridge bandit learns and decides by: the utility, or quality and cost apart.

``objective: utility`` (the default): the ridge model learns the utility
``u = clip(y - rho c, 0, 1)`` of each trial's ``rho`` (``Feedback.reward``) and the learner
decides by it; the trade-off is baked into what was learnt, so a request whose trade-off
differs (``Context.rho``) cannot be served (a one-line error, :func:`refuse_request_rho`).

``objective: quality_cost``: the ridge model learns the quality ``y`` (``Feedback.score``)
and the cost is known, never learnt online; the learner decides by ``y_k - rho c_k`` with
the request's ``rho`` (``Context.rho [R, B]`` when given, else its trial's ``Problem.rho``),
so one fitted learner serves any trade-off and a price change needs no learning. The value
is not clipped to ``[0, 1]``. What ``c_k`` is, the ``cost_model`` option says:

- ``price`` (the default): each model's price, the same for every query
  (``Context.prices [R, B, K]`` when the context carries them, else ``Problem.prices
  [K]``, the mean train cost per query);
- ``ridge``: each model's cost of this query, ``c_k(x) = [x, 1] w_k``, a ridge regression
  of the cost on the features fitted once on the train split when the learner is built
  (closed form in float64, regulariser 1, the static score routers' cost model:
  :func:`~torchroute.functional.cost_ridge.fit_cost_ridge`). With ``Context.prices`` (a
  known price change) a prediction is taken at this round's prices, ``c_k(x) p_now /
  p_ref`` with ``p_ref = Problem.prices`` (:func:`~torchroute.functional.prices.costs_at`),
  as the static routers do. It needs a train split, and ``objective: quality_cost`` (a
  ``utility`` learner learns the cost inside its target).

:class:`Objective` is the mixin of the ridge learners (LinUCB, LinTS, SquareCB,
epsilon-greedy, the full-information LinUCB, the discounted and sliding-window forms); it
says what the learner can do through :attr:`Objective.per_request_rho` and
:attr:`Objective.warm_target`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from torchroute.errors import InputError, OptionError
from torchroute.functional.cost_ridge import fit_cost_ridge, predict_costs
from torchroute.functional.prices import costs_at
from torchroute.types import Context, Feedback, Problem

#: the values of the ``objective`` option
OBJECTIVES = ("utility", "quality_cost")
#: the values of the ``cost_model`` option (what ``c_k`` is under ``quality_cost``)
COST_MODELS = ("price", "ridge")


def check_objective(owner: str, objective: str) -> str:
    """``objective`` when it is one of :data:`OBJECTIVES`; else a one-line ``OptionError``."""
    if objective not in OBJECTIVES:
        raise OptionError(
            f"{owner}: objective must be one of {list(OBJECTIVES)}, got {objective!r}"
        )
    return objective


def check_cost_model(owner: str, cost_model: str, objective: str) -> str:
    """``cost_model`` when it is one of :data:`COST_MODELS` and fits ``objective``; else a
    one-line ``OptionError`` (``ridge`` needs ``objective: quality_cost``)."""
    if cost_model not in COST_MODELS:
        raise OptionError(
            f"{owner}: cost_model must be one of {list(COST_MODELS)}, got {cost_model!r}"
        )
    if cost_model == "ridge" and objective != "quality_cost":
        raise OptionError(
            f"{owner}: cost_model: ridge needs objective: quality_cost, got objective: "
            f"{objective} (a utility learner learns the cost inside its target)"
        )
    return cost_model


def refuse_request_rho(owner: str, context: Context, trial_rho: Tensor | None) -> None:
    """A one-line ``InputError`` when ``context.rho [R, B]`` differs from ``trial_rho [R]``
    (``None``: unknown, any ``Context.rho`` differs), for a learner that decides for its
    trial's own ``rho``. Nothing happens (and nothing is read) without ``Context.rho``;
    with one, the comparison reads one bool on the host."""
    if context.rho is None:
        return
    if trial_rho is not None:
        mine = trial_rho.to(context.rho.device, context.rho.dtype)[:, None]
        if bool((context.rho == mine).all()):
            return
    raise InputError(
        f"{owner} decides for each trial's own rho (it learnt or fitted the utility at that "
        "rho) but the requests carry other trade-offs (Context.rho); use objective: "
        "quality_cost (LinUCB, LinTS, SquareCB, epsilon-greedy and their forgetting forms), a "
        "static score router or a residual learner"
    )


def request_rho(context: Context, trial_rho: Tensor, like: Tensor) -> Tensor:
    """Each request's trade-off as ``[R, B, 1]`` (or ``[R, 1, 1]``) in ``like``'s dtype:
    ``context.rho [R, B]`` when given, else ``trial_rho [R]``."""
    if context.rho is not None:
        return context.rho.to(like.dtype)[..., None]
    return trial_rho.to(like.device, like.dtype)[:, None, None]


class Objective:
    """Mixin of a ridge learner: the ``objective`` and ``cost_model`` options (module doc).

    Set with :meth:`_init_objective` in the constructor; :meth:`from_problem` then keeps
    the problem's ``rho`` and ``prices`` (:meth:`set_trade_off`) as buffers ``trial_rho [R]``
    and ``known_prices [R, K]``, and with ``cost_model: ridge`` the cost ridge ``cost_w
    [d + 1, K]`` (float64, :meth:`fit_cost_model`), outside the state_dict (rebuilt from
    the problem whenever the learner is built).
    """

    objective: str = "utility"
    cost_model: str = "price"

    @classmethod
    def check_options(cls, **hparams: Any) -> None:
        """``objective`` and ``cost_model`` checked before anything is built (one-line
        ``OptionError``s: :func:`check_objective`, :func:`check_cost_model`), then the
        base class's checks."""
        objective = check_objective(cls.__name__, hparams.get("objective", "utility"))
        check_cost_model(cls.__name__, hparams.get("cost_model", "price"), objective)
        super().check_options(**hparams)  # type: ignore[misc]

    @property
    def per_request_rho(self) -> bool:
        """Whether ``act`` decides with each request's ``Context.rho`` (``quality_cost``)."""
        return self.objective == "quality_cost"

    @property
    def warm_target(self) -> str:
        """What its warm-start rows hold: ``"score"`` (``quality_cost``) or ``"utility"``."""
        return "score" if self.objective == "quality_cost" else "utility"

    @classmethod
    def decides_per_request(cls, **hparams: Any) -> bool:
        """Whether a learner built with ``hparams`` decides per request: its ``objective``
        is ``quality_cost``."""
        return hparams.get("objective", "utility") == "quality_cost"

    def _init_objective(self, objective: str, cost_model: str = "price") -> None:
        """Check and keep ``objective`` and ``cost_model``; no trade-off is known until
        :meth:`set_trade_off`, no cost ridge until :meth:`fit_cost_model`."""
        name = type(self).__name__
        self.objective = check_objective(name, objective)
        self.cost_model = check_cost_model(name, cost_model, self.objective)
        self.register_buffer("trial_rho", None, persistent=False)  # [R]
        self.register_buffer("known_prices", None, persistent=False)  # [R, K]
        self.register_buffer("cost_w", None, persistent=False)  # [d + 1, K], float64

    @classmethod
    def from_problem(cls, problem: Problem, **hparams: Any) -> Any:
        """The learner of the base class's ``from_problem``, with ``problem.rho`` and
        ``problem.prices`` kept (:meth:`set_trade_off`) and, with ``cost_model: ridge``,
        its cost ridge fitted on ``problem.train`` (:meth:`fit_cost_model`)."""
        learner = super().from_problem(problem, **hparams)  # type: ignore[misc]
        learner.set_trade_off(problem.rho, problem.prices)
        learner.fit_cost_model(problem)
        return learner

    def fit_cost_model(self, problem: Problem) -> None:
        """With ``cost_model: ridge``: ``cost_w [d + 1, K]`` (float64), the ridge of
        ``problem.train.costs [n, K]`` on ``[features, 1]``
        (:func:`~torchroute.functional.cost_ridge.fit_cost_ridge`); a one-line error
        naming ``cost_model`` without a train split. Nothing with ``cost_model: price``."""
        if self.cost_model != "ridge":
            return
        train = problem.require_train(f"{type(self).__name__} (cost_model: ridge)")
        ref = next(t for t in self.buffers() if t.is_floating_point())  # type: ignore[attr-defined]
        self.cost_w = fit_cost_ridge(train.features, train.costs).to(ref.device)

    def set_trade_off(self, rho: Tensor, prices: Tensor | None) -> None:
        """Keep each trial's ``rho [R]`` and each model's price ``[K]`` (``None``: unknown;
        a ``quality_cost`` learner then needs ``Context.prices``)."""
        ref = next(t for t in self.buffers() if t.is_floating_point())  # type: ignore[attr-defined]
        r, k = self.num_trials, self.num_arms  # type: ignore[attr-defined]
        self.trial_rho = torch.as_tensor(rho).to(ref.device, ref.dtype).reshape(r).clone()
        if prices is not None:
            prices = torch.as_tensor(prices).to(ref.device, ref.dtype).reshape(1, k)
            self.known_prices = prices.expand(r, k).clone()

    def _learning_target(self, feedback: Feedback) -> Tensor:
        """What the ridge model learns, ``[R, B, K]``: ``Feedback.reward`` (``utility``) or
        ``Feedback.score`` (``quality_cost``; an error naming the learner without one)."""
        if self.objective == "utility":
            return feedback.reward
        if feedback.score is None:
            raise InputError(
                f"{type(self).__name__} (objective: quality_cost) learns the quality "
                "Feedback.score, but the environment gives none; use objective: utility"
            )
        return feedback.score

    def _refuse_other_rho(self, context: Context) -> None:
        """A ``utility`` learner's one-line error for a ``Context.rho`` that differs from
        its trials' (:func:`refuse_request_rho`); nothing for ``quality_cost``."""
        if self.objective == "utility":
            refuse_request_rho(type(self).__name__, context, self.trial_rho)

    def _decision_values(self, y: Tensor, context: Context) -> Tensor:
        """``utility``: ``y [R, B, K]`` itself, after :func:`refuse_request_rho`.
        ``quality_cost``: ``y - rho c`` with the request's ``rho`` and the known costs
        ``c`` of the ``cost_model`` (:meth:`decision_costs`)."""
        if self.objective == "utility":
            self._refuse_other_rho(context)
            return y
        if context.rho is None and self.trial_rho is None:
            raise InputError(
                f"{type(self).__name__} (objective: quality_cost) needs a trade-off: "
                "Context.rho or each trial's rho (build it with from_problem)"
            )
        costs = self.decision_costs(context)
        rho = request_rho(context, self.trial_rho, y)
        return y - rho * costs.to(y.device, y.dtype)

    def decision_costs(self, context: Context) -> Tensor:
        """The costs ``c`` a ``quality_cost`` learner decides by, per ``cost_model``:

        - ``price``: ``Context.prices [R, B, K]``, else ``Problem.prices`` as ``[R, 1, K]``
          (in the learner's dtype);
        - ``ridge``: the cost ridge's prediction ``c_k(x)`` for ``context.x [R, B, d]``,
          ``[R, B, K]`` in float64; with ``Context.prices`` taken at those prices,
          ``c_k(x) p_now / p_ref`` (:func:`~torchroute.functional.prices.costs_at`,
          ``p_ref = Problem.prices``).

        A one-line ``InputError`` when what it needs is missing."""
        name = type(self).__name__
        if self.cost_model == "ridge":
            if self.cost_w is None:
                raise InputError(
                    f"{name} (cost_model: ridge) has no cost ridge: build it with "
                    "from_problem on a problem with a train split"
                )
            costs = predict_costs(self.cost_w, context.x.to(self.cost_w.dtype))
            if context.prices is None:
                return costs
            if self.known_prices is None:
                raise InputError(
                    f"{name} (cost_model: ridge) reads Context.prices against the reference "
                    "prices Problem.prices, but the problem has none"
                )
            ref = self.known_prices.to(costs.dtype)[:, None]  # [R, 1, K]
            return costs_at(costs, ref, context.prices.to(costs.device, costs.dtype))
        if context.prices is not None:
            return context.prices
        if self.known_prices is None:
            raise InputError(
                f"{name} (objective: quality_cost) needs each model's "
                "price: Context.prices or Problem.prices (a table with a train split)"
            )
        return self.known_prices[:, None]  # [R, 1, K]

    def priced_scores(self, scores: Tensor, context: Context) -> Tensor:
        """``utility``: the utility estimates ``[R, B, K]`` moved to this round's prices
        (:meth:`~torchroute.learners.known_prices.KnownPrices.priced_scores`);
        ``quality_cost``: ``scores`` itself, whose values already take this round's prices
        (:meth:`_decision_values`)."""
        if self.objective == "quality_cost":
            return scores
        return super().priced_scores(scores, context)  # type: ignore[misc]

    def _trial_values(self, y: Tensor, x: Tensor) -> Tensor:
        """``y [R, n, K]`` as each trial's decision values at its own ``rho`` and the known
        costs of the queries ``x [n, d]`` (what a warm start's validation choice compares)."""
        context = Context(x=x.to(y.device)[None].expand(y.shape[0], *x.shape))
        return self._decision_values(y, context)
