"""A static router that takes each request's rho, for the serve and gateway tests.

``argmax_k y_k - rho_b c_k`` with fixed predicted scores ``y [K]`` and the problem's prices
``c [K]``, where ``rho_b`` is the request's ``Context.rho`` (else the trial's rho): the
simplest learner of the kind that serves every trade-off from one state, so that the
tests check what serve does with a request's rho against a hand computation.
"""

from __future__ import annotations

import torch
from torch import Tensor

from torchroute.functional.availability import mask_scores
from torchroute.functional.sampling import argmax_random_ties, one_hot_probs
from torchroute.learners.base import ArgmaxRouting, FixedPolicy
from torchroute.types import Context, Decision, Problem


class PriceAwareRouter(ArgmaxRouting, FixedPolicy):
    """``argmax_k y_k - rho c_k`` per request, ``rho [R, B]`` from ``Context.rho``.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        rho: each trial's own rho ``[R]`` (requests without one).
        scores: predicted quality ``y [K]``.
        prices: price ``c [K]``.
    """

    per_request_rho = True

    def __init__(
        self, num_trials: int, num_arms: int, rho: Tensor, scores: Tensor, prices: Tensor
    ) -> None:
        super().__init__(num_trials, num_arms)
        self.register_buffer("rho", rho.double().clone())  # [R]
        self.register_buffer("scores", scores.double().clone())  # [K]
        self.register_buffer("prices", prices.double().clone())  # [K]

    @classmethod
    def from_problem(cls, problem: Problem, scores: list[float]) -> PriceAwareRouter:
        """The router of ``problem`` (its ``rho [R]`` and ``prices [K]``) with ``y = scores``."""
        return cls(
            problem.num_trials, problem.num_arms, problem.rho, torch.tensor(scores), problem.prices
        )

    def _argmax_scores(self, context: Context, generator=None) -> Tensor:
        r, b = context.x.shape[:2]
        rho = self.rho[:, None].expand(r, b) if context.rho is None else context.rho.double()
        value = self.scores - rho[..., None] * self.prices  # [R, B, K]
        return mask_scores(value.to(context.x.dtype), context.available)

    def act(self, context: Context, generator=None) -> Decision:
        self._check_context(context)
        scores = self._argmax_scores(context, generator)
        action = argmax_random_ties(scores, generator)
        probs = one_hot_probs(action, self.num_arms, context.x.dtype)
        return Decision(probs=probs, action=action, scores=scores)
