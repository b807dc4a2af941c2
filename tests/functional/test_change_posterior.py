"""The single change point posterior against the model written out in numpy: each
hypothesis' marginal likelihood from the joint Gaussian of the observations (a segment's
mean integrated out: covariance ``sigma^2 I + sigma^2 / lam 1 1^T``), one split at a time."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from torchroute.functional.change_posterior import one_change_posterior


def _log_marginal(y: np.ndarray, sigma2: float, lam: float) -> float:
    m = len(y)
    cov = sigma2 * np.eye(m) + sigma2 / lam * np.ones((m, m))
    _, logdet = np.linalg.slogdet(cov)
    return -0.5 * (m * math.log(2 * math.pi) + logdet + y @ np.linalg.solve(cov, y))


def _reference(y: np.ndarray, sigma2: float, lam: float, hazard: float) -> tuple[float, float]:
    n = len(y)
    if n < 2:
        return 0.0, 0.0
    none = _log_marginal(y, sigma2, lam)
    logw = [0.0]  # no change, relative to itself
    means = [0.0]
    for s in range(1, n):
        split = _log_marginal(y[:s], sigma2, lam) + _log_marginal(y[s:], sigma2, lam)
        logw.append(math.log(hazard) + split - none)
        post_precision = (n - s) / sigma2 + lam / sigma2  # the last segment's mean
        means.append(y[s:].sum() / sigma2 / post_precision)
    w = np.exp(np.array(logw) - max(logw))
    p = w / w.sum()
    return float(p[1:].sum()), float((p[1:] * np.array(means[1:])).sum())


@pytest.mark.parametrize(("sigma2", "lam", "hazard"), [(0.25, 1.0, 1e-3), (0.1, 5.0, 0.05)])
def test_against_the_marginal_likelihoods_written_out(sigma2, lam, hazard):
    rng = np.random.default_rng(0)
    rows, width = 12, 40
    values = rng.normal(0.0, math.sqrt(sigma2), (rows, width))
    values[::2, 25:] -= 0.4  # a change in half the rows
    count = rng.integers(0, width + 1, rows)
    count[:3] = [0, 1, width]
    values_t = torch.tensor(values)
    values_t[torch.arange(width) >= torch.tensor(count)[:, None]] = float("nan")  # never read
    p, after = one_change_posterior(values_t, torch.tensor(count), sigma2, lam, hazard)
    for i in range(rows):
        want_p, want_after = _reference(values[i, : count[i]], sigma2, lam, hazard)
        assert p[i].item() == pytest.approx(want_p, abs=1e-9)
        assert after[i].item() == pytest.approx(want_after, abs=1e-9)


def test_a_clear_change_is_believed_and_its_new_mean_found():
    # a drop of 0.6 over 40 observations: about 17 nats of evidence at sigma^2 = 1/4
    y = torch.cat([torch.full((60,), 0.1), torch.full((40,), -0.5)]).double()
    y = y + 0.05 * torch.randn(100, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    p, after = one_change_posterior(y, torch.tensor(100), 0.25, 1.0, 1e-3)
    assert p.item() > 0.99
    assert after.item() / p.item() == pytest.approx(-0.5 * 40 / 41, abs=0.02)
    flat, _ = one_change_posterior(y[:60], torch.tensor(60), 0.25, 1.0, 1e-3)
    # no change: below the prior's own odds of one (59 positions x 1e-3)
    assert flat.item() < 0.059 / 1.059
