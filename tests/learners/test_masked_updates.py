"""Updates while an arm is masked (``Context.available``): the learners that weight by their
own routing probabilities use the probabilities ``act`` sampled from (restricted to the
available arms, renormalised), so that they learn what the learner of the problem without
the masked arm learns, and the masked arm's state does not move."""

from __future__ import annotations

import math

import pytest
import torch

from tests.learners.helpers import LinearProblem, build, feedback_for
from torchroute.functional.availability import restrict_probs
from torchroute.learners.hpg import HPG
from torchroute.learners.policy_baselines import EXP3, EuclideanQuadPG, FlattenedNPG, LogLinearPG
from torchroute.types import Context, Decision, Feedback

R, K, D, GONE = 3, 4, 5, 2
KEEP = [k for k in range(K) if k != GONE]

MAKERS = {
    "exp3": lambda k: EXP3(R, k, eta=0.3, gamma=0.0),
    "loglinear_npg": lambda k: LogLinearPG(R, k, D, eta=0.4, radius=3.0, step="npg"),
    "loglinear_euclidean": lambda k: LogLinearPG(R, k, D, eta=0.4, step="euclidean"),
    "euclidean_quad_nuclear": lambda k: EuclideanQuadPG(R, k, D, tau=3.0, eta=0.4),
    "euclidean_quad_frobenius": lambda k: EuclideanQuadPG(
        R, k, D, tau=3.0, eta=0.4, ball="frobenius"
    ),
    "flattened_npg": lambda k: FlattenedNPG(R, k, D, tau=3.0, eta=0.4, ball="frobenius"),
    "hpg": lambda k: HPG(R, k, D, tau=3.0, beta=0.5, eta=0.4),
}


def _bandit(reward: torch.Tensor, action: torch.Tensor) -> Feedback:
    played = torch.nn.functional.one_hot(action, reward.shape[-1]).bool()
    return Feedback(reward=reward.masked_fill(~played, 0.0), observed=played, only_played=True)


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_masked_update_is_the_update_of_the_restricted_problem(name):
    """``K = 4`` arms with arm 2 masked against the same learner built on the 3 other arms,
    fed the same contexts, actions and rewards: the same probabilities and state."""
    full, restricted = MAKERS[name](K).double(), MAKERS[name](K - 1).double()
    gen, data = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
    available = torch.ones(R, 1, K, dtype=torch.bool)
    available[..., GONE] = False
    for _ in range(8):
        x = torch.randn(R, 1, D, generator=data, dtype=torch.float64)
        reward = torch.rand(R, 1, K, generator=data, dtype=torch.float64)
        context = Context(x=x, available=available)
        decision = full.act(context, gen)
        probs = restricted.policy(x)
        torch.testing.assert_close(decision.probs[..., KEEP], probs)
        action = decision.action
        full.update(context, decision, _bandit(reward, action))
        mapped = action - (action > GONE).long()
        restricted.update(Context(x=x), Decision(probs, mapped), _bandit(reward[..., KEEP], mapped))
    test = torch.randn(R, 6, D, generator=data, dtype=torch.float64)
    torch.testing.assert_close(
        restrict_probs(full.policy(test), available)[..., KEEP], restricted.policy(test)
    )
    if isinstance(full, EXP3):  # log-weights are kept up to a shift per trial
        diff = full.log_weights[:, KEEP] - restricted.log_weights
        torch.testing.assert_close(diff, diff[:, :1].expand_as(diff))
        assert bool((full.log_weights[:, GONE] >= full.log_weights[:, KEEP].amax(-1)).all())
    else:  # per-arm scores q^T W_m q (whatever basis represents W_m)
        scores = full.scores(test)
        torch.testing.assert_close(scores[..., KEEP], restricted.scores(test))
        assert bool((scores[..., GONE] == 0).all())  # the masked arm never moved


def test_exp3_importance_weight_is_the_restricted_probability():
    """Hand-computed EXP3 step with uniform exploration (``gamma = 0.2``): the loss of the
    played arm divided by its probability among the available arms."""
    learner = EXP3(1, 3, eta=0.5, gamma=0.2).double()
    learner.log_weights.copy_(torch.tensor([[0.0, math.log(2.0), math.log(3.0)]]))
    # pi = 0.8 * (1, 2, 3) / 6 + 0.2 / 3 = (0.2, 1/3 + 0.2/3 ... ) written out per arm
    pi = [0.8 * w / 6.0 + 0.2 / 3.0 for w in (1.0, 2.0, 3.0)]
    available = torch.tensor([[[True, False, True]]])
    reward = torch.tensor([[[0.6, 0.0, 0.0]]], dtype=torch.float64)
    action = torch.tensor([[0]])
    context = Context(x=torch.zeros(1, 1, 2, dtype=torch.float64), available=available)
    learner.update(context, Decision(torch.zeros(1, 1, 3), action), _bandit(reward, action))
    played = pi[0] / (pi[0] + pi[2])  # arm 1 is masked: renormalise over arms 0 and 2
    new = [0.0 - 0.5 * (1.0 - 0.6) / played, math.log(2.0), math.log(3.0)]
    top = max(new)
    torch.testing.assert_close(
        learner.log_weights, torch.tensor([[v - top for v in new]], dtype=torch.float64)
    )


@pytest.mark.parametrize("name", ["CABSC", "CABSD"])
def test_cabs_updates_weight_by_the_probabilities_act_played(name):
    """While arm 2 is masked, CABS-C's and CABS-D's updates use the probabilities ``act``
    sampled from: 0 on the masked arm, and the played arm's ``played_prob`` metric is its
    probability in the decision (the wrapper of ``act`` had nothing left to restrict)."""
    learner = build(name, R, K, D, seed=0)
    problem = LinearProblem(R, K, D, seed=3)
    gen = torch.Generator().manual_seed(0)
    available = torch.ones(R, 1, K, dtype=torch.bool)
    available[..., GONE] = False
    for _ in range(6):
        base = problem.context()
        context = Context(x=base.x, embedding=base.x, available=available)
        decision = learner.act(context, gen)
        assert bool((decision.probs[..., GONE] == 0).all())
        own = learner._pending[-1]  # the distribution act computed itself
        torch.testing.assert_close(own, decision.probs)
        reward = problem.reward(base).clamp(0, 1)
        metrics = learner.update(context, decision, feedback_for(learner, decision, reward), gen)
        played = decision.probs.gather(-1, decision.action[..., None])[..., 0].mean(1)
        torch.testing.assert_close(metrics["played_prob"], played.to(metrics["played_prob"]))
