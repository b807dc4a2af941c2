"""The band of ``rounds_to_recover``: a flat curve settles in the first window in 95% of
groups, a curve that is still climbing does not."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from torchroute.envs.scenario import rounds_to_recover
from torchroute.errors import OptionError
from torchroute.functional.settling import max_standardised_distance, stationary_quantile


def _flat_groups(groups: int, trials: int, rounds: int, seed: int) -> tuple[torch.Tensor, ...]:
    """0/1 utilities of mean .3 (no change), ``groups`` groups of ``trials`` trials."""
    rng = np.random.default_rng(seed)
    u = torch.from_numpy((rng.random((groups * trials, rounds)) < 0.3).astype(np.float64))
    return u, torch.arange(groups).repeat_interleave(trials)


@pytest.mark.parametrize("rounds, window", [(300, None), (400, 16)])
def test_a_flat_curve_settles_in_the_first_window_in_95_percent_of_groups(rounds, window):
    """The claim of the band, on Bernoulli utilities (the quantile is simulated on Gaussian
    noise): with tolerance 0, the share of groups at the floor ``W`` is 95% within the
    sampling error of 2,000 groups (SE .005). The former band (3 s / sqrt(W)) gave about
    72% at the default window."""
    u, group = _flat_groups(2000, 5, rounds, seed=rounds)
    out = rounds_to_recover(u, group, window=window, tolerance=0.0)
    w = rounds // 10 if window is None else window
    per_group = out.view(2000, 5)[:, 0]
    share = (per_group == w).double().mean().item()
    assert 0.93 <= share <= 0.97, share


def test_a_curve_still_climbing_is_not_settled_in_the_first_window():
    """Ten trials whose success rate climbs from .3 to .7 over the first 100 of 400 rounds,
    then stays: no group settles before round 60 (the climb is .4, the band about .07
    here; the window is 40), and the median group at the end of the climb (100 +- 10)."""
    rng = np.random.default_rng(1)
    p = np.minimum(0.3 + 0.4 * np.arange(400) / 100, 0.7)
    u = torch.from_numpy((rng.random((2000, 400)) < p).astype(np.float64))
    out = rounds_to_recover(u, torch.arange(200).repeat_interleave(10), tolerance=0.01)
    per_group = out.view(200, 10)[:, 0]
    settled = per_group[~per_group.isnan()]
    assert len(settled) >= 190
    assert settled.min().item() > 60
    assert 90 <= settled.median().item() <= 110


def test_max_standardised_distance_against_a_loop():
    """``Z`` of three curves against a plain Python loop over the windows."""
    rng = np.random.default_rng(3)
    curves = rng.normal(size=(3, 50)) + np.linspace(0, 1, 50)
    got = max_standardised_distance(torch.from_numpy(curves), window=5, final=12)
    for row, value in zip(curves, got.tolist(), strict=True):
        level = sum(row[-12:]) / 12
        s = math.sqrt(sum((b - a) ** 2 for a, b in itertools.pairwise(row)) / (2 * 49))
        dists = [abs(sum(row[j : j + 5]) / 5 - level) for j in range(46)]
        assert value == pytest.approx(max(dists) / (s * math.sqrt(1 / 5 + 1 / 12)), rel=1e-12)


def test_stationary_quantile_values_and_checks():
    """Near the figures of a larger simulation (20,000 curves of 1,000 rounds: 3.27 at the
    default windows, 3.73 at W = n / 40), the same number each call, larger at a higher
    confidence; bad arguments name themselves."""
    default = stationary_quantile(1000, 100, 250, 0.95)
    assert default == pytest.approx(3.27, abs=0.06)
    assert stationary_quantile(1000, 100, 250, 0.95) == default
    assert stationary_quantile(2000, 50, 500, 0.95) == pytest.approx(3.73, abs=0.08)
    assert stationary_quantile(1000, 100, 250, 0.99) > default
    with pytest.raises(OptionError, match="window"):
        stationary_quantile(100, 0, 25, 0.95)
    with pytest.raises(OptionError, match="final"):
        stationary_quantile(100, 10, 100, 0.95)
    with pytest.raises(ValueError, match="confidence"):
        stationary_quantile(100, 10, 25, 1.0)
