"""OMD-Approachability (paper 002 Algorithms 1 and 2, docs/papers/subset.md)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.functional.projections import (
    project_capped_simplex_halfspace,
    project_unit_ball,
    safe_box,
    support_function,
    support_maximiser,
)
from torchroute.functional.random import Source
from torchroute.functional.subset import draw_multiset
from torchroute.learners.subset_base import SubsetLearner
from torchroute.types import Context, Decision, Feedback


class _ApproachabilityBase(SubsetLearner):
    """The dual player: OGD on the unit ball maximising ``f(w) = w^T u - h_S(w)``."""

    iid_draws = True  # M i.i.d. draws from q
    device_tolerance = "solver"  # projections onto the capped simplex and halfspace

    def _setup(self, gamma: float | None, eta_ogd: float, d: int) -> None:
        name = type(self).__name__
        k = self.num_arms
        self.gamma = 1.0 / (10 * k) if gamma is None else float(gamma)
        check_number(name, "gamma", self.gamma, ge=0.0, le=1.0 / k)
        check_number(name, "eta_ogd", eta_ogd, gt=0.0)
        self.eta_ogd = float(eta_ogd)
        lo, hi = safe_box(*self._box(), self.draws, self.costs.amax(-1))
        self.register_buffer("safe_lo", lo)
        self.register_buffer("safe_hi", hi)
        self.register_buffer("w", torch.zeros(self.num_trials, d, dtype=self.costs.dtype))

    def _dual_step(self, q_prev: Tensor) -> None:
        """``w <- Proj_ball(w + eta_ogd (C q_prev - x*(w)))`` (Algorithm 1, step 1)."""
        u = torch.einsum("rdk,rk->rd", self.costs, q_prev)
        x = support_maximiser(self.w, self.safe_lo, self.safe_hi)
        self.w.copy_(project_unit_ball(self.w + self.eta_ogd * (u - x)))

    def _primal(self, q: Tensor, grad: Tensor, eta: Tensor | float) -> Tensor:
        """The proximal QP (6) as a projection onto ``{simplex, >= gamma, a^T q <= b}``."""
        a = torch.einsum("rdk,rd->rk", self.costs, self.w)
        b = support_function(self.w, self.safe_lo, self.safe_hi)
        eta = torch.as_tensor(eta, dtype=q.dtype, device=q.device)
        y = q + grad / (eta[..., None] if eta.ndim else eta)
        return project_capped_simplex_halfspace(y, self.gamma, a, b)


class OMDApproachability(_ApproachabilityBase):
    """Algorithm 1: online mirror descent on ``q`` with Blackwell approachability.

    Per round the dual ``w`` takes one OGD step; the gradient estimate
    ``g_i = (r - b_bar) / q_i * #{j : a_j = i}`` is accumulated and every ``update_every``
    rounds ``q`` takes one proximal step with the averaged gradient (batched mode, paper
    Section 6). Defaults (paper Section 6.3): ``gamma = 1/(10K)``,
    ``eta = eta_mult sqrt(2 T K M (1/gamma + M - 1))``, ``eta_mult = 0.05``,
    ``eta_ogd = 0.05``, ``update_every = 10``, running-average baseline on.

    Args:
        eta_mult: multiplier of the proximal parameter.
        eta_ogd: dual step size.
        gamma: exploration floor (``None``: ``1 / (10 K)``).
        update_every: rounds per primal step (``1``: the per-round Algorithm 1).
        baseline: subtract the running-average reward (``False``: Algorithm 1 exactly).
    """

    def __init__(
        self,
        *args,
        eta_mult: float = 0.05,
        eta_ogd: float = 0.05,
        gamma: float | None = None,
        update_every: int = 10,
        baseline: bool = True,
    ) -> None:
        super().__init__(*args)
        name = type(self).__name__
        check_number(name, "eta_mult", eta_mult, gt=0.0)
        check_number(name, "update_every", update_every, ge=1, integer=True)
        self._setup(gamma, eta_ogd, self.costs.shape[1])
        k, m = self.num_arms, self.draws
        self.eta = eta_mult * math.sqrt(2 * self.horizon * k * m * (1 / self.gamma + m - 1))
        self.update_every, self.baseline = int(update_every), bool(baseline)
        r, dt = self.num_trials, self.costs.dtype
        self.register_buffer("q", torch.full((r, k), 1.0 / k, dtype=dt))
        self.register_buffer("grad_sum", torch.zeros(r, k, dtype=dt))
        self.register_buffer("reward_mean", torch.zeros(r, dtype=dt))
        self._pending = 0  # rounds accumulated in grad_sum (saved as extra state)

    def get_extra_state(self) -> dict:
        """The rounds accumulated towards the next QP (saved in checkpoints)."""
        return {"pending": self._pending}

    def set_extra_state(self, state: dict) -> None:
        """Restore what :meth:`get_extra_state` saved."""
        self._pending = int(state["pending"])

    def act(self, context: Context, generator: Source = None) -> Decision:
        """``M`` i.i.d. draws from ``q [R, K]``: the decision of every trial."""
        self._check_context(context)
        return self._decide(self.q, draw_multiset(self.q, self.draws, generator))

    def update(self, context, decision: Decision, feedback: Feedback, generator=None):
        """Accumulate the gradient estimate and step the dual; the primal QP every ``update_every``.

        Returns:
            ``{}``.
        """
        reward, counts, _ = self._feedback(context, decision, feedback)
        base = self.reward_mean if self.baseline else torch.zeros_like(reward)
        self.grad_sum += (reward - base)[:, None] / self.q * counts
        self._tick(context)
        self.reward_mean += (reward - self.reward_mean) / self.rounds.to(reward.dtype)
        self._dual_step(self.q)
        self._pending += 1
        if self._pending == self.update_every:
            grad = self.grad_sum / self._pending
            self.q.copy_(self._primal(self.q, grad, self.eta))
            self.grad_sum.zero_()
            self._pending = 0
        return {}


class ContextualOMDApproachability(_ApproachabilityBase):
    """Algorithm 2: one iterate and one stored gradient per context, a shared dual.

    The context of a round is the arg-max of its one-hot ``Context.x [R, 1, X]`` (a finite
    context set of size ``X = d``). At a visit of ``x``: ``n_x += 1``; the dual steps on
    ``u = C q_prev`` (the previous round's policy); ``q^(x)`` takes the proximal step with
    ``eta = a sqrt(n_x)``, ``a = 2 sqrt(K M (1/gamma + M - 1))`` and its stored gradient;
    the ``M`` draws come from the new ``q^(x)``; ``g^(x) = r / q^(x) * counts``.
    ``act`` computes the step without storing it; ``update`` stores the same step.
    """

    reads_groups = True

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
        *,
        num_contexts: int = 1,
        eta_ogd: float = 0.05,
        gamma: float | None = None,
    ) -> None:
        super().__init__(num_trials, num_arms, draws, costs, lower, upper, horizon, num_facets)
        check_number(type(self).__name__, "num_contexts", num_contexts, ge=1, integer=True)
        self._setup(gamma, eta_ogd, self.costs.shape[1])
        self.dim = int(num_contexts)
        k, m, r, dt = num_arms, self.draws, num_trials, self.costs.dtype
        self.a = 2 * math.sqrt(k * m * (1 / self.gamma + m - 1))
        self.register_buffer("q", torch.full((r, num_contexts, k), 1.0 / k, dtype=dt))
        self.register_buffer("grad", torch.zeros(r, num_contexts, k, dtype=dt))
        self.register_buffer("visits", torch.zeros(r, num_contexts, dtype=dt))
        self.register_buffer("q_prev", torch.full((r, k), 1.0 / k, dtype=dt))

    @classmethod
    def from_problem(cls, problem, **hparams):
        """Build from a :class:`~torchroute.types.Problem`, one context per feature (``X = d``)."""
        return super().from_problem(problem, num_contexts=problem.dim, **hparams)

    def _step(self, context: Context) -> tuple[Tensor, Tensor, Tensor]:
        """``(ctx [R], new q^(x) [R, K], new w [R, d])`` of this round, nothing stored."""
        ctx = context.x[:, 0].argmax(-1)
        w_saved = self.w.clone()
        self._dual_step(self.q_prev)
        n = self.visits.gather(1, ctx[:, None])[:, 0] + 1
        q_x = self.q[torch.arange(self.num_trials, device=ctx.device), ctx]
        g_x = self.grad[torch.arange(self.num_trials, device=ctx.device), ctx]
        q_new = self._primal(q_x, g_x, self.a * n.sqrt())
        w_new = self.w.clone()
        self.w.copy_(w_saved)
        return ctx, q_new, w_new

    def act(self, context: Context, generator: Source = None) -> Decision:
        """``M`` draws from the iterate of each trial's context (one-hot ``x [R, 1, X]``)."""
        self._check_context(context)
        _, q_new, _ = self._step(context)
        return self._decide(q_new, draw_multiset(q_new, self.draws, generator))

    def update(self, context, decision: Decision, feedback: Feedback, generator=None):
        """Step the visited context's iterate and the shared dual. Returns ``{}``."""
        reward, counts, _ = self._feedback(context, decision, feedback)
        ctx, q_new, w_new = self._step(context)
        rows = torch.arange(self.num_trials, device=ctx.device)
        self.w.copy_(w_new)
        self.q[rows, ctx] = q_new
        self.grad[rows, ctx] = reward[:, None] / q_new * counts
        self.visits[rows, ctx] += 1
        self.q_prev.copy_(q_new)
        self._tick(context)
        return {}
