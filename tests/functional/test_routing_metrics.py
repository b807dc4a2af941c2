"""RouterBench AIQ and RouteLLM PGR / APGR / CPT against hand-worked areas and brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from torchroute.functional.routing_metrics import aiq, apgr, cpt, nondecreasing_hull, pgr


def test_hull_drops_dominated_and_below_chord_points():
    # (1, 0.3) lies under the chord (0, 0.2)-(2, 0.8); (3, 0.5) costs more than (2, 0.8).
    xs, ys = nondecreasing_hull([3.0, 1.0, 2.0, 0.0], [0.5, 0.3, 0.8, 0.2])
    np.testing.assert_array_equal(xs, [0.0, 2.0])
    np.testing.assert_array_equal(ys, [0.2, 0.8])


def test_hull_keeps_the_best_of_equal_costs_and_stops_at_the_first_maximum():
    xs, ys = nondecreasing_hull([1.0, 1.0, 2.0, 3.0, 4.0], [0.1, 0.4, 0.9, 0.9, 0.95])
    np.testing.assert_array_equal(xs, [1.0, 2.0, 4.0])
    np.testing.assert_array_equal(ys, [0.4, 0.9, 0.95])
    xs, ys = nondecreasing_hull([1.0, 2.0, 3.0], [0.9, 0.9, 0.5])
    np.testing.assert_array_equal(xs, [1.0])
    np.testing.assert_array_equal(ys, [0.9])


def test_aiq_of_three_points_on_a_concave_curve():
    # trapezoids 1 * (0.4 + 0.7) / 2 + 2 * (0.7 + 0.8) / 2 = 2.05 over a range of 3
    assert aiq([1.0, 2.0, 4.0], [0.4, 0.7, 0.8], 1.0, 4.0) == pytest.approx(2.05 / 3)


def test_aiq_removes_a_dominated_point_and_holds_the_last_quality():
    # (2, 0.4) is under the chord, (4, 0.6) is dominated by (3, 0.7): area 1.2 + 0.7 on [1, 4]
    assert aiq([1.0, 2.0, 3.0, 4.0], [0.5, 0.4, 0.7, 0.6], 1.0, 4.0) == pytest.approx(1.9 / 3)


def test_aiq_interpolates_along_the_hull_not_the_raw_points():
    # The hull is the chord (0, 0)-(2, 1): area 1 on [0, 2]; the raw polyline would give 0.35.
    assert aiq([0.0, 1.0, 2.0], [0.0, 0.2, 1.0], 0.0, 2.0) == pytest.approx(0.5)


def test_aiq_counts_nothing_below_the_cheapest_point_of_the_router():
    # zero on [0, 2], the hull on [2, 4]: 2 * (0.6 + 0.8) / 2 = 1.4 over a range of 4
    assert aiq([2.0, 4.0], [0.6, 0.8], 0.0, 4.0) == pytest.approx(0.35)
    assert aiq([2.0, 4.0], [0.6, 0.8], 4.0, 4.0) == pytest.approx(0.8)
    assert aiq([2.0, 4.0], [0.6, 0.8], 0.0, 1.0) == 0.0


def _best_mixture(xs: np.ndarray, ys: np.ndarray, c: float) -> float:
    """Highest quality of a mix of at most two points whose mean cost is <= c (0 if none)."""
    best = max([y for x, y in zip(xs, ys) if x <= c], default=0.0)
    for i, j in itertools.permutations(range(len(xs)), 2):
        if xs[i] <= c < xs[j]:
            lam = (xs[j] - c) / (xs[j] - xs[i])  # weight on i that spends exactly c
            best = max(best, lam * ys[i] + (1 - lam) * ys[j])
    return best


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_aiq_matches_a_brute_force_over_mixtures(seed):
    """The hull is the best quality reachable by randomising between operating points."""
    rng = np.random.default_rng(seed)
    xs, ys = rng.uniform(0.0, 1.0, 7), rng.uniform(0.2, 0.9, 7)
    lo, hi = 0.0, 1.3
    grid = np.linspace(lo, hi, 20001)
    values = np.array([_best_mixture(xs, ys, c) for c in grid])
    # The brute-force curve jumps from 0 at the cheapest point: integrate up to the jump exactly.
    first = xs.min()
    inside = grid >= first
    nodes = np.r_[first, grid[inside]]
    curve = np.r_[_best_mixture(xs, ys, first), values[inside]]
    reference = np.trapezoid(curve, nodes) / (hi - lo)
    assert aiq(xs, ys, lo, hi) == pytest.approx(reference, abs=1e-6)


def test_pgr_is_the_share_of_the_weak_strong_gap():
    np.testing.assert_allclose(pgr([0.6, 0.7, 0.9, 0.5], 0.6, 0.8), [0.0, 0.5, 1.5, -0.5])
    assert np.isnan(pgr([0.6, 0.7], 0.7, 0.7)).all()


def test_apgr_of_a_random_weak_strong_mix_is_one_half():
    share = np.linspace(0.0, 1.0, 11)
    assert apgr(share, share) == pytest.approx(0.5)


def test_apgr_hand_worked_areas():
    # (0, 0), (0.2, 0.6), (0.6, 0.9), (1, 1): 0.06 + 0.3 + 0.38
    assert apgr([0.6, 0.2], [0.9, 0.6]) == pytest.approx(0.74)
    # a point at share 0 above the all-weak end replaces it: (0, 0.3), (0.5, 0.8), (1, 1)
    assert apgr([0.0, 0.5], [0.3, 0.8]) == pytest.approx(0.725)
    # a point below the all-weak end at share 0 does not: (0, 0), (0.5, 0.5), (1, 1)
    assert apgr([0.0, 0.5], [-0.2, 0.5]) == pytest.approx(0.5)


def test_apgr_matches_routellm_threshold_sweep_on_a_two_model_router():
    """A threshold router over queries: the exact area of its (share, PGR) staircase."""
    rng = np.random.default_rng(0)
    n = 40
    weak, strong = rng.random(n) < 0.4, rng.random(n) < 0.8
    order = np.argsort(-rng.random(n))  # the router sends the first k queries to strong
    q_w, q_s = weak.mean(), strong.mean()
    shares, quality = [], []
    for k in range(n + 1):
        routed = weak.copy()
        routed[order[:k]] = strong[order[:k]]
        shares.append(k / n)
        quality.append(routed.mean())
    gaps = pgr(quality, q_w, q_s)
    # Closed form: the query sent to strong at step p (share p/n -> (p+1)/n, a coin deciding
    # it in between) adds d = (strong - weak) / (n (q_s - q_w)) to PGR, ramping up over that
    # step and held to share 1, so it contributes d (n - p - 1/2) / n to the area.
    gain = (strong.astype(float) - weak)[order] / (n * (q_s - q_w))
    reference = float(np.sum(gain * (n - np.arange(n) - 0.5) / n))
    assert apgr(shares, gaps) == pytest.approx(reference)


def test_cpt_interpolates_to_the_first_crossing():
    assert cpt([0.2, 0.6], [0.3, 0.9], 0.5) == pytest.approx(1 / 3)
    # non-monotone curve, inputs out of order: first crossing between 0.1 and 0.3
    share, gap = [0.7, 0.3, 0.1, 0.5], [0.9, 0.6, 0.2, 0.4]
    assert cpt(share, gap, 0.5) == pytest.approx(0.25)
    assert cpt(share, gap, 0.8) == pytest.approx(0.5 + 0.2 * 0.4 / 0.5)


def test_cpt_at_the_first_point_and_when_never_reached():
    assert cpt([0.1, 0.4], [0.7, 0.9], 0.5) == pytest.approx(0.1)
    assert np.isnan(cpt([0.1, 0.4], [0.3, 0.45], 0.5))
    assert np.isnan(cpt([0.1, 0.4], [np.nan, np.nan], 0.5))
    assert np.isnan(apgr([0.1, 0.4], [np.nan, np.nan]))


def test_bad_inputs_are_rejected_with_the_argument_named():
    with pytest.raises(ValueError, match="cost and quality"):
        aiq([0.1, 0.2], [0.5], 0.0, 1.0)
    with pytest.raises(ValueError, match="finite"):
        nondecreasing_hull([0.1, np.nan], [0.5, 0.6])
    with pytest.raises(ValueError, match="c_min <= c_max"):
        aiq([0.1], [0.5], 1.0, 0.0)
    with pytest.raises(ValueError, match="share must lie in"):
        apgr([0.5, 1.2], [0.4, 0.9])
