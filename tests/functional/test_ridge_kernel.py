"""The fused LinUCB kernels against a float64 numpy Sherman–Morrison loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchroute.functional import ridge_kernel as rk

try:
    rk.kernel_library()
except rk.KernelUnavailableError as err:  # no C++ compiler and no cached build
    pytest.skip(f"fused kernel unavailable: {err}", allow_module_level=True)

R, K, D, TILE = 5, 3, 37, 32  # D: not a multiple of the tile, the row group or a vector


def np_state(rng: np.random.Generator, lam: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``A^{-1} [R, K, d, d]``, ``theta [R, K, d]`` after ``n`` random observations per arm."""
    a_inv = np.empty((R, K, D, D))
    theta = np.empty((R, K, D))
    for r in range(R):
        for k in range(K):
            x = rng.normal(size=(n, D))
            y = rng.normal(size=n)
            a = lam * np.eye(D) + x.T @ x
            a_inv[r, k] = np.linalg.inv(a)
            a_inv[r, k] = (a_inv[r, k] + a_inv[r, k].T) / 2
            theta[r, k] = a_inv[r, k] @ (x.T @ y)
    return a_inv, theta


def np_scores(a_inv, theta, x, alpha) -> np.ndarray:
    """``[R, B, K]``: ``x^T theta_k + alpha_r sqrt(x^T A_k^{-1} x)``, loops over everything."""
    r_, b_, k_ = x.shape[0], x.shape[1], a_inv.shape[1]
    out = np.empty((r_, b_, k_))
    for r in range(r_):
        for b in range(b_):
            for k in range(k_):
                quad = x[r, b] @ a_inv[r, k] @ x[r, b]
                out[r, b, k] = theta[r, k] @ x[r, b] + alpha[r] * np.sqrt(max(quad, 0.0))
    return out


def np_update(a_inv, theta, x, arm, y, seen) -> None:
    """In place: Sherman–Morrison on ``arm[r]`` of each trial that ``seen``."""
    for r in range(a_inv.shape[0]):
        if not seen[r]:
            continue
        a, t = a_inv[r, arm[r]], theta[r, arm[r]]
        ax = a @ x[r]
        denom = 1.0 + x[r] @ ax
        t += (y[r] - t @ x[r]) / denom * ax
        a -= np.outer(ax, ax) / denom


def t(a: np.ndarray, dtype=torch.float64) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).to(dtype)


def bandit(arm: np.ndarray, y: np.ndarray, seen: np.ndarray, dtype=torch.float64):
    """``reward [R, K]`` (NaN off the played arm) and ``observed [R, K]`` for the kernel."""
    reward = np.full((len(arm), K), np.nan)
    reward[np.arange(len(arm)), arm] = y
    observed = np.zeros((len(arm), K), dtype=bool)
    observed[np.arange(len(arm)), arm] = seen
    return t(reward, dtype), torch.from_numpy(observed)


@pytest.mark.parametrize("per_trial_alpha", [False, True])
def test_scores_match_numpy(per_trial_alpha):
    rng = np.random.default_rng(0)
    a_inv, theta = np_state(rng, 2.0, 8)
    x = rng.normal(size=(R, 2, D))
    alpha = rng.uniform(0.1, 2.0, size=R) if per_trial_alpha else np.full(R, 0.7)
    arg = t(alpha) if per_trial_alpha else 0.7
    got = rk.linucb_scores(t(a_inv), t(theta), t(x), arg)
    np.testing.assert_allclose(got.numpy(), np_scores(a_inv, theta, x, alpha), rtol=1e-12)


