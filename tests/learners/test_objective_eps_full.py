"""``objective: quality_cost`` for epsilon-greedy and the full-information LinUCB.

References: a numpy ridge on the scores (bandit feedback for epsilon-greedy, every arm's
score for the full-information LinUCB), hand argmaxes of ``mean - rho price`` for the
request's ``rho`` and the hand epsilon mixture ``(1 - eps_t) e_greedy + eps_t / K``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchroute.errors import InputError, OptionError
from torchroute.learners import EpsilonGreedy
from torchroute.learners.linear import FullFeedbackLinUCB
from torchroute.types import Context, Decision, Feedback, Problem

F64 = torch.float64
R, K, D = 2, 3, 4
PRICES = torch.tensor([1e-4, 6e-4, 2e-3]).double()


def _problem() -> Problem:
    return Problem(R, K, D, rho=torch.tensor([0.0, 500.0], dtype=F64), arm_names=("a", "b", "c"),
                   prices=PRICES, dtype=F64)  # fmt: skip


def _stream(n: int, seed: int = 0):
    """``n`` rounds: contexts ``[n, R, 1, D]``, played arms ``[n, R]``, scores ``[n, R, K]``
    and utilities far from them (a learner of the wrong target is seen)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, R, 1, D, generator=g, dtype=F64)
    arms = torch.randint(K, (n, R), generator=g)
    score = torch.rand(n, R, K, generator=g, dtype=F64)
    return x, arms, score, 1.0 - score


def _hand_theta(x, rows_of, target, lam: float):
    """numpy ridge ``theta_k = (lam I + sum x x^T)^{-1} sum y x`` over the rounds
    ``rows_of(r, k)`` (a bool mask ``[n]``): ``[R, K, D]``."""
    theta = np.zeros((R, K, D))
    for r in range(R):
        for k in range(K):
            rows = rows_of(r, k)
            xs, ys = x[rows, r, 0].numpy(), target[rows, r, k].numpy()
            theta[r, k] = np.linalg.solve(lam * np.eye(D) + xs.T @ xs, xs.T @ ys)
    return theta


def _bandit_feed(learner, n: int = 40):
    x, arms, score, reward = _stream(n)
    for t in range(n):
        action = arms[t][:, None]
        observed = torch.nn.functional.one_hot(action, K).bool()
        fb = Feedback(reward=torch.where(observed, reward[t][:, None], 0.0), observed=observed,
                      score=torch.where(observed, score[t][:, None], 0.0))  # fmt: skip
        learner.update(Context(x=x[t]), Decision(probs=observed.to(F64), action=action), fb)
    return x, arms, score


def _full_feed(learner, n: int = 40):
    x, _, score, reward = _stream(n)
    for t in range(n):
        observed = torch.ones(R, 1, K, dtype=torch.bool)
        decision = learner.act(Context(x=x[t]))
        fb = Feedback(reward=reward[t][:, None], observed=observed, score=score[t][:, None])
        learner.update(Context(x=x[t]), decision, fb)
    return x, score


def test_epsilon_greedy_quality_cost_learns_a_ridge_on_the_scores():
    learner = EpsilonGreedy.from_problem(_problem(), lam=2.0, objective="quality_cost").double()
    x, arms, score = _bandit_feed(learner)
    hand = _hand_theta(x, lambda r, k: (arms[:, r] == k).numpy(), score, 2.0)
    np.testing.assert_allclose(learner.theta.numpy(), hand, atol=1e-10)


