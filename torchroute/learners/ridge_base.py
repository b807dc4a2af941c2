"""Shared state and update of the learners built on a per-arm ridge regression solver."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.functional.random import Source
from torchroute.functional.ridge import ridge_init, sherman_morrison_, woodbury
from torchroute.learners.base import Learner
from torchroute.types import Context, Decision, Feedback, Problem


class RidgeLearner(Learner):
    """A learner whose reward model is one ridge regression per arm and trial.

    Buffers: ``a_inv [R, K, d, d]`` and ``theta [R, K, d]`` (see
    :mod:`torchroute.functional.ridge`).

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d``, the context dimension.
        lam: ridge regulariser ``lambda``. The default 1 (Li et al.'s ``A_k = I``) keeps an
            untried arm's uncertainty ``||x|| / sqrt(lam)`` above the reward range for
            unit-norm features plus a bias; the CABS experiments use 10, which their
            presets set explicitly (``ALGORITHMS.md`` section 2).
    """

    def __init__(self, num_trials: int, num_arms: int, dim: int, lam: float = 1.0) -> None:
        super().__init__(num_trials, num_arms)
        check_number(type(self).__name__, "dim", dim, ge=1, integer=True)
        check_number(type(self).__name__, "lam", lam, gt=0)
        self.dim = int(dim)
        self.lam = lam
        a_inv, theta = ridge_init(num_trials, num_arms, dim, lam)
        self.register_buffer("a_inv", a_inv)
        self.register_buffer("theta", theta)

    @classmethod
    def from_problem(cls, problem: Problem, **hparams: Any) -> RidgeLearner:
        """``cls(R, K, d, **hparams)`` for ``problem``."""
        return cls(problem.num_trials, problem.num_arms, problem.dim, **hparams)

    def update(
        self,
        context: Context,
        decision: Decision,
        feedback: Feedback,
        generator: Source = None,
    ) -> dict[str, Tensor]:
        """Fit every observed reward (``feedback.observed``, as the env revealed it)."""
        self._check_context(context)
        self._check_feedback(context, feedback)
        x = context.x.to(self.theta.dtype)  # [R, B, d]
        # Unobserved cells are never read as numbers (a NaN there must not leak in).
        reward = torch.where(feedback.observed, feedback.reward.to(x.dtype), 0.0)  # [R, B, K]
        weight = feedback.observed.to(x.dtype)  # [R, B, K]
        r, b, _ = x.shape
        if not feedback.only_played or b > 1:
            xs = x[:, None].expand(r, self.num_arms, b, self.dim)  # [R, K, B, d]
            self.a_inv, self.theta = woodbury(
                self.a_inv, self.theta, xs, reward.transpose(1, 2), weight.transpose(1, 2)
            )
        else:
            # One context, only the played arm observed: update that arm's matrix alone
            # (reads and writes d x d per trial instead of K d x d). The gathered copy is
            # updated in place while it is still in cache and index_copy_ writes it back
            # (index_select and the in-place update are the faster choices; see
            # benchmarks/linucb_throughput.py).
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
