"""Baselines of multinomial subset routing (paper 002 Section 6.3, docs/papers/subset.md).

UCB/TS baselines start with a 10-round round-robin warm-up over the ``K`` experts and
attribute the whole set reward to every selected expert (the shared-reward heuristic).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.functional.random import Source, gamma, uniform
from torchroute.learners.subset_base import LagrangeDual, SubsetLearner
from torchroute.types import Context, Decision, Feedback

WARMUP = 10


def _gumbel(shape, like: Tensor, generator) -> Tensor:
    u = uniform(generator, shape, dtype=like.dtype, device=like.device)
    return -torch.log(-torch.log(u.clamp(1e-12, 1 - 1e-12)))


class RandomSubset(SubsetLearner):
    """``M`` distinct experts uniformly at random (Gumbel-top-M of zero logits)."""

    def act(self, context: Context, generator: Source = None) -> Decision:
        """``M`` distinct experts uniformly at random per trial."""
        self._check_context(context)
        action = self._top_m(_gumbel((self.num_trials, self.num_arms), self.costs, generator))
        probs = torch.full_like(self.costs[:, 0], 1.0 / self.num_arms)
        return self._decide(probs, action)

    def update(self, context, decision: Decision, feedback: Feedback, generator=None):
        """Validate the feedback and count the round. Returns ``{}``."""
        self._feedback(context, decision, feedback)
        self._tick(context)
        return {}


class _SharedRewardTopM(SubsetLearner):
    """Top-M of a per-arm score after a round-robin warm-up; shared-reward means."""

    probs_from_draws = True  # uniform over the chosen M

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.register_buffer("sums", torch.zeros_like(self.costs[:, 0]))
        self.register_buffer("counts", torch.zeros_like(self.costs[:, 0]))

    def _scores(self, generator) -> Tensor:
        raise NotImplementedError

    def act(self, context: Context, generator: Source = None) -> Decision:
        self._check_context(context)
        scores = self._scores(generator)
        # tiny noise breaks ties at random
        scores = scores + 1e-9 * uniform(
            generator, scores.shape, dtype=scores.dtype, device=scores.device
        )
        chosen = self._top_m(scores)
        offsets = torch.arange(self.draws, device=chosen.device)
        robin = (self.rounds[:, None] * self.draws + offsets) % self.num_arms
        action = torch.where((self.rounds < WARMUP)[:, None], robin, chosen)
        return self._decide(self._subset_probs(action, self.costs.dtype), action)

    def _learn(self, reward: Tensor, mask: Tensor) -> None:
        self.sums += reward[:, None] * mask
        self.counts += mask

    def update(self, context, decision: Decision, feedback: Feedback, generator=None):
        reward, _, mask = self._feedback(context, decision, feedback)
        self._learn(reward, mask)
        self._tick(context)
        self._after(reward, mask)
        return {}

    def _after(self, reward: Tensor, mask: Tensor) -> None:
        """Hook for the dual update of the constraint-aware variants."""

    def _mean(self) -> Tensor:
        return self.sums / self.counts.clamp_min(1.0)


class GreedySubset(_SharedRewardTopM):
    """Top-M empirical mean of the shared reward (pure exploitation)."""

    def _scores(self, generator) -> Tensor:
        return self._mean()


class CUCBSubset(_SharedRewardTopM):
    """Top-M of ``mu_i + c sqrt(2 log t / n_i)`` (``c = 2``; unplayed arms first).

    Args:
        c: exploration constant.
    """

    def __init__(self, *args, c: float = 2.0) -> None:
        super().__init__(*args)
        check_number(type(self).__name__, "c", c, ge=0.0)
        self.c = float(c)

    def _scores(self, generator) -> Tensor:
        t = self.rounds.to(self.sums.dtype).clamp_min(1.0)[:, None]
        width = self.c * torch.sqrt(2 * torch.log(t) / self.counts.clamp_min(1.0))
        return torch.where(self.counts > 0, self._mean() + width, torch.inf)


class _DualMixin:
    """The CBwK dual: score ``+ (lam * sign)^T C[:, i]``, step ``dual_scale / sqrt(T)``."""

    def _init_dual(self, step: float) -> None:
        check_number(type(self).__name__, "dual step", step, gt=0.0)
        self.dual = LagrangeDual(self.num_trials, self.costs.shape[1], step).to(self.costs)

    def _penalty(self) -> Tensor:
        sign, _ = self._signed_box()
        return self.dual.penalty(sign, self.costs)

    def _after(self, reward: Tensor, mask: Tensor) -> None:
        sign, bound = self._signed_box()
        cost = torch.einsum("rdk,rk->rd", self.costs, mask)
        self.dual.update(cost, self.rounds, sign, bound)


class CBwKSubset(_DualMixin, CUCBSubset):
    """CUCB score plus the Lagrangian penalty (step ``10 / sqrt(T)``)."""

    def __init__(self, *args, c: float = 2.0, dual_scale: float = 10.0) -> None:
        super().__init__(*args, c=c)
        self._init_dual(dual_scale / math.sqrt(self.horizon))

    def _scores(self, generator) -> Tensor:
        return super()._scores(generator) + self._penalty()


class TSSubset(_SharedRewardTopM):
    """Beta(1, 1) per arm; ``alpha += r / N``, ``beta += 1 - r / N`` for selected arms."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.register_buffer("alpha", torch.ones_like(self.costs[:, 0]))
        self.register_buffer("beta", torch.ones_like(self.costs[:, 0]))

    def _scores(self, generator) -> Tensor:
        a = gamma(generator, self.alpha)
        b = gamma(generator, self.beta)
        return a / (a + b)

    def _learn(self, reward: Tensor, mask: Tensor) -> None:
        share = (reward / self.num_facets).clamp(0.0, 1.0)[:, None]
        self.alpha += share * mask
        self.beta += (1.0 - share) * mask


