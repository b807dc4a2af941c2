"""The learner part of a subset router: one update per answered request, on the set's outcome."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from torchroute.serve.feedback_learner import FeedbackLearner, check_finite_state
from torchroute.serve.fingerprint import mix_seed
from torchroute.types import Context, Decision, Feedback


class SubsetFeedbackLearner(FeedbackLearner):
    """A :class:`~torchroute.serve.feedback_learner.FeedbackLearner` for a subset learner:
    each request is one update (the env's protocol: one query per round) with the set's
    outcome as ``Feedback.set_reward``; the costs are logged, not learnt."""

    def update(self, items: list[dict[str, Any]], score: Tensor, cost: Tensor) -> Tensor:
        """One learner update per request, in order (no undo); returns the set rewards ``[n]``.

        Update ``i`` of event ``store.events + 1`` draws from a generator seeded by both.
        """
        dtype, k = self.problem.dtype, self.learner.num_arms
        for i, item in enumerate(items):
            zeros = torch.zeros(1, 1, k, dtype=dtype)
            feedback = Feedback(
                reward=zeros,
                observed=torch.zeros_like(zeros, dtype=torch.bool),
                set_reward=score[i].to(dtype).view(1, 1),
            )
            decision = Decision(probs=item["probs"][None, None], action=item["draws"][None, None])
            seed = mix_seed(self.seed, "update", self.store.events + 1, i)
            context = Context(x=item["x"][None, None])
            self.learner.update(context, decision, feedback, torch.Generator().manual_seed(seed))
        check_finite_state(self.learner)
        return score.double()


__all__ = ["SubsetFeedbackLearner"]
