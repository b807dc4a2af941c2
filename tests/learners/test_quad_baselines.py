"""The log-quadratic baselines of HPG (projected Euclidean PG on the nuclear ball, flattened
NPG) and the shared ``eta_scale`` rule, against hand computations and numpy / cvxpy
references written here."""

from __future__ import annotations

import math

import cvxpy as cp
import numpy as np
import pytest
import torch

from tests.learners.helpers import F64, feedback_for, forced_decision
from torchroute.functional.projections import project_l1_ball
from torchroute.learners import EXP3, HPG, EuclideanQuadPG, FlattenedNPG, LogLinearPG
from torchroute.types import Context, Problem


def _nuclear_projection_cvxpy(w: np.ndarray, tau: float) -> np.ndarray:
    """argmin ||X - w||_F over symmetric X with ||X||_* <= tau (cvxpy)."""
    x = cp.Variable(w.shape, symmetric=True)
    cp.Problem(cp.Minimize(cp.sum_squares(x - w)), [cp.normNuc(x) <= tau]).solve(
        solver="SCS", eps=1e-10
    )
    return x.value


def test_l1_ball_projection_against_cvxpy():
    g = torch.Generator().manual_seed(0)
    v = torch.randn(4, 7, generator=g, dtype=F64) * 2
    radius = torch.tensor([0.5, 1.0, 3.0, 100.0], dtype=F64)
    got = project_l1_ball(v, radius)
    for i in range(4):
        x = cp.Variable(7)
        cp.Problem(
            cp.Minimize(cp.sum_squares(x - v[i].numpy())), [cp.norm1(x) <= float(radius[i])]
        ).solve()
        np.testing.assert_allclose(got[i].numpy(), x.value, atol=1e-6)
    torch.testing.assert_close(got[3], v[3])  # inside the ball: unchanged


def test_nuclear_euclidean_pg_matches_a_dense_cvxpy_reference():
    """Eight rounds of forced play: the low-rank learner equals dense W_m updated by hand and
    projected on the nuclear ball by cvxpy."""
    r, k, d, tau, eta = 1, 3, 4, 0.6, 1.5
    binds = 0
    g = torch.Generator().manual_seed(1)
    learner = EuclideanQuadPG(r, k, d, tau=tau, eta=eta).to(F64)
    dense = np.zeros((k, d, d))
    for t in range(8):
        q = torch.nn.functional.normalize(torch.randn(d, generator=g, dtype=F64), dim=0)
        arm = t % k
        reward = float(torch.rand((), generator=g, dtype=F64)) - 0.3
        logits = np.array([q.numpy() @ dense[m] @ q.numpy() for m in range(k)])
        pi = np.exp(logits - logits.max())
        pi /= pi.sum()
        decision = forced_decision(torch.tensor([[arm]]), k)
        rewards = torch.zeros(1, 1, k, dtype=F64)
        rewards[0, 0, arm] = reward
        ctx = Context(x=q.view(1, 1, d))
        learner.update(ctx, decision, feedback_for(learner, decision, rewards))
        for m in range(k):
            step = eta * reward * (float(m == arm) - pi[m]) * np.outer(q.numpy(), q.numpy())
            dense[m] = _nuclear_projection_cvxpy(dense[m] + step, tau)
        np.testing.assert_allclose(learner.dense_weights()[0].numpy(), dense, atol=2e-6)
        nuc = np.linalg.svd(dense, compute_uv=False).sum(-1)
        binds += int(abs(nuc.max() - tau) < 1e-5)
    assert binds >= 2  # the ball binds in this test


