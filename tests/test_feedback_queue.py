"""A round whose decisions are rated for some trials only: a learner that learns only from
``feedback.observed`` is updated with the unrated trials masked out, and ends in the state
the general path gives (update the batch, then put the unrated trials' state back)."""

from __future__ import annotations

import copy

import pytest
import torch

from torchroute.feedback_queue import PendingFeedback, _update_rated
from torchroute.learners import FullFeedbackLinUCB, LinTS, LinUCB, SquareCB
from torchroute.types import Context, Feedback

R, K, D = 6, 4, 5


class _Env:
    """What :class:`PendingFeedback` reads of an env: no delay, trials 0, 2, 4 rated."""

    feedback_delay = 0
    num_trials = R
    feedback_arrives = torch.tensor([[True], [False]] * (R // 2))  # [R, T = 1]


@pytest.mark.parametrize("cls", [LinUCB, LinTS, SquareCB, FullFeedbackLinUCB])
def test_masked_update_equals_the_update_undone_for_the_unrated_trials(cls):
    assert cls.learns_only_observed
    torch.manual_seed(0)
    learner = cls(R, K, D, lam=2.0)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):  # some state first
        x = torch.nn.functional.normalize(torch.randn(R, 1, D), dim=-1)
        context = Context(x=x)
        decision = learner.act(context, g)
        observed = torch.nn.functional.one_hot(decision.action, K).bool()
        if cls is FullFeedbackLinUCB:
            observed = torch.ones_like(observed)
        feedback = Feedback(
            reward=torch.where(observed, torch.rand(R, 1, K), 0.0),
            observed=observed,
            only_played=cls is not FullFeedbackLinUCB,
        )
        before = copy.deepcopy(learner)
        undone = copy.deepcopy(learner)
        _update_rated(undone, (context, decision, feedback), _Env.feedback_arrives[:, 0], g)
        PendingFeedback(_Env()).update(learner, 0, (context, decision, feedback), g)
        unrated = ~_Env.feedback_arrives[:, 0]
        for name in ("a_inv", "theta"):
            assert torch.equal(getattr(learner, name), getattr(undone, name)), name
            assert torch.equal(getattr(learner, name)[unrated], getattr(before, name)[unrated])
        assert not torch.equal(learner.theta, before.theta)  # the rated trials learnt
