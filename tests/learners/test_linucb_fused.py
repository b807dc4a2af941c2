"""``LinUCB(kernel="fused" | "fused_fp16")`` against a float64 numpy LinUCB and the eager path."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from torchroute.functional import ridge_kernel as rk
from torchroute.learners import LinUCB
from torchroute.types import Context, Decision, Feedback

try:
    rk.kernel_library()
except rk.KernelUnavailableError as err:  # no C++ compiler and no cached build
    pytest.skip(f"fused kernel unavailable: {err}", allow_module_level=True)

R, K, D, T = 3, 4, 6, 40


def rounds(seed: int, dtype=torch.float64):
    """``T`` contexts ``[R, 1, d]`` and rewards ``[R, 1, K]`` of a noisy linear model."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(R, K, D, generator=g, dtype=torch.float64)
    for _ in range(T):
        x = torch.randn(R, 1, D, generator=g, dtype=torch.float64)
        noise = 0.1 * torch.randn(R, 1, K, generator=g, dtype=torch.float64)
        yield x.to(dtype), (torch.einsum("rkd,rbd->rbk", w, x) + noise).to(dtype)


def bandit_feedback(decision: Decision, reward: torch.Tensor) -> Feedback:
    observed = torch.nn.functional.one_hot(decision.action, K).bool()
    return Feedback(reward=reward * observed, observed=observed, only_played=True)


def test_matches_float64_numpy_linucb():
    """Each action is an argmax of the reference's scores; the states agree to 1e-10."""
    alpha = np.array([0.5, 1.0, 2.0])
    lam = 2.0
    learner = LinUCB(R, K, D, alpha=alpha.tolist(), lam=lam, kernel="fused").double()
    a_inv = np.broadcast_to(np.eye(D) / lam, (R, K, D, D)).copy()
    theta = np.zeros((R, K, D))
    gen = torch.Generator().manual_seed(0)
    for x, reward in rounds(1):
        decision = learner.act(Context(x), gen)
        xs, ys = x[:, 0].numpy(), reward[:, 0].numpy()
        for r in range(R):
            scores = [
                theta[r, k] @ xs[r] + alpha[r] * np.sqrt(xs[r] @ a_inv[r, k] @ xs[r])
                for k in range(K)
            ]
            arm = int(decision.action[r, 0])
            assert scores[arm] >= max(scores) - 1e-9  # ties (untried arms) go either way
            ax = a_inv[r, arm] @ xs[r]
            denom = 1.0 + xs[r] @ ax
            theta[r, arm] += (ys[r, arm] - theta[r, arm] @ xs[r]) / denom * ax
            a_inv[r, arm] -= np.outer(ax, ax) / denom
        learner.update(Context(x), decision, bandit_feedback(decision, reward))
    np.testing.assert_allclose(learner.a_inv.numpy(), a_inv, rtol=0, atol=1e-10)
    np.testing.assert_allclose(learner.theta.numpy(), theta, rtol=0, atol=1e-10)
    assert torch.equal(learner.rounds, torch.full((R,), T))


def test_same_random_draws_and_state_as_eager():
    """Fed the same decisions, fused and eager learners agree to rounding and draw alike."""
    fused = LinUCB(R, K, D, lam=1.5, kernel="fused").double()
    eager = LinUCB(R, K, D, lam=1.5).double()
    g_fused, g_eager = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for x, reward in rounds(2):
        decision = fused.act(Context(x), g_fused)
        eager.act(Context(x), g_eager)
        assert torch.equal(g_fused.get_state(), g_eager.get_state())
        for learner in (fused, eager):
            learner.update(Context(x), decision, bandit_feedback(decision, reward))
    torch.testing.assert_close(fused.a_inv, eager.a_inv, rtol=0, atol=1e-12)
    torch.testing.assert_close(fused.theta, eager.theta, rtol=0, atol=1e-12)