def test_flattened_npg_step_by_hand():
    """K = 2, W = 0, q = (3, 4) (||q||^4 = 625), r = 0.5, arm 0, eta = 0.2: pi = (1/2, 1/2),
    W_0 = 0.2 * 0.5 * (1 - 1/2) / (1/2) q q^T / 625 = 0.1 q q^T / 625, W_1 = -W_0; the
    logit of arm 0 at q moves by 0.1 (the exponential-weights step r / pi * (1 - 1/K))."""
    learner = FlattenedNPG(1, 2, 2, tau=10.0, eta=0.2).to(F64)
    q = torch.tensor([3.0, 4.0], dtype=F64)
    decision = forced_decision(torch.tensor([[0]]), 2)
    rewards = torch.tensor([[[0.5, 0.0]]], dtype=F64)
    learner.update(Context(x=q.view(1, 1, 2)), decision, feedback_for(learner, decision, rewards))
    want0 = 0.1 / 625 * torch.tensor([[9.0, 12.0], [12.0, 16.0]], dtype=F64)
    torch.testing.assert_close(learner.dense_weights()[0, 0], want0, rtol=0, atol=1e-14)
    torch.testing.assert_close(learner.dense_weights()[0, 1], -want0, rtol=0, atol=1e-14)
    logits = learner.scores(q.view(1, 1, 2))[0, 0]
    torch.testing.assert_close(logits, torch.tensor([0.1, -0.1], dtype=F64))


def test_flattened_npg_zero_query_and_frobenius_ball():
    learner = FlattenedNPG(1, 2, 3, tau=0.05, eta=1.0, ball="frobenius").to(F64)
    decision = forced_decision(torch.tensor([[1]]), 2)
    rewards = torch.tensor([[[0.0, 1.0]]], dtype=F64)
    learner.update(
        Context(x=torch.zeros(1, 1, 3, dtype=F64)),
        decision,
        feedback_for(learner, decision, rewards),
    )
    assert (learner.weights == 0).all()
    q = torch.tensor([[[1.0, 0.0, 0.0]]], dtype=F64)
    learner.update(Context(x=q), decision, feedback_for(learner, decision, rewards))
    # step: 1 * 1 * (1 - 1/2) / (1/2) = 1 on e1 e1^T for arm 1, -1 for arm 0; Frobenius 0.05
    assert float(learner.weights[0, 1, 0, 0]) == pytest.approx(0.05)
    assert float(learner.weights[0, 0, 0, 0]) == pytest.approx(-0.05)


def test_default_steps_and_eta_scale_apply_everywhere():
    p = Problem(2, 8, 16, rho=torch.zeros(2), arm_names=tuple("abcdefgh"), horizon=2000)
    quad = EuclideanQuadPG.from_problem(p, rank=4)
    assert quad.tau == 8.0 and quad.ball == "nuclear"
    assert quad.eta == pytest.approx(8.0 * math.sqrt(8 / (2 * 2000)))  # tau sqrt(M / 2T)
    # query_norm caps it at the stable softmax step 2 / (5 ||q||^4) (0.1 at ||q||^2 = 2,
    # 0.4 at ||q|| = 1, above the OGD step 0.358 here)
    capped = EuclideanQuadPG.from_problem(p, rank=4, query_norm=math.sqrt(2.0))
    assert capped.eta == pytest.approx(0.1)
    assert EuclideanQuadPG.from_problem(p, rank=4, query_norm=1.0).eta == pytest.approx(quad.eta)
    npg = FlattenedNPG.from_problem(p, rank=4)
    assert npg.eta == pytest.approx(math.sqrt(2 * math.log(8) / (8 * 2000)))
    # eta_scale multiplies a given eta as well as the default, for every learner
    assert EuclideanQuadPG.from_problem(p, eta=0.1, eta_scale=3.0).eta == pytest.approx(0.3)
    assert FlattenedNPG.from_problem(p, eta=0.1, eta_scale=3.0).eta == pytest.approx(0.3)
    assert LogLinearPG.from_problem(p, eta=0.1, eta_scale=3.0).eta == pytest.approx(0.3)
    assert EXP3.from_problem(p, eta=0.1, eta_scale=3.0).eta == pytest.approx(0.3)
    assert EXP3.from_problem(p, eta_scale=2.0).eta == pytest.approx(
        2 * math.sqrt(2 * math.log(8) / (2000 * 8))
    )
    hpg = HPG.from_problem(p, eta=0.1, eta_scale=3.0)
    torch.testing.assert_close(hpg.eta, torch.full((2,), 0.3, dtype=F64))
    with pytest.raises(ValueError, match="ball must be one of"):
        EuclideanQuadPG(1, 2, 3, tau=1.0, eta=1.0, ball="spectral")