@pytest.mark.parametrize("rho", [0.0, 300.0, 1000.0])
def test_epsilon_greedy_quality_cost_mixes_the_hand_argmax_of_y_minus_rho_price(rho):
    learner = EpsilonGreedy.from_problem(
        _problem(), eps0=0.3, decay=0.01, eps_min=0.01, eps_floor=1e-4, lam=2.0,
        objective="quality_cost",
    ).double()  # fmt: skip
    x, arms, score = _bandit_feed(learner)
    theta = _hand_theta(x, lambda r, k: (arms[:, r] == k).numpy(), score, 2.0)
    xq = torch.randn(R, 5, D, generator=torch.Generator().manual_seed(3), dtype=F64)
    context = Context(x=xq, rho=torch.full((R, 5), rho, dtype=F64))
    decision = learner.act(context, torch.Generator().manual_seed(0))
    value = np.einsum("rkd,rbd->rbk", theta, xq.numpy()) - rho * PRICES.numpy()
    eps = max(0.01, 0.3 / (1 + 0.01 * 40))  # 40 updates: the rounds count
    hand = np.full((R, 5, K), eps / K)
    np.put_along_axis(hand, value.argmax(-1)[..., None], 1 - eps + eps / K, axis=-1)
    np.testing.assert_allclose(decision.probs.numpy(), hand, atol=1e-12)
    probs = learner.routing_probs(context, decision)
    np.testing.assert_allclose(probs.numpy(), hand, atol=1e-12)
    assert learner.per_request_rho


def test_full_information_linucb_quality_cost_learns_every_arms_score_and_decides_by_price():
    learner = FullFeedbackLinUCB.from_problem(
        _problem(), alpha=0.5, lam=3.0, objective="quality_cost"
    ).double()
    x, score = _full_feed(learner)
    every = np.ones(len(x), dtype=bool)
    theta = _hand_theta(x, lambda r, k: every, score, 3.0)
    np.testing.assert_allclose(learner.theta.numpy(), theta, atol=1e-10)
    xs = x[:, :, 0].numpy()  # [n, R, D]
    a_inv = np.stack([np.linalg.inv(3.0 * np.eye(D) + xs[:, r].T @ xs[:, r]) for r in range(R)])
    xq = torch.randn(R, 4, D, generator=torch.Generator().manual_seed(7), dtype=F64)
    for rho in (0.0, 700.0):
        decision = learner.act(Context(x=xq, rho=torch.full((R, 4), rho, dtype=F64)))
        xn = xq.numpy()
        width = np.sqrt(np.einsum("rbd,rde,rbe->rb", xn, a_inv, xn))[..., None]
        value = np.einsum("rkd,rbd->rbk", theta, xn) + 0.5 * width - rho * PRICES.numpy()
        np.testing.assert_array_equal(decision.action.numpy(), value.argmax(-1))
        assert bool(decision.observe.all())


@pytest.mark.parametrize("cls", [EpsilonGreedy, FullFeedbackLinUCB])
def test_the_utility_objective_refuses_another_rho_and_bad_options_are_named(cls):
    learner = cls.from_problem(_problem())
    x = torch.randn(R, 1, D)
    with pytest.raises(InputError, match=r"decides for each trial's own rho.*quality_cost"):
        learner.act(Context(x=x, rho=torch.tensor([[0.0], [1000.0]])))
    with pytest.raises(OptionError, match=r"objective must be one of") as e:
        cls.from_problem(_problem(), objective="score")
    assert "\n" not in str(e.value)
    with pytest.raises(OptionError, match=r"cost_model: ridge needs objective: quality_cost"):
        cls.from_problem(_problem(), cost_model="ridge")


def test_epsilon_greedy_routing_probs_are_those_of_its_act_with_a_new_arm_bonus():
    learner = EpsilonGreedy.from_problem(
        _problem(), eps0=0.2, decay=0.0, eps_min=0.2, eps_floor=0.0, new_arm_bonus=5.0
    ).double()
    x, _, _, reward = _stream(10)
    for t in range(10):  # arms 0 and 1 only: arm 2 keeps its bonus
        action = torch.full((R, 1), t % 2)
        observed = torch.nn.functional.one_hot(action, K).bool()
        fb = Feedback(reward=torch.where(observed, reward[t][:, None], 0.0), observed=observed)
        learner.update(Context(x=x[t]), Decision(probs=observed.to(F64), action=action), fb)
    context = Context(x=torch.randn(R, 3, D, generator=torch.Generator().manual_seed(1)))
    decision = learner.act(context)
    hand = np.full((R, 3, K), 0.2 / K)
    hand[..., 2] = 0.8 + 0.2 / K  # predictions of arms 0, 1 are far below the bonus of 5
    np.testing.assert_allclose(decision.probs.numpy(), hand, atol=1e-12)
    np.testing.assert_allclose(learner.routing_probs(context, decision).numpy(), hand, atol=1e-12)