@pytest.mark.parametrize("noise_dtype", [torch.float32, torch.float64])
def test_act_is_the_tie_broken_argmax_of_numpy_scores(noise_dtype):
    rng = np.random.default_rng(4)
    a_inv, theta = np_state(rng, 2.0, 8)
    a_inv[:, 2], theta[:, 2] = a_inv[:, 0], theta[:, 0]  # arms 0 and 2 tie exactly
    x = rng.normal(size=(R, 3, D))
    x[1, 0] = 0.0  # every arm scores 0: a three-way tie
    noise = torch.rand(R, 3, K, generator=torch.Generator().manual_seed(0), dtype=noise_dtype)
    action, probs = rk.linucb_act(t(a_inv), t(theta), t(x), 0.7, noise)
    want = np_scores(a_inv, theta, x, np.full(R, 0.7))
    u = noise.double().numpy()
    tied = want >= want.max(-1, keepdims=True)  # ties among equal scores: the largest noise
    expected = np.where(tied, u, -1.0).argmax(-1)
    assert tied.sum(-1).max() == 3 and (tied.sum(-1) == 2).any()
    np.testing.assert_array_equal(action.numpy(), expected)
    assert probs.dtype == torch.float64
    np.testing.assert_array_equal(probs.numpy(), np.eye(K)[expected])


@pytest.mark.parametrize(("dtype", "atol"), [(torch.float64, 1e-12), (torch.float32, 2e-5)])
def test_updates_match_numpy_loop(dtype, atol):
    rng = np.random.default_rng(1)
    a_inv, theta = np_state(rng, 1.0, 0)
    a_t, th_t = t(a_inv, dtype), t(theta, dtype)
    for _ in range(40):
        x = rng.normal(size=(R, D)) / np.sqrt(D)
        arm = rng.integers(0, K, size=R)
        y = rng.uniform(size=R)
        seen = rng.uniform(size=R) < 0.8
        reward, observed = bandit(arm, y, seen, dtype)
        rk.sherman_morrison_played_(a_t, th_t, t(x, dtype), t(arm, torch.long), reward, observed)
        np_update(a_inv, theta, x, arm, y, seen)
    np.testing.assert_allclose(a_t.double().numpy(), a_inv, rtol=0, atol=atol)
    np.testing.assert_allclose(th_t.double().numpy(), theta, rtol=0, atol=10 * atol)
    assert torch.equal(a_t, a_t.transpose(-1, -2))  # s (ax_i ax_j) keeps exact symmetry


def test_prior_shortcut_scores_and_bookkeeping():
    rng = np.random.default_rng(2)
    a_inv, theta = np_state(rng, 3.0, 0)  # every arm at its prior I / 3
    a_t, th_t = t(a_inv), t(theta)
    prior = rk.prior_scales(a_t, th_t)
    assert torch.equal(prior, torch.full((R, K), 1.0 / 3.0, dtype=torch.float64))
    arm = np.array([0, 1, 2, 0, 1])
    x = rng.normal(size=(R, D))
    reward, observed = bandit(arm, rng.uniform(size=R), np.array([1, 1, 1, 0, 1], bool))
    rk.sherman_morrison_played_(a_t, th_t, t(x), t(arm, torch.long), reward, observed, prior)
    np_update(a_inv, theta, x, arm, reward.numpy()[np.arange(R), arm], observed.any(1).numpy())
    assert torch.equal(prior, rk.prior_scales(a_t, th_t))  # updated arms left the prior
    assert int((prior < 0).sum()) == 4
    xs = rng.normal(size=(R, 1, D))
    got = rk.linucb_scores(a_t, th_t, t(xs), 1.3, prior)
    np.testing.assert_allclose(got.numpy(), np_scores(a_inv, theta, xs, np.full(R, 1.3)), 1e-12)


