"""How a learner reads the known prices of ``Context.prices`` (``docs/reference/learners.md``,
"Known prices"): the reference it keeps from its problem and the conversions it applies.

:class:`KnownPrices` is a base of :class:`~torchroute.learners.Learner`; the rules themselves
are the pure functions of :mod:`torchroute.functional.prices`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar, Self

import torch
from torch import Tensor

from torchroute.functional.prices import costs_at, reference_utility, utility_shift
from torchroute.types import Context, Feedback, Problem


class KnownPrices:
    """The price-reading part of a learner (an ``nn.Module`` with ``num_trials``,
    ``num_arms`` and a ``rounds [R]`` buffer).

    A learner that :attr:`reads_prices` keeps ``Problem.prices`` and ``Problem.rho`` as its
    reference when :meth:`from_problem <torchroute.learners.Learner.from_problem>` builds
    it, and converts with :meth:`priced_scores` (utility estimates), :meth:`priced_costs`
    (cost predictions) and :meth:`reference_feedback` (update targets). Each of them does
    nothing, and costs nothing, while ``Context.prices`` is ``None`` or the learner has no
    reference.
    """

    #: whether ``act`` reads the known prices of ``Context.prices`` at every round (a price
    #: change moves its choice at once, with nothing to learn)
    reads_prices: ClassVar[bool] = False
    #: why a single-choice learner with ``reads_prices = False`` does not read them (a test
    #: asks every single-choice learner for one or the other)
    prices_unread: ClassVar[str] = ""

    num_trials: int
    num_arms: int
    rounds: Tensor
    register_buffer: Callable[..., None]

    def keep_prices(self, problem: Problem) -> Self:
        """Keep ``problem``'s prices as the reference of ``Context.prices`` (in place).

        For a learner that :attr:`reads_prices`: non-persistent buffers ``price_ref [R, K]``
        (``Problem.prices``, what the learner was fitted or warmed at; ``None`` when the
        problem knows none, and then no price is read) and ``price_rho [R]`` (the trials'
        ``rho``). :meth:`from_problem` calls it. Returns ``self``.
        """
        if not self.reads_prices:
            return self
        prices = problem.prices
        ref = None
        if prices is not None and tuple(prices.shape) == (self.num_arms,):
            ref = prices.detach().to(self.rounds.device)
            ref = ref.expand(self.num_trials, self.num_arms).clone()
        rho = problem.rho.detach().to(self.rounds.device)
        self.register_buffer("price_ref", ref, persistent=False)  # [R, K] or None
        self.register_buffer("price_rho", rho.clone(), persistent=False)  # [R]
        return self

    def _knows_prices(self, context: Context) -> bool:
        """Whether ``context`` carries prices and the learner a reference to read them by."""
        return context.prices is not None and getattr(self, "price_ref", None) is not None

    def _price_rho(self, context: Context, like: Tensor) -> Tensor:
        """The trade-off the prices are read at, ``[R, B, 1]`` (``Context.rho``, else the
        trials' ``rho``), in ``like``'s dtype."""
        if context.rho is not None:
            return context.rho.to(like.dtype)[..., None]
        return self.price_rho.to(like.dtype)[:, None, None]

    def priced_scores(self, scores: Tensor, context: Context) -> Tensor:
        """Utility estimates ``[R, B, K]`` at the reference prices moved to this round's:
        ``scores - rho (p_now - p_ref)`` (:func:`~torchroute.functional.prices.
        utility_shift`); ``scores`` itself (no work) without ``Context.prices``."""
        if not self._knows_prices(context):
            return scores
        ref = self.price_ref.to(scores.dtype)[:, None]  # [R, 1, K]
        now = context.prices.to(scores.dtype)  # type: ignore[union-attr]
        return scores + utility_shift(ref, now, self._price_rho(context, scores))

    def priced_costs(self, costs: Tensor, context: Context) -> Tensor:
        """Costs ``[R, B, K]`` predicted at the reference prices, at this round's prices
        (:func:`~torchroute.functional.prices.costs_at`); ``costs`` itself (no work)
        without ``Context.prices``."""
        if not self._knows_prices(context):
            return costs
        ref = self.price_ref.to(costs.dtype)[:, None]  # [R, 1, K]
        return costs_at(costs, ref, context.prices.to(costs.dtype))  # type: ignore[union-attr]

    def reference_feedback(self, context: Context, feedback: Feedback) -> Feedback:
        """``feedback`` with its reward translated to the reference prices where it has
        ``cost``: ``reward + rho (cost - cost p_ref / p_now)`` on the observed cells
        (:func:`~torchroute.functional.prices.reference_utility`; ``y - rho c p_ref /
        p_now`` where nothing is clipped), so that the estimates, moved by
        :meth:`priced_scores`, stay those of the utility at the prices in force;
        ``feedback`` itself (no work) without ``Context.prices`` or without costs.
        Applying it twice is not the same: call it once per update."""
        if not self._knows_prices(context) or feedback.cost is None:
            return feedback
        reward = feedback.reward
        ref = self.price_ref.to(reward.dtype)[:, None]  # [R, 1, K]
        now = context.prices.to(reward.dtype)  # type: ignore[union-attr]
        cost = feedback.cost.to(reward.dtype)
        target = reference_utility(reward, cost, ref, now, self._price_rho(context, reward))
        return replace(feedback, reward=torch.where(feedback.observed, target, reward))


def keeping_prices(make: Callable[..., Any]) -> Callable[..., Any]:
    """``from_problem`` that also keeps the problem's prices (:meth:`KnownPrices.keep_prices`)."""

    @functools.wraps(make)
    def wrapped(cls: type, problem: Problem, *args: Any, **kwargs: Any) -> Any:
        learner = make(cls, problem, *args, **kwargs)
        if isinstance(learner, KnownPrices) and isinstance(problem, Problem):
            learner.keep_prices(problem)
        return learner

    return wrapped


__all__ = ["KnownPrices", "keeping_prices"]
