"""Shared pieces of the subset-routing learners (paper 002, docs/papers/subset.md)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.functional.subset import draw_counts
from torchroute.learners.base import Learner
from torchroute.types import Context, Decision, Feedback, Problem


class SubsetLearner(Learner):
    """A learner that routes each context to ``M`` draws and learns from the set reward.

    Args:
        num_trials: ``R``. num_arms: ``K``. draws: ``M``.
        costs: ``[R, d, K]`` per-expert cost vectors. lower, upper: ``[R, d]`` target box.
        horizon: ``T``. num_facets: ``N`` (reward scale ``[0, N]``).

    Class attributes say how ``act``'s decision reads (tests and the served propensity use
    them): :attr:`iid_draws` and :attr:`probs_from_draws`.
    """

    protocol = "subset"
    #: the ``M`` draws are i.i.d. from ``Decision.probs`` (else: ``M`` distinct experts)
    iid_draws: bool = False
    #: ``Decision.probs`` is uniform over the drawn set (a summary of the random action,
    #: not a distribution the draws come from)
    probs_from_draws: bool = False

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        draws: int,
        costs: Tensor,
        lower: Tensor,
        upper: Tensor,
        horizon: int,
        num_facets: int = 1,
    ) -> None:
        super().__init__(num_trials, num_arms)
        name = type(self).__name__
        check_number(name, "draws", draws, ge=1, le=num_arms, integer=True)
        check_number(name, "horizon", horizon, ge=1, integer=True)
        if costs.ndim != 3 or costs.shape[0] != num_trials or costs.shape[2] != num_arms:
            raise ValueError(
                f"{name}: costs must be [R={num_trials}, d, K={num_arms}], got {tuple(costs.shape)}"
            )
        d = costs.shape[1]
        for what, box in (("lower", lower), ("upper", upper)):
            if tuple(box.shape) != (num_trials, d):
                raise ValueError(
                    f"{name}: {what} must be [R, d]={(num_trials, d)}, got {tuple(box.shape)}"
                )
        self.draws, self.horizon, self.num_facets = int(draws), int(horizon), int(num_facets)
        # float64: the projections and the gradient estimates need the accuracy
        self.register_buffer("costs", costs.detach().clone().to(torch.float64))
        # the loop checks every float buffer for inf: absent bounds are masks, stored as 0
        lower, upper = lower.detach().to(torch.float64), upper.detach().to(torch.float64)
        self.register_buffer("has_lower", torch.isfinite(lower))
        self.register_buffer("has_upper", torch.isfinite(upper))
        self.register_buffer("lower", torch.where(self.has_lower, lower, 0.0))
        self.register_buffer("upper", torch.where(self.has_upper, upper, 0.0))

    @classmethod
    def from_problem(cls, problem: Problem, **hparams: Any) -> SubsetLearner:
        """Build from a :class:`~torchroute.envs.subset.SubsetProblem`."""
        if getattr(problem, "costs", None) is None or problem.horizon is None:
            raise ValueError(
                f"{cls.__name__} needs a subset-routing problem (draws, costs, target box, "
                "horizon): use it with a SubsetEnv"
            )
        return cls(
            problem.num_trials,
            problem.num_arms,
            problem.draws,
            problem.costs,
            problem.lower,
            problem.upper,
            problem.horizon,
            problem.num_facets,
            **hparams,
        )

    # ---------------------------------------------------------------- helpers
    def _decide(self, probs: Tensor, action: Tensor) -> Decision:
        """``probs [R, K]``, ``action [R, M]`` -> a one-context decision."""
        return Decision(probs[:, None], action[:, None])

    def _feedback(self, context: Context, decision: Decision, feedback: Feedback):
        """``(reward [R], counts [R, K], mask [R, K] float)`` of a one-context round."""
        self._check_context(context)
        if feedback.set_reward is None:
            raise ValueError(f"{type(self).__name__} needs Feedback.set_reward (subset routing)")
        reward = feedback.set_reward[:, 0].to(self.costs.dtype)
        counts = draw_counts(decision.action[:, 0], self.num_arms, self.costs.dtype)
        return reward, counts, (counts > 0).to(self.costs.dtype)

    def _signed_box(self) -> tuple[Tensor, Tensor]:
        """``(sign [R, d], bound [R, d])``: ``-1, u`` for upper bounds, ``+1, l`` for lower."""
        sign = torch.where(self.has_upper, -1.0, torch.where(self.has_lower, 1.0, 0.0))
        bound = torch.where(self.has_upper, self.upper, self.lower)
        return sign.to(self.costs.dtype), bound

    def _box(self) -> tuple[Tensor, Tensor]:
        """The target box ``(lower, upper)`` with ``-inf`` / ``+inf`` for absent bounds."""
        inf = torch.tensor(torch.inf, dtype=self.lower.dtype, device=self.lower.device)
        return torch.where(self.has_lower, self.lower, -inf), torch.where(
            self.has_upper, self.upper, inf
        )

    def _top_m(self, scores: Tensor) -> Tensor:
        """Indices of the ``M`` largest scores, ``[R, M]``."""
        return scores.topk(self.draws, dim=-1).indices

    def _subset_probs(self, action: Tensor, dtype: torch.dtype) -> Tensor:
        """Uniform over the distinct arms of ``action [R, M]``, ``[R, K]``."""
        mask = draw_counts(action, self.num_arms, dtype) > 0
        return mask.to(dtype) / mask.sum(-1, keepdim=True).to(dtype)


class LagrangeDual(torch.nn.Module):
    """The Lagrangian dual of the CBwK / TS-BwK / MoE baselines (paper 002 Section 6.3).

    ``lam_j <- max(0, lam_j + step * v_j)`` with ``v`` the violation of the running-average
    realised cost (``avg - u`` for an upper bound, ``l - avg`` for a lower bound).
    """

    def __init__(self, num_trials: int, dim: int, step: float) -> None:
        super().__init__()
        self.step = float(step)
        self.register_buffer("lam", torch.zeros(num_trials, dim))
        self.register_buffer("cost_sum", torch.zeros(num_trials, dim))

    def penalty(self, sign: Tensor, costs: Tensor) -> Tensor:
        """``(lam * sign)^T C[:, i]`` per arm, ``[R, K]``."""
        return torch.einsum("rd,rdk->rk", self.lam * sign, costs)

    def update(self, cost: Tensor, rounds: Tensor, sign: Tensor, bound: Tensor) -> None:
        """Add the realised cost ``[R, d]`` of round ``rounds`` (``[R]``, 1-based)."""
        self.cost_sum += cost
        avg = self.cost_sum / rounds[:, None].to(cost.dtype)
        violation = -sign * (avg - bound)  # sign = -1: avg - u; +1: l - avg; 0: inactive
        self.lam.copy_((self.lam + self.step * violation).clamp_min(0.0))
