"""Shared state and update of the learners built on a per-arm ridge regression solver."""

from __future__ import annotations

import torch
from torch import Tensor

from torchroute.functional.ridge import ridge_init, sherman_morrison, woodbury
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
            # (reads and writes d x d per trial instead of K d x d).
            arm = decision.action[:, 0]  # [R]
            rows = torch.arange(r, device=x.device)
            y = reward[rows, 0, arm]
            w = weight[rows, 0, arm]
            a_new, t_new = sherman_morrison(self.a_inv[rows, arm], self.theta[rows, arm],
                                            x[:, 0], y, w)
            self.a_inv[rows, arm] = a_new
            self.theta[rows, arm] = t_new
        self._tick(context)
        return {}
