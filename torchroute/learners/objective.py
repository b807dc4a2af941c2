"""What a ridge bandit learns and decides by: the utility, or quality and cost apart.

``objective: utility`` (the default): the ridge model learns the utility
``u = clip(y - rho c, 0, 1)`` of each trial's ``rho`` (``Feedback.reward``) and the learner
decides by it; the trade-off is baked into what was learnt, so a request whose trade-off
differs (``Context.rho``) cannot be served (a one-line error, :func:`refuse_request_rho`).

``objective: quality_cost``: the ridge model learns the quality ``y`` (``Feedback.score``)
and the cost is known, each model's price ``c_k`` (``Context.prices [R, B, K]`` when the
context carries them, else ``Problem.prices [K]``, the mean train cost per query); the
learner decides by ``y_k - rho c_k`` with the request's ``rho`` (``Context.rho [R, B]``
when given, else its trial's ``Problem.rho``), so one fitted learner serves any trade-off
and a price change needs no learning. The value is not clipped to ``[0, 1]``.

:class:`Objective` is the mixin of the ridge learners (LinUCB, LinTS, SquareCB, their
discounted and sliding-window forms); it says what the learner can do through
:attr:`Objective.per_request_rho` and :attr:`Objective.warm_target`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from torchroute.errors import InputError, OptionError
from torchroute.types import Context, Feedback, Problem

#: the values of the ``objective`` option
OBJECTIVES = ("utility", "quality_cost")


def check_objective(owner: str, objective: str) -> str:
    """``objective`` when it is one of :data:`OBJECTIVES`; else a one-line ``OptionError``."""
    if objective not in OBJECTIVES:
        raise OptionError(
            f"{owner}: objective must be one of {list(OBJECTIVES)}, got {objective!r}"
        )
    return objective


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
        "quality_cost (LinUCB, LinTS, SquareCB and their forgetting forms), a static score "
        "router or a residual learner"
    )


def request_rho(context: Context, trial_rho: Tensor, like: Tensor) -> Tensor:
    """Each request's trade-off as ``[R, B, 1]`` (or ``[R, 1, 1]``) in ``like``'s dtype:
    ``context.rho [R, B]`` when given, else ``trial_rho [R]``."""
    if context.rho is not None:
        return context.rho.to(like.dtype)[..., None]
    return trial_rho.to(like.device, like.dtype)[:, None, None]


class Objective:
    """Mixin of a ridge learner: the ``objective`` option (module doc).

    Set with :meth:`_init_objective` in the constructor; :meth:`from_problem` then keeps
    the problem's ``rho`` and ``prices`` (:meth:`set_trade_off`) as buffers ``trial_rho [R]``
    and ``known_prices [R, K]`` outside the state_dict (rebuilt from the problem whenever
    the learner is built).
    """

    objective: str = "utility"

    @property
    def per_request_rho(self) -> bool:
        """Whether ``act`` decides with each request's ``Context.rho`` (``quality_cost``)."""
        return self.objective == "quality_cost"

    @property
    def warm_target(self) -> str:
        """What its warm-start rows hold: ``"score"`` (``quality_cost``) or ``"utility"``."""
        return "score" if self.objective == "quality_cost" else "utility"

    def _init_objective(self, objective: str) -> None:
        """Check and keep ``objective``; no trade-off is known until :meth:`set_trade_off`."""
        self.objective = check_objective(type(self).__name__, objective)
        self.register_buffer("trial_rho", None, persistent=False)  # [R]
        self.register_buffer("known_prices", None, persistent=False)  # [R, K]

    @classmethod
    def from_problem(cls, problem: Problem, **hparams: Any) -> Any:
        """The learner of the base class's ``from_problem``, with ``problem.rho`` and
        ``problem.prices`` kept (:meth:`set_trade_off`)."""
        learner = super().from_problem(problem, **hparams)  # type: ignore[misc]
        learner.set_trade_off(problem.rho, problem.prices)
        return learner

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

    def _decision_values(self, y: Tensor, context: Context) -> Tensor:
        """``utility``: ``y [R, B, K]`` itself, after :func:`refuse_request_rho`.
        ``quality_cost``: ``y - rho c`` with the request's ``rho`` and the known prices."""
        if self.objective == "utility":
            refuse_request_rho(type(self).__name__, context, self.trial_rho)
            return y
        if context.rho is None and self.trial_rho is None:
            raise InputError(
                f"{type(self).__name__} (objective: quality_cost) needs a trade-off: "
                "Context.rho or each trial's rho (build it with from_problem)"
            )
        prices = context.prices
        if prices is None:
            if self.known_prices is None:
                raise InputError(
                    f"{type(self).__name__} (objective: quality_cost) needs each model's "
                    "price: Context.prices or Problem.prices (a table with a train split)"
                )
            prices = self.known_prices[:, None]  # [R, 1, K]
        rho = request_rho(context, self.trial_rho, y)
        return y - rho * prices.to(y.device, y.dtype)

    def _trial_values(self, y: Tensor) -> Tensor:
        """``y [R, n, K]`` as each trial's decision values at its own ``rho`` and the known
        prices (what a warm start's validation choice compares)."""
        return self._decision_values(y, Context(x=y.new_zeros(y.shape[0], y.shape[1], 1)))
