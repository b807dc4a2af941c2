"""Full-feedback LinUCB's shared-Gram update: the per-arm numbers, bit for bit, and a refit."""

from __future__ import annotations

import pytest
import torch

from torchroute.functional.mlp import z_inverse_update, z_inverse_update_
from torchroute.learners import FullFeedbackLinUCB, RidgeLearner
from torchroute.types import Context, Decision, Feedback


def _stream(r: int, k: int, d: int, rounds: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    xs = torch.nn.functional.normalize(torch.randn(rounds, r, 1, d, generator=g), dim=-1)
    ys = torch.rand(rounds, r, 1, k, generator=g).round()  # 0/1 scores, as on a table
    return xs, ys


def _feed(learner, xs, ys, per_arm: bool, observed=None):
    for t, (x, y) in enumerate(zip(xs, ys, strict=True)):
        context = Context(x=x)
        decision = learner.act(context, None)
        seen = torch.ones_like(y, dtype=torch.bool) if observed is None else observed[t]
        feedback = Feedback(reward=y, observed=seen)
        if per_arm:  # the update every ridge learner has (one Sherman-Morrison per arm)
            RidgeLearner.update(learner, context, decision, feedback)
        else:
            learner.update(context, decision, feedback)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_shared_update_is_the_per_arm_update_bit_for_bit(dtype):
    r, k, d = 3, 18, 129  # the Open LLM shape (K = 18, d = 128 + bias), few trials
    xs, ys = _stream(r, k, d, 40)
    xs, ys = xs.to(dtype), ys.to(dtype)
    fast = FullFeedbackLinUCB(r, k, d, lam=10.0).to(dtype)
    slow = FullFeedbackLinUCB(r, k, d, lam=10.0).to(dtype)
    _feed(fast, xs, ys, per_arm=False)
    _feed(slow, xs, ys, per_arm=True)
    assert torch.equal(fast.a_inv, slow.a_inv) and torch.equal(fast.theta, slow.theta)
    assert torch.equal(fast.rounds, slow.rounds) and int(fast.rounds.max()) == 40
    # and both are the ridge solution of all rows (a dense refit)
    x = xs[:, :, 0].double()  # [T, R, d]
    gram = torch.einsum("tri,trj->rij", x, x) + 10.0 * torch.eye(d, dtype=torch.float64)
    b = torch.einsum("tri,trk->rki", x, ys[:, :, 0].double())  # [R, K, d]
    theta = torch.linalg.solve(gram[:, None], b[..., None])[..., 0]
    tol = 1e-4 if dtype == torch.float32 else 1e-7
    torch.testing.assert_close(fast.theta.double(), theta, rtol=0, atol=tol)
    inverse = torch.linalg.inv(gram)[:, None].expand(r, k, d, d)
    torch.testing.assert_close(fast.a_inv.double(), inverse, rtol=0, atol=tol)


def test_a_round_with_unobserved_arms_falls_back_and_a_load_is_checked():
    r, k, d = 2, 4, 5
    xs, ys = _stream(r, k, d, 12, seed=1)
    observed = torch.ones(12, r, 1, k, dtype=torch.bool)
    observed[5, 0, 0, 2] = False  # trial 0 misses arm 2 once: its Gram matrices differ now
    fast = FullFeedbackLinUCB(r, k, d).to(torch.float64)
    slow = FullFeedbackLinUCB(r, k, d).to(torch.float64)
    xs, ys = xs.double(), ys.double()
    _feed(fast, xs, ys, per_arm=False, observed=observed)
    _feed(slow, xs, ys, per_arm=True, observed=observed)
    assert torch.equal(fast.a_inv, slow.a_inv) and torch.equal(fast.theta, slow.theta)
    assert not torch.equal(fast.a_inv[0, 2], fast.a_inv[0, 0])
    # a state loaded from elsewhere is checked before the shared update is trusted
    loaded = FullFeedbackLinUCB(r, k, d).to(torch.float64)
    loaded.load_state_dict(slow.state_dict())
    more_x, more_y = _stream(r, k, d, 3, seed=2)
    _feed(loaded, more_x.double(), more_y.double(), per_arm=False)
    _feed(slow, more_x.double(), more_y.double(), per_arm=True)
    assert torch.equal(loaded.a_inv, slow.a_inv) and torch.equal(loaded.theta, slow.theta)


def test_decisions_ask_for_every_arm():
    learner = FullFeedbackLinUCB(2, 3, 4)
    decision = learner.act(Context(x=torch.ones(2, 1, 4)), None)
    assert isinstance(decision, Decision) and bool(decision.observe.all())


@pytest.mark.parametrize("observed_arms", [1, 2, 4])
def test_in_place_z_update_is_the_dense_update_bit_for_bit(observed_arms):
    r, k, h = 5, 4, 64
    g = torch.Generator().manual_seed(3)
    z_dense = torch.eye(h, dtype=torch.float64).expand(r, k, h, h).clone()
    z_fast = z_dense.clone()
    gram = z_dense.clone()  # Z_k = I + sum of the observed phi phi^T (a dense reference)
    for _ in range(6):
        phi = torch.relu(torch.randn(r, 1, h, generator=g, dtype=torch.float64))
        weight = torch.zeros(r, 1, k, dtype=torch.bool)
        for i in range(r):  # trial i observes `observed_arms` arms (trial 0 one fewer)
            arms = torch.randperm(k, generator=g)[: observed_arms - (i == 0)]
            weight[i, 0, arms] = True
        z_dense = z_inverse_update(z_dense, phi, weight)
        z_inverse_update_(z_fast, phi, weight)
        assert torch.equal(z_fast, z_dense)
        outer = phi[:, 0, :, None] * phi[:, 0, None, :]  # [R, h, h]
        gram = gram + weight[:, 0, :, None, None] * outer[:, None]
    torch.testing.assert_close(z_fast, torch.linalg.inv(gram), rtol=0, atol=1e-10)
