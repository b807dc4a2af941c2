"""Off-policy estimators against hand-written numpy loops, and IPS on a closed-form toy."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
import torch

from torchroute.functional.ope import ESTIMATORS, bootstrap_counts, estimate, ope_terms
from torchroute.functional.ope_model import fold_assignment, ridge_reward_model, time_blocks


def _log(n=37, k=4, p=3, seed=0):
    rng = np.random.default_rng(seed)
    mu = rng.dirichlet(np.ones(k), size=n)
    a = np.array([rng.choice(k, p=row) for row in mu])
    pi = rng.dirichlet(np.ones(k), size=(p, n))
    r = rng.uniform(size=(p, n))
    q = rng.uniform(size=(n, k))
    return mu, a, pi, r, q


def _numpy_estimates(mu, a, pi, r, q, tau, clip):
    """One policy at a time, one decision at a time."""
    out = {e: [] for e in ESTIMATORS}
    n = len(a)
    for j in range(pi.shape[0]):
        ips = dm = dr = sw = cl = wsum = 0.0
        for i in range(n):
            w = pi[j, i, a[i]] / mu[i, a[i]]
            d = sum(pi[j, i, k] * q[i, k] for k in range(q.shape[1]))
            res = r[j, i] - q[i, a[i]]
            ips += w * r[j, i]
            wsum += w
            dm += d
            dr += d + w * res
            sw += d + (w * res if w <= tau else 0.0)
            cl += d + min(w, clip) * res
        out["ips"].append(ips / n)
        out["snips"].append(ips / wsum)
        out["dm"].append(dm / n)
        out["dr"].append(dr / n)
        out["switch_dr"].append(sw / n)
        out["clipped_dr"].append(cl / n)
    return np.array([out[e] for e in ESTIMATORS])


def _t(x):
    return torch.as_tensor(x, dtype=torch.float64)


def test_point_estimates_match_numpy_loop():
    mu, a, pi, r, q = _log()
    want = _numpy_estimates(mu, a, pi, r, q, tau=1.5, clip=2.0)
    prop = mu[np.arange(len(a)), a]
    got = estimate(
        _t(pi),
        torch.as_tensor(a),
        _t(prop),
        _t(r),
        _t(q),
        switch_tau=1.5,
        clip=2.0,
        num_bootstrap=0,
        interval="normal",
    )
    np.testing.assert_allclose(got.value.numpy(), want, rtol=0, atol=1e-10)
    w = pi[:, np.arange(len(a)), a] / prop
    np.testing.assert_allclose(got.ess.numpy(), w.sum(1) ** 2 / (w**2).sum(1), atol=1e-10)


@pytest.mark.parametrize(
    ("bootstrap_dtype", "atol"), [(torch.float64, 1e-10), (torch.float32, 1e-6)]
)
@pytest.mark.parametrize("alpha", [0.1, 0.5])
def test_bootstrap_replicates_and_intervals_match_numpy(bootstrap_dtype, atol, alpha):
    mu, a, pi, r, q = _log(n=25, p=2, seed=1)
    prop = mu[np.arange(len(a)), a]
    gen = torch.Generator().manual_seed(3)
    index, counts = bootstrap_counts(len(a), 50, gen)
    got = estimate(
        _t(pi),
        torch.as_tensor(a),
        _t(prop),
        _t(r),
        _t(q),
        counts=counts,
        alpha=alpha,
        bootstrap_dtype=bootstrap_dtype,
    )
    assert got.replicates.dtype == torch.float64
    idx = index.numpy()
    want = np.stack(
        [
            _numpy_estimates(mu[rows], a[rows], pi[:, rows], r[:, rows], q[rows], 10.0, 10.0)
            for rows in idx
        ],
        -1,
    )  # [E, P, B]
    np.testing.assert_allclose(got.replicates.numpy(), want, rtol=0, atol=atol)
    # the interval is the percentile interval of the replicates (np.quantile's linear rule)
    reps = got.replicates.numpy()
    lo, hi = np.quantile(reps, [alpha / 2, 1 - alpha / 2], axis=-1)
    np.testing.assert_allclose(got.lower.numpy(), lo, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.upper.numpy(), hi, rtol=0, atol=1e-12)


def test_std_error_and_bernstein_match_numpy():
    mu, a, pi, r, q = _log(n=40, p=2, seed=2)
    n = len(a)
    prop = mu[np.arange(n), a]
    got = estimate(
        _t(pi),
        torch.as_tensor(a),
        _t(prop),
        _t(r),
        _t(q),
        num_bootstrap=0,
        interval="bernstein",
        alpha=0.05,
        estimators=("ips", "snips"),
    )
    w = pi[:, np.arange(n), a] / prop
    ips_terms = w * r
    snips = ips_terms.sum(1) / w.sum(1)
    infl = w * (r - snips[:, None]) / w.mean(1, keepdims=True)
    for e, terms in enumerate([ips_terms, infl]):
        var = terms.var(1, ddof=1)
        np.testing.assert_allclose(got.std_error[e].numpy(), np.sqrt(var / n), atol=1e-10)
        span = terms.max(1) - terms.min(1)
        half = np.sqrt(2 * var * math.log(4 / 0.05) / n) + 7 * span * math.log(4 / 0.05) / (
            3 * (n - 1)
        )
        np.testing.assert_allclose(got.upper[e].numpy() - got.value[e].numpy(), half, atol=1e-10)
        np.testing.assert_allclose(got.value[e].numpy() - got.lower[e].numpy(), half, atol=1e-10)


def test_ips_unbiased_on_closed_form_toy():
    """Two arms, context-free: behaviour (0.8, 0.2), target (0.3, 0.7), Bernoulli rewards
    with means (0.2, 0.9): V = 0.3 * 0.2 + 0.7 * 0.9 = 0.69 exactly."""
    gen = torch.Generator().manual_seed(0)
    seeds, n = 400, 200
    mu = torch.tensor([0.8, 0.2], dtype=torch.float64)
    means = torch.tensor([0.2, 0.9], dtype=torch.float64)
    pi = torch.tensor([0.3, 0.7], dtype=torch.float64).expand(1, n, 2)
    values = []
    for _ in range(seeds):
        a = torch.multinomial(mu, n, replacement=True, generator=gen)
        r = (torch.rand(n, generator=gen, dtype=torch.float64) < means[a]).double()
        values.append(
            estimate(
                pi, a, mu[a], r, estimators=("ips",), num_bootstrap=0, interval="normal"
            ).value[0, 0]
        )
    v = torch.stack(values)
    se = v.std() / math.sqrt(seeds)
    assert abs(float(v.mean()) - 0.69) < 3 * float(se)


def test_missing_reward_model_and_unknown_estimator_raise():
    mu, a, pi, r, q = _log(n=5)
    prop = _t(mu[np.arange(5), a])
    with pytest.raises(ValueError, match="need q_hat"):
        ope_terms(_t(pi), torch.as_tensor(a), prop, _t(r), None, ("dr",))
    with pytest.raises(ValueError, match="unknown estimators"):
        ope_terms(_t(pi), torch.as_tensor(a), prop, _t(r), _t(q), ("magic",))


def test_ridge_reward_model_matches_numpy_cross_fit():
    rng = np.random.default_rng(4)
    n, d, k = 60, 3, 3
    x = rng.normal(size=(n, d))
    a = rng.integers(0, k, n)
    r = rng.uniform(size=(2, n))
    fold = fold_assignment(n, 2, torch.Generator().manual_seed(0))
    got = ridge_reward_model(_t(x), torch.as_tensor(a), _t(r), k, lam=0.5, fold=fold).numpy()
    f = fold.numpy()
    want = np.zeros((2, n, k))
    for g in range(2):
        for i in range(n):
            for arm in range(k):
                rows = (f != f[i]) & (a == arm)
                xs = x[rows]
                theta = np.linalg.solve(xs.T @ xs + 0.5 * np.eye(d), xs.T @ r[g, rows])
                want[g, i, arm] = np.clip(x[i] @ theta, 0, 1)
    np.testing.assert_allclose(got, want, atol=1e-10)
    assert sorted(np.bincount(f).tolist()) == [30, 30]


def test_forward_reward_model_fits_each_block_on_the_blocks_before_it():
    rng = np.random.default_rng(5)
    n, d, k = 50, 3, 2
    x = rng.normal(size=(n, d))
    a = rng.integers(0, k, n)
    r = rng.uniform(size=n)
    blocks = time_blocks(n, 5)
    assert blocks.tolist() == [i // 10 for i in range(n)]
    got = ridge_reward_model(
        _t(x), torch.as_tensor(a), _t(r), k, lam=0.5, fold=blocks, forward=True
    ).numpy()
    want = np.zeros((n, k))
    for i in range(n):
        for arm in range(k):
            rows = (np.arange(n) // 10 < i // 10) & (a == arm)  # earlier blocks only
            xs = x[rows]
            theta = np.linalg.solve(xs.T @ xs + 0.5 * np.eye(d), xs.T @ r[rows])
            want[i, arm] = np.clip(x[i] @ theta, 0, 1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    assert (got[:10] == 0).all()  # the first block has nothing before it
    # no prediction depends on its own block or a later one
    r2 = r.copy()
    r2[30:] = 1 - r2[30:]
    moved = ridge_reward_model(
        _t(x), torch.as_tensor(a), _t(r2), k, lam=0.5, fold=blocks, forward=True
    ).numpy()
    np.testing.assert_array_equal(moved[:40], got[:40])


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.32])
def test_normal_interval_is_the_two_sided_normal_quantile_times_the_std_error(alpha):
    mu, a, pi, r, _ = _log(n=40, p=2, seed=4)
    n = len(a)
    prop = mu[np.arange(n), a]
    got = estimate(
        _t(pi),
        torch.as_tensor(a),
        _t(prop),
        _t(r),
        estimators=("ips",),
        num_bootstrap=0,
        interval="normal",
        alpha=alpha,
    )
    std_error = np.sqrt((pi[:, np.arange(n), a] / prop * r).var(1, ddof=1) / n)
    half = NormalDist().inv_cdf(1 - alpha / 2) * std_error
    np.testing.assert_allclose(got.upper[0].numpy() - got.value[0].numpy(), half, atol=1e-12)
    np.testing.assert_allclose(got.value[0].numpy() - got.lower[0].numpy(), half, atol=1e-12)


def test_targets_in_several_chunks_match_each_target_alone():
    """3000 decisions and 20 targets with their own rewards and reward models: the terms
    are computed 7 targets at a time (about 2 MB), so rows 7.. come from later chunks."""
    mu, a, pi, r, _ = _log(n=3000, k=4, p=20, seed=5)
    q = np.random.default_rng(6).uniform(size=(20, 3000, 4))  # a reward model per target
    prop = _t(mu[np.arange(len(a)), a])
    counts = bootstrap_counts(len(a), 20, torch.Generator().manual_seed(7))[1]
    options = {"counts": counts, "bootstrap_dtype": torch.float64, "switch_tau": 1.5}
    whole = estimate(_t(pi), torch.as_tensor(a), prop, _t(r), _t(q), **options)
    for j in (0, 8, 19):
        alone = estimate(_t(pi[j : j + 1]), torch.as_tensor(a), prop, _t(r[j]), _t(q[j]), **options)
        for field in ("value", "std_error", "lower", "upper", "ess", "replicates"):
            target_dim = 0 if field == "ess" else 1  # ess [P]; the others [E, P, ...]
            torch.testing.assert_close(
                getattr(whole, field).narrow(target_dim, j, 1),
                getattr(alone, field),
                rtol=1e-12,
                atol=1e-12,
            )
