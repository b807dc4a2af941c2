"""``new_arm_prior="mean"``: an arm never observed predicts the mean of the observed arms,
and its first observations update a ridge regression towards that mean (against the closed
form, in numpy); ``"zero"`` keeps the ridge prior."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchroute.learners import LinTS, LinUCB
from torchroute.types import Context

R, K, D, LAM = 2, 3, 4, 2.0


def _ridge(x: np.ndarray, y: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """``argmin sum (y - x theta)^2 + LAM |theta - prior|^2``."""
    a = LAM * np.eye(x.shape[1]) + x.T @ x
    return np.linalg.solve(a, LAM * prior + x.T @ y)


def _fit(learner, x: np.ndarray, y: np.ndarray, arms: list[int]) -> None:
    """Full feedback of ``arms`` on the rows ``x [R, n, d]`` (targets ``y [R, n, K]``)."""
    w = np.zeros(y.shape)
    w[..., arms] = 1.0
    action = torch.full(x.shape[:2], arms[0], dtype=torch.long)
    learner.fit_weighted(
        Context(x=torch.tensor(x)), action, torch.tensor(y), torch.tensor(w, dtype=torch.float64)
    )


@pytest.mark.parametrize("cls", [LinUCB, LinTS])
def test_a_new_arm_starts_from_the_observed_arms_mean(cls):
    g = np.random.default_rng(0)
    learner = cls(R, K, D, lam=LAM, new_arm_prior="mean").double()
    x1, y1 = g.normal(size=(R, 6, D)), g.uniform(size=(R, 6, K))
    _fit(learner, x1, y1, [0, 1])  # arm 2 is never observed here
    theta = [[_ridge(x1[r], y1[r, :, k], np.zeros(D)) for k in range(2)] for r in range(R)]
    mean = np.array([np.mean(theta[r], axis=0) for r in range(R)])  # [R, d]
    np.testing.assert_allclose(learner.theta[:, :2].numpy(), np.array(theta), rtol=1e-10)

    if cls is LinUCB:  # the score of the unobserved arm: x mean + alpha |x| / sqrt(lam)
        xq = g.normal(size=(R, 1, D))
        decision = learner.act(Context(x=torch.tensor(xq)))
        want = (xq[:, 0] * mean).sum(-1) + np.linalg.norm(xq[:, 0], axis=-1) / np.sqrt(LAM)
        np.testing.assert_allclose(decision.scores[:, 0, 2].numpy(), want, rtol=1e-10)

    x2, y2 = g.normal(size=(R, 3, D)), g.uniform(size=(R, 3, K))
    _fit(learner, x2, y2, [2])  # its first observations: a ridge towards the mean
    for r in range(R):
        np.testing.assert_allclose(
            learner.theta[r, 2].numpy(), _ridge(x2[r], y2[r, :, 2], mean[r]), rtol=1e-10
        )
        for k in range(2):  # the others did not move
            np.testing.assert_allclose(learner.theta[r, k].numpy(), theta[r][k], rtol=1e-12)


def test_the_zero_prior_is_the_ridge_prior_and_a_bad_value_is_refused():
    g = np.random.default_rng(1)
    learner = LinUCB(R, K, D, lam=LAM).double()  # new_arm_prior="zero", the default
    x1, y1 = g.normal(size=(R, 6, D)), g.uniform(size=(R, 6, K))
    _fit(learner, x1, y1, [0, 1])
    assert torch.equal(learner.theta[:, 2], torch.zeros(R, D, dtype=torch.float64))
    assert "seen" not in dict(learner.named_buffers())  # no new state without the option
    with pytest.raises(ValueError, match="new_arm_prior must be one of"):
        LinUCB(R, K, D, new_arm_prior="best")


def test_a_cold_learner_with_the_mean_prior_starts_at_zero():
    """No arm observed: the mean of none is 0, the ridge prior."""
    learner = LinUCB(R, K, D, lam=LAM, new_arm_prior="mean").double()
    x = torch.randn(R, 1, D, dtype=torch.float64)
    bare = LinUCB(R, K, D, lam=LAM).double()
    torch.testing.assert_close(learner.act(Context(x=x)).scores, bare.act(Context(x=x)).scores)


def test_a_model_added_to_a_served_learner_starts_from_the_mean():
    """``serve``'s ``POST /models`` grows the state with a fresh learner's values for the
    new model (``grow_state``): its ``seen`` count is 0, so it takes the observed mean."""
    from torchroute.serve.arms import grow_state

    g = np.random.default_rng(2)
    old = LinUCB(R, K, D, lam=LAM, new_arm_prior="mean").double()
    _fit(old, g.normal(size=(R, 5, D)), g.uniform(size=(R, 5, K)), [0, 1, 2])
    grown = LinUCB(R, K + 1, D, lam=LAM, new_arm_prior="mean").double()
    grown.load_state_dict(grow_state(old.state_dict(), grown.state_dict(), K))
    xq = torch.tensor(g.normal(size=(R, 1, D)))
    scores = grown.act(Context(x=xq)).scores[:, 0]  # [R, K + 1]
    mean = old.theta.mean(1)  # [R, d]: every old model was observed
    want = (xq[:, 0] * mean).sum(-1) + xq[:, 0].norm(dim=-1) / LAM**0.5
    torch.testing.assert_close(scores[:, K], want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(scores[:, :K], old.act(Context(x=xq)).scores[:, 0])


def _warm_problem(hidden: bool):
    from torchroute.types import Problem, TrainSplit

    g = torch.Generator().manual_seed(3)
    n = 40
    x = torch.cat([torch.randn(n, D - 1, generator=g, dtype=torch.float64),
                   torch.ones(n, 1, dtype=torch.float64)], 1)  # fmt: skip
    scores = torch.rand(n, K, generator=g, dtype=torch.float64)
    costs = torch.rand(n, K, generator=g, dtype=torch.float64) * 1e-3
    hidden_arms = torch.zeros(R, K, dtype=torch.bool)
    if hidden:
        hidden_arms[:, 2] = True
        scores[:, 2] = 0.0  # a hidden model's offline scores are unknown (0)
    return Problem(
        R, K, D, rho=torch.tensor([0.0, 300.0]), arm_names=("a", "b", "c"),
        train=TrainSplit(x, scores, costs), hidden_arms=hidden_arms if hidden else None,
        dtype=torch.float64,
    )  # fmt: skip


@pytest.mark.parametrize("cls", [LinUCB, LinTS])
def test_a_model_new_after_a_warm_start_has_the_known_models_spread_as_its_width(cls):
    """The warm rows fit arms 0 and 1; arm 2 (hidden) gets their mean A^-1 plus s^2 e e^T,
    s^2 the variance over the known arms of their predictions, averaged over the rows (a
    loop in numpy), e the bias column."""
    from torchroute.learners.warm_options import WarmStart
    from torchroute.run.warm import apply_warm_start

    problem = _warm_problem(hidden=True)
    learner = cls(R, K, D, lam=LAM, new_arm_prior="spread").double()
    apply_warm_start(learner, problem, WarmStart("train", (1.5,)), "warm")
    x = problem.train.features.numpy()
    a = LAM * np.eye(D) + 1.5 * x.T @ x
    e = np.zeros(D)
    e[-1] = 1.0
    for r in range(R):
        u = np.clip(
            problem.train.scores.numpy() - float(problem.rho[r]) * problem.train.costs.numpy(), 0, 1
        )
        theta = [np.linalg.solve(a, 1.5 * x.T @ u[:, k]) for k in range(2)]
        spread = np.mean([np.var([row @ t for t in theta], ddof=1) for row in x])
        want = np.linalg.inv(a) + spread * np.outer(e, e)
        np.testing.assert_allclose(learner.a_inv[r, 2].numpy(), want, rtol=1e-9, atol=1e-12)
        for k in range(2):  # the known arms keep their warm statistics
            np.testing.assert_allclose(learner.a_inv[r, k].numpy(), np.linalg.inv(a), rtol=1e-9)
            np.testing.assert_allclose(learner.theta[r, k].numpy(), theta[k], rtol=1e-9)
        assert spread > 1e-4  # the test reads a spread that is there


def test_a_warm_start_that_observes_every_model_keeps_the_ridge_width():
    from torchroute.learners.warm_options import WarmStart
    from torchroute.run.warm import apply_warm_start

    problem = _warm_problem(hidden=False)
    learner = LinUCB(R, K, D, lam=LAM, new_arm_prior="spread").double()
    apply_warm_start(learner, problem, WarmStart("train", (1.5,)), "warm")
    x = problem.train.features.numpy()
    want = np.linalg.inv(LAM * np.eye(D) + 1.5 * x.T @ x)
    for r in range(R):
        for k in range(K):
            np.testing.assert_allclose(learner.a_inv[r, k].numpy(), want, rtol=1e-9)


def test_with_the_mean_prior_a_new_model_keeps_the_full_width_after_a_warm_start():
    from torchroute.learners.warm_options import WarmStart
    from torchroute.run.warm import apply_warm_start

    problem = _warm_problem(hidden=True)
    learner = LinUCB(R, K, D, lam=LAM, new_arm_prior="mean").double()
    apply_warm_start(learner, problem, WarmStart("train", (1.5,)), "warm")
    for r in range(R):
        np.testing.assert_allclose(learner.a_inv[r, 2].numpy(), np.eye(D) / LAM, rtol=1e-12)
