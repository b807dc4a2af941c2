"""``new_arm_bonus`` in epsilon-greedy, SquareCB and NeuralUCB: an arm never observed gets
the bonus on its predicted reward; at 0 (the default) the state and the decisions are
those of the learner without the option."""

from __future__ import annotations

import pytest
import torch

from tests.learners.helpers import LinearProblem, feedback_for, forced_decision
from torchroute.learners import EpsilonGreedy, NeuralUCB, SquareCB
from torchroute.types import Context

R, K, D = 3, 4, 5
F64 = torch.float64

MAKERS = {
    "EpsilonGreedy": lambda **kw: EpsilonGreedy(
        R, K, D, eps0=0.0, eps_min=0.0, eps_floor=0.0, **kw
    ),
    "SquareCB": lambda **kw: SquareCB(R, K, D, gamma=4.0, eps_floor=0.0, **kw),
    "NeuralUCB": lambda **kw: NeuralUCB(
        R, K, D, hidden=8, nu=0.0, steps=2, lr=0.05, generator=torch.Generator().manual_seed(0),
        dtype=F64, **kw,
    ),
}  # fmt: skip


def _train_arm0(learner) -> LinearProblem:
    """30 rounds in which only arm 0 is played and observed (reward 0.8)."""
    problem = LinearProblem(R, K, D, seed=1)
    arm = torch.zeros(R, 1, dtype=torch.long)
    gen = torch.Generator().manual_seed(2)
    for _ in range(30):
        context = problem.context()
        decision = forced_decision(arm, K)
        reward = torch.full((R, 1, K), 0.8, dtype=F64)
        learner.update(context, decision, feedback_for(learner, decision, reward), gen)
    return problem


@pytest.mark.parametrize("name", ["EpsilonGreedy", "NeuralUCB"])
def test_greedy_learners_pick_an_arm_never_observed(name):
    learner = MAKERS[name](new_arm_bonus=5.0).double()
    x = _train_arm0(learner).context().x
    assert learner.seen.tolist() == [[30.0, 0.0, 0.0, 0.0]] * R
    chosen = learner.act(Context(x=x), torch.Generator().manual_seed(0)).action
    assert not bool((chosen == 0).any())  # a prediction below 1, + 5, beats arm 0's ~0.8
    learner.new_arm_bonus = 0.0
    assert bool((learner.act(Context(x=x)).action == 0).all())  # without it: the known arm


def test_squarecb_weights_the_bonus_into_its_inverse_gap_weighting():
    """Naive IGW (Foster & Rakhlin 2020) on the ridge means plus the bonus on arms 1..3:
    ``p_k = 1 / (K + gamma (best - r_k))`` off the best arm, the rest on it."""
    learner = MAKERS["SquareCB"](new_arm_bonus=0.5).double()
    x = _train_arm0(learner).context().x
    probs = learner.act(Context(x=x), torch.Generator().manual_seed(0)).probs
    mean = torch.einsum("rkd,rbd->rbk", learner.theta, x)  # arms 1..3 never fitted: 0
    assert bool((mean[..., 1:] == 0).all())
    for r in range(R):
        scores = [float(mean[r, 0, 0])] + [0.5] * (K - 1)
        best = max(range(K), key=scores.__getitem__)
        p = [1.0 / (K + 4.0 * (scores[best] - s)) for s in scores]
        p[best] = 0.0
        p[best] = 1.0 - sum(p)
        torch.testing.assert_close(probs[r, 0], torch.tensor(p, dtype=F64))


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_zero_bonus_keeps_state_and_decisions(name):
    plain, zero = MAKERS[name]().double(), MAKERS[name](new_arm_bonus=0.0).double()
    assert set(plain.state_dict()) == set(zero.state_dict())
    assert "seen" not in plain.state_dict()
    problem = LinearProblem(R, K, D, seed=4)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for _ in range(10):
        context = problem.context()
        d1, d2 = plain.act(context, g1), zero.act(context, g2)
        assert torch.equal(d1.action, d2.action) and torch.equal(d1.probs, d2.probs)
        reward = problem.reward(context)
        plain.update(context, d1, feedback_for(plain, d1, reward), g1)
        zero.update(context, d2, feedback_for(zero, d2, reward), g2)
    torch.testing.assert_close(plain.state_dict(), zero.state_dict(), rtol=0, atol=0)
