"""Warm discounted and sliding-window learners forget towards their warm start, not to 0.

The train rows of a warm start are the learner's prior (never discounted, never leaving a
window); the stream's observations are discounted or windowed on top of it. Checked
against the closed form in numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchroute.learners.discounted import DiscountedLinTS, DiscountedLinUCB
from torchroute.learners.sliding_window import SlidingWindowLinTS, SlidingWindowLinUCB
from torchroute.learners.warm_options import WarmStart
from torchroute.run.warm import apply_warm_start
from torchroute.types import Context, Decision, Feedback, Problem, TrainSplit

F64 = torch.float64
R, K, D, N, T, LAM = 2, 3, 4, 30, 25, 0.5


def _problem() -> Problem:
    g = torch.Generator().manual_seed(0)
    train = TrainSplit(
        torch.randn(N, D, generator=g, dtype=F64),
        torch.rand(N, K, generator=g, dtype=F64),
        torch.rand(N, K, generator=g, dtype=F64) * 0.1,
    )
    return Problem(
        R, K, D, rho=torch.tensor([0.0, 2.0]), arm_names=("a", "b", "c"), train=train,
        dtype=F64,
    )  # fmt: skip


LEARNERS = {
    "DiscountedLinUCB": (lambda p: DiscountedLinUCB.from_problem(p, gamma=0.8, lam=LAM), "gamma"),
    "DiscountedLinTS": (lambda p: DiscountedLinTS.from_problem(p, gamma=0.8, lam=LAM), "gamma"),
    "SlidingWindowLinUCB": (
        lambda p: SlidingWindowLinUCB.from_problem(p, window=6, lam=LAM),
        "window",
    ),
    "SlidingWindowLinTS": (
        lambda p: SlidingWindowLinTS.from_problem(p, window=6, lam=LAM),
        "window",
    ),
}


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_warm_forgetting_learners_keep_their_warm_start_as_prior(name):
    make, kind = LEARNERS[name]
    problem = _problem()
    learner = make(problem).double()
    apply_warm_start(learner, problem, WarmStart("train", (1.5,)), name)
    g = torch.Generator().manual_seed(1)
    xs, ys = [], []
    for _ in range(T):  # only arm 0 is observed in the stream
        x = torch.randn(R, 1, D, generator=g, dtype=F64)
        y = torch.rand(R, 1, K, generator=g, dtype=F64)
        observed = torch.zeros(R, 1, K, dtype=torch.bool)
        observed[..., 0] = True
        action = torch.zeros(R, 1, dtype=torch.long)
        feedback = Feedback(reward=torch.where(observed, y, 0.0), observed=observed)
        learner.update(Context(x=x), Decision(observed.to(F64), action), feedback)
        xs.append(x[:, 0].numpy())
        ys.append(y[:, 0, 0].numpy())
    xs, ys = np.stack(xs, 1), np.stack(ys, 1)  # [R, T, D], [R, T]
    if kind == "gamma":
        w = 0.8 ** np.arange(T - 1, -1, -1)
    else:
        w = (np.arange(T) >= T - 6).astype(float)
    train = problem.train
    xt = train.features.numpy()
    probe = torch.randn(R, 5, D, generator=g, dtype=F64)
    mean = learner.posterior(probe)[0].numpy()  # [R, 5, K]
    for r in range(R):
        u = np.clip(train.scores.numpy() - float(problem.rho[r]) * train.costs.numpy(), 0, 1)
        for k in range(K):
            v = LAM * np.eye(D) + 1.5 * xt.T @ xt
            b = 1.5 * xt.T @ u[:, k]
            if k == 0:
                v = v + (xs[r] * w[:, None]).T @ xs[r]
                b = b + (xs[r] * w[:, None]).T @ ys[r]
            expected = probe[r].numpy() @ np.linalg.solve(v, b)
            np.testing.assert_allclose(mean[r, :, k], expected, atol=1e-9)


def test_a_cold_discounted_learner_keeps_its_numbers():
    """Without a warm start there is no prior buffer and the posterior is ``lam I + G``."""
    learner = DiscountedLinUCB(R, K, D, gamma=0.8, lam=LAM).double()
    assert learner.prior_gram is None and learner.prior_target is None
    assert "prior_gram" not in learner.state_dict()


def test_a_saved_prior_is_restored_into_a_cold_learner():
    problem = _problem()
    warm = DiscountedLinUCB.from_problem(problem, gamma=0.8, lam=LAM).double()
    apply_warm_start(warm, problem, WarmStart("train"), "warm")
    cold = DiscountedLinUCB.from_problem(problem, gamma=0.8, lam=LAM).double()
    cold.load_state_dict(warm.state_dict())
    probe = torch.randn(R, 3, D, generator=torch.Generator().manual_seed(4), dtype=F64)
    torch.testing.assert_close(cold.posterior(probe)[0], warm.posterior(probe)[0])


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_an_arm_no_longer_observed_returns_to_its_warm_prediction_not_to_zero(name):
    """Arm 1 is observed (its scores 0.3 below train) for 8 rounds, then only arm 0 for 150
    rounds: arm 1's prediction is then the warm start's alone (numpy), far from 0."""
    make, _ = LEARNERS[name]
    problem = _problem()
    learner = make(problem).double()
    apply_warm_start(learner, problem, WarmStart("train", (1.5,)), name)
    g = torch.Generator().manual_seed(2)
    for t in range(158):
        arm = 1 if t < 8 else 0
        x = torch.randn(R, 1, D, generator=g, dtype=F64)
        observed = torch.zeros(R, 1, K, dtype=torch.bool)
        observed[..., arm] = True
        reward = torch.where(observed, torch.rand(R, 1, K, generator=g, dtype=F64) - 0.3, 0.0)
        action = torch.full((R, 1), arm, dtype=torch.long)
        feedback = Feedback(reward=reward, observed=observed)
        learner.update(Context(x=x), Decision(observed.to(F64), action), feedback)
    train = problem.train
    xt = train.features.numpy()
    probe = torch.randn(R, 5, D, generator=g, dtype=F64)
    mean = learner.posterior(probe)[0].numpy()  # [R, 5, K]
    for r in range(R):
        u = np.clip(train.scores.numpy() - float(problem.rho[r]) * train.costs.numpy(), 0, 1)
        warm = np.linalg.solve(LAM * np.eye(D) + 1.5 * xt.T @ xt, 1.5 * xt.T @ u[:, 1])
        expected = probe[r].numpy() @ warm
        np.testing.assert_allclose(mean[r, :, 1], expected, atol=1e-9)
        assert np.abs(expected).max() > 0.05  # the warm prediction is not the zero prior's