class TSBwKSubset(_DualMixin, TSSubset):
    """TS sample plus the CBwK dual penalty (step ``10 / sqrt(T)``)."""

    def __init__(self, *args, dual_scale: float = 10.0) -> None:
        super().__init__(*args)
        self._init_dual(dual_scale / math.sqrt(self.horizon))

    def _scores(self, generator) -> Tensor:
        return super()._scores(generator) + self._penalty()


class MoEGating(_DualMixin, SubsetLearner):
    """Online MoE gating: Gumbel-top-M of ``theta``, REINFORCE with a Lagrangian reward.

    ``theta += lr * r_eff * (1_A - softmax(theta))``, ``r_eff = r + (lam * sign)^T l_t``.

    Args:
        lr: REINFORCE step. dual_step: Lagrangian step.
    """

    def __init__(self, *args, lr: float = 0.01, dual_step: float = 4e-4) -> None:
        super().__init__(*args)
        check_number(type(self).__name__, "lr", lr, gt=0.0)
        self.lr = float(lr)
        self._init_dual(dual_step)
        self.register_buffer("theta", torch.zeros_like(self.costs[:, 0]))

    def act(self, context: Context, generator: Source = None) -> Decision:
        """Gumbel-top-``M`` of the gating logits ``theta [R, K]``."""
        self._check_context(context)
        noise = _gumbel(self.theta.shape, self.theta, generator)
        action = self._top_m(self.theta + noise)
        return self._decide(torch.softmax(self.theta, -1), action)

    def update(self, context, decision: Decision, feedback: Feedback, generator=None):
        """REINFORCE step on the logits with the Lagrangian reward, then the dual step.

        Returns:
            ``{}``.
        """
        reward, _, mask = self._feedback(context, decision, feedback)
        sign, _ = self._signed_box()
        cost = torch.einsum("rdk,rk->rd", self.costs, mask)
        r_eff = reward + (self.dual.lam * sign * cost).sum(-1)
        self.theta += self.lr * r_eff[:, None] * (mask - torch.softmax(self.theta, -1))
        self._tick(context)
        self._after(reward, mask)
        return {}