def test_half_copy_widths_within_bound_and_kept_current():
    rng = np.random.default_rng(3)
    lam = 4.0
    a_inv, theta = np_state(rng, lam, 0)
    a_t, th_t = t(a_inv, torch.float32), t(theta, torch.float32)
    scale = torch.full((R,), lam)
    half = rk.half_copy(a_t, scale)
    for _ in range(30):  # updates keep the float16 copy's block upper triangle current
        x = rng.normal(size=(R, D)) / np.sqrt(D)
        arm = rng.integers(0, K, size=R)
        y = rng.uniform(size=R)
        reward, observed = bandit(arm, y, np.ones(R, bool), torch.float32)
        xt = t(x, torch.float32)
        rk.sherman_morrison_played_(
            a_t, th_t, xt, t(arm, torch.long), reward, observed, None, half, scale
        )
        np_update(a_inv, theta, x, arm, y, np.ones(R, bool))
    rows, cols = np.indices((D, D))
    upper = torch.from_numpy(cols >= rows - rows % TILE)
    assert torch.equal(half[..., upper], rk.half_copy(a_t, scale)[..., upper])
    xs = rng.normal(size=(R, 1, D))
    zero = torch.zeros_like(th_t)
    quad = rk.linucb_scores(a_t, zero, t(xs, torch.float32), 1.0, None, half, scale).double() ** 2
    exact = np_scores(a_inv, np.zeros_like(theta), xs, np.ones(R)) ** 2
    # The stated bound, 2^-11 |x|^T |A^{-1}| |x| per entry, plus float32 rounding.
    bound = np.einsum("rbi,rkij,rbj->rbk", np.abs(xs), np.abs(a_inv), np.abs(xs)) / 2**11
    assert np.all(np.abs(quad.numpy() - exact) <= bound + 1e-5 * exact)


def test_threads_do_not_change_results(monkeypatch):
    rng = np.random.default_rng(4)
    a_inv, theta = np_state(rng, 1.0, 5)
    x = t(rng.normal(size=(R, 1, D)))
    one = rk.linucb_scores(t(a_inv), t(theta), x, 1.0)
    monkeypatch.setattr(rk, "_threads", lambda work, rows: 3)
    assert torch.equal(rk.linucb_scores(t(a_inv), t(theta), x, 1.0), one)
    arm = torch.arange(R) % K
    reward, observed = bandit(arm.numpy(), np.ones(R), np.ones(R, bool))
    pooled = [t(a_inv), t(theta)]
    rk.sherman_morrison_played_(*pooled, x[:, 0], arm, reward, observed)
    monkeypatch.undo()
    single = [t(a_inv), t(theta)]
    rk.sherman_morrison_played_(*single, x[:, 0], arm, reward, observed)
    assert torch.equal(pooled[0], single[0]) and torch.equal(pooled[1], single[1])


def test_trial_equivariance():
    rng = np.random.default_rng(5)
    a_inv, theta = np_state(rng, 1.0, 4)
    x = rng.normal(size=(R, 1, D))
    perm = rng.permutation(R)
    base = rk.linucb_scores(t(a_inv), t(theta), t(x), 1.0)
    permuted = rk.linucb_scores(t(a_inv[perm]), t(theta[perm]), t(x[perm]), 1.0)
    assert torch.equal(permuted, base[perm])


def test_errors():
    a_inv, theta = torch.eye(4).expand(2, 3, 4, 4).contiguous(), torch.zeros(2, 3, 4)
    x = torch.zeros(2, 4)
    reward, observed = torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="out of range"):
        rk.sherman_morrison_played_(a_inv, theta, x, torch.tensor([0, 3]), reward, observed)
    with pytest.raises(ValueError, match="contiguous CPU"):
        rk.linucb_scores(a_inv.transpose(-1, -2), theta, x[:, None], 1.0)
    with pytest.raises(ValueError, match="must be"):
        rk.linucb_scores(a_inv, theta, torch.zeros(2, 1, 5), 1.0)
    with pytest.raises(ValueError, match="float32"):
        rk.linucb_scores(
            a_inv.double(),
            theta.double(),
            x[:, None].double(),
            1.0,
            None,
            torch.zeros(2, 3, 4, 4, dtype=torch.float16),
            torch.ones(2).double(),
        )
