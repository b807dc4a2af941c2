"""The learner interface: ``act`` and ``update``, state in buffers with a leading trial dim."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from torchroute.types import Context, Decision, Feedback


class Learner(nn.Module):
    """Base class of every online learner.

    A learner holds ``R`` independent trials; every buffer starts with that dimension, so
    ``.to(device)``, ``state_dict()`` and ``load_state_dict()`` move, save and restore a
    whole batched run. Subclasses implement :meth:`act` and :meth:`update`; neither
    synchronises with the host.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
    """

    #: learners that want every arm's reward each round (full information) say so here;
    #: the environment then reveals all of them.
    full_feedback: bool = False

    def __init__(self, num_trials: int, num_arms: int) -> None:
        super().__init__()
        if num_trials < 1:
            raise ValueError(f"num_trials must be >= 1, got {num_trials}")
        if num_arms < 2:
            raise ValueError(f"num_arms must be >= 2, got {num_arms}")
        self.num_trials = num_trials
        self.num_arms = num_arms
        # Round counter per trial; doubles as the device/dtype anchor (no self.device).
        self.register_buffer("rounds", torch.zeros(num_trials, dtype=torch.long))

    def act(self, context: Context, generator: torch.Generator | None = None) -> Decision:
        """Choose arms: ``context.x [R, B, d]`` -> ``Decision(probs [R, B, K], action [R, B])``."""
        raise NotImplementedError

    def update(self, context: Context, decision: Decision, feedback: Feedback) -> dict[str, Tensor]:
        """Learn from ``feedback`` (``[R, B, K]`` rewards and mask); returns per-trial metrics."""
        raise NotImplementedError

    def _check_context(self, context: Context) -> None:
        if context.num_trials != self.num_trials:
            raise ValueError(
                f"{type(self).__name__} holds {self.num_trials} trials but the context has "
                f"{context.num_trials} (Context.x is [R, B, d])"
            )

    def _check_feedback(self, context: Context, feedback: Feedback) -> None:
        expected = (*context.x.shape[:2], self.num_arms)
        if tuple(feedback.reward.shape) != expected:
            raise ValueError(
                f"{type(self).__name__} expects feedback [R, B, K] = {expected}, got "
                f"{tuple(feedback.reward.shape)}"
            )

    def _tick(self, context: Context) -> None:
        self.rounds += context.batch_size


class FixedPolicy(Learner):
    """A learner that does not learn online: ``update`` only validates and counts rounds."""

    def update(self, context: Context, decision: Decision, feedback: Feedback) -> dict[str, Tensor]:
        self._check_context(context)
        self._check_feedback(context, feedback)
        self._tick(context)
        return {}
