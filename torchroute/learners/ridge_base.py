"""Shared state and update of the learners built on a per-arm ridge regression solver."""

from __future__ import annotations

import torch
from torch import Tensor

from torchroute.functional.ridge import ridge_init, sherman_morrison_, woodbury
from torchroute.learners.base import Learner
from torchroute.types import Context, Decision, Feedback


class RidgeLearner(Learner):
    """A learner whose reward model is one ridge regression per arm and trial.

    Buffers: ``a_inv [R, K, d, d]`` and ``theta [R, K, d]`` (see
    :mod:`torchroute.functional.ridge`).

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d``, the context dimension.
        lam: ridge regulariser ``lambda`` (10 in the CABS experiments).
    """

    def __init__(self, num_trials: int, num_arms: int, dim: int, lam: float = 10.0) -> None:
        super().__init__(num_trials, num_arms)
        self.dim = dim
        self.lam = lam
        a_inv, theta = ridge_init(num_trials, num_arms, dim, lam)
        self.register_buffer("a_inv", a_inv)
        self.register_buffer("theta", theta)

    def _check_context(self, context: Context) -> None:
        super()._check_context(context)
        if context.x.shape[-1] != self.dim:
            raise ValueError(
                f"{type(self).__name__} was built for d={self.dim} features but the context "
                f"has d={context.x.shape[-1]}"
            )

    def update(self, context: Context, decision: Decision, feedback: Feedback) -> dict[str, Tensor]:
        """Fit the observed rewards: the played arm only, or every arm with full feedback."""
        self._check_context(context)
        self._check_feedback(context, feedback)
        x = context.x.to(self.theta.dtype)  # [R, B, d]
        reward = feedback.reward.to(x.dtype)  # [R, B, K]
        weight = feedback.observed.to(x.dtype)  # [R, B, K]
        r, b, _ = x.shape
        if self.full_feedback or b > 1:
            if not self.full_feedback:  # bandit batch: only the played arm of each context
                arms = torch.arange(self.num_arms, device=x.device)
                played = decision.action[..., None] == arms  # [R, B, K]
                weight = weight * played.to(x.dtype)
            xs = x[:, None].expand(r, self.num_arms, b, self.dim)  # [R, K, B, d]
            self.a_inv, self.theta = woodbury(
                self.a_inv, self.theta, xs, reward.transpose(1, 2), weight.transpose(1, 2)
            )
        else:
            # One context, one played arm per trial: update that arm's matrix alone
            # (reads and writes d x d per trial instead of K d x d). The gathered copy is
            # updated in place (it is still in cache after the matrix-vector product) and
            # index_copy_ writes it back. Measured on CPU (K=11, R=210/d=128 and R=32/d=384,
            # 2 threads, quiet machine): index_select gathers in half the time of advanced
            # indexing (1.5 vs 3.0 ms at d=128), and the in-place update takes 30-40% less
            # time than an out-of-place update with index_put.
            k, d = self.num_arms, self.dim
            arm = decision.action[:, 0]  # [R]
            flat = torch.arange(r, device=x.device) * k + arm  # [R] rows of the [R*K] views
            if not self.a_inv.is_contiguous():
                self.a_inv = self.a_inv.contiguous()
            if not self.theta.is_contiguous():
                self.theta = self.theta.contiguous()
            a_flat = self.a_inv.view(r * k, d, d)
            t_flat = self.theta.view(r * k, d)
            a_sel = a_flat.index_select(0, flat)  # [R, d, d], a copy
            t_sel = t_flat.index_select(0, flat)  # [R, d]
            y = reward[:, 0].gather(1, arm[:, None])[:, 0]
            w = weight[:, 0].gather(1, arm[:, None])[:, 0]
            sherman_morrison_(a_sel, t_sel, x[:, 0], y, w)
            a_flat.index_copy_(0, flat, a_sel)
            t_flat.index_copy_(0, flat, t_sel)
        self._tick(context)
        return {}