def test_full_feedback_and_batches_take_the_eager_update():
    fused = LinUCB(R, K, D, kernel="fused").double()
    eager = LinUCB(R, K, D).double()
    x = torch.randn(R, 2, D, dtype=torch.float64)
    reward = torch.rand(R, 2, K, dtype=torch.float64)
    decision = fused.act(Context(x), torch.Generator().manual_seed(0))
    feedback = Feedback(reward=reward, observed=torch.ones(R, 2, K, dtype=torch.bool))
    for learner in (fused, eager):
        learner.update(Context(x), decision, feedback)
    assert torch.equal(fused.a_inv, eager.a_inv) and torch.equal(fused.theta, eager.theta)
    # The shortcuts were rebuilt from the eager result: no arm is at its prior any more.
    x1 = Context(x[:, :1])
    chosen = fused.act(x1, torch.Generator().manual_seed(1)).action
    assert torch.equal(chosen, eager.act(x1, torch.Generator().manual_seed(1)).action)


def test_load_state_dict_rebuilds_the_shortcuts():
    trained = LinUCB(R, K, D, kernel="fused").double()
    gen = torch.Generator().manual_seed(0)
    for x, reward in rounds(4):
        decision = trained.act(Context(x), gen)
        trained.update(Context(x), decision, bandit_feedback(decision, reward))
    buffer = io.BytesIO()
    torch.save(trained.state_dict(), buffer)
    assert set(trained.state_dict()) == set(LinUCB(R, K, D).state_dict())
    fresh = LinUCB(R, K, D, kernel="fused").double()
    fresh.act(Context(x), torch.Generator().manual_seed(5))  # shortcuts built for the prior
    buffer.seek(0)
    fresh.load_state_dict(torch.load(buffer))
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    for x, _ in rounds(5):
        assert torch.equal(fresh.act(Context(x), g1).action, trained.act(Context(x), g2).action)


def test_fp16_decisions_within_tolerance_and_float32_state():
    """``fused_fp16`` picks an arm within 1e-3 of the best float32 score (widths to ~1e-3);
    fed the same decisions, it updates the float32 state exactly as ``fused``."""
    half = LinUCB(R, K, D, lam=1.0, kernel="fused_fp16")
    full = LinUCB(R, K, D, lam=1.0, kernel="fused")
    for t, (x, reward) in enumerate(rounds(6, torch.float32)):
        chosen = half.act(Context(x), torch.Generator().manual_seed(t)).action[:, 0]
        decision = full.act(Context(x), torch.Generator().manual_seed(t))
        scores = rk.linucb_scores(full.a_inv, full.theta, x, 1.0)[:, 0]  # [R, K]
        gap = scores.amax(-1) - scores.gather(1, chosen[:, None])[:, 0]
        assert bool((gap <= 1e-3 * scores.abs().amax(-1).clamp_min(1.0)).all())
        for learner in (half, full):
            learner.update(Context(x), decision, bandit_feedback(decision, reward))
    assert torch.equal(half.a_inv, full.a_inv) and torch.equal(half.theta, full.theta)


def test_kernel_errors():
    with pytest.raises(ValueError, match="kernel must be one of"):
        LinUCB(R, K, D, kernel="numba")
    learner = LinUCB(R, K, D, kernel="fused_fp16").double()
    with pytest.raises(ValueError, match="needs float32"):
        learner.act(Context(torch.zeros(R, 1, D, dtype=torch.float64)))


def test_auto_kernel_is_fused_on_the_cpu_when_the_kernel_is_available():
    # (the fallback without a compiler: tests/functional/test_ridge_kernel_cache.py)
    gen = torch.Generator().manual_seed(3)
    auto = LinUCB(R, K, D, lam=1.5, kernel="auto").double()
    fused = LinUCB(R, K, D, lam=1.5, kernel="fused").double()
    assert auto.kernel == "fused"
    for _ in range(6):
        x = torch.randn(R, 1, D, generator=gen, dtype=torch.float64)
        reward = torch.rand(R, 1, K, generator=gen, dtype=torch.float64)
        da = auto.act(Context(x), torch.Generator().manual_seed(1))
        df = fused.act(Context(x), torch.Generator().manual_seed(1))
        assert torch.equal(da.action, df.action)
        auto.update(Context(x), da, bandit_feedback(da, reward))
        fused.update(Context(x), df, bandit_feedback(df, reward))
    assert torch.equal(auto.a_inv, fused.a_inv) and torch.equal(auto.theta, fused.theta)
