"""The subset benchmark's optimum ``solve_opt`` against a brute force over the simplex.

The reference objective enumerates every ordered tuple of ``M`` draws (no closed form):
``sum_p w_p sum_n sum_{(a_1..a_M)} prod_i q_{a_i} max_i V[p, n, a_i]`` over ``sum_p w_p``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from torchroute.envs.subset import solve_opt

GAMMA = 0.02


def _objective(q: np.ndarray, values: np.ndarray, weights: np.ndarray, draws: int) -> np.ndarray:
    """The expected sum over facets of the best drawn expert, by enumeration, for policies
    ``q [..., K]``: ``[...]``."""
    total = np.zeros(q.shape[:-1])
    for tup in itertools.product(range(q.shape[-1]), repeat=draws):
        best = values[:, :, list(tup)].max(-1).sum(-1)  # [P]
        total += q[..., list(tup)].prod(-1) * float(weights @ best)
    return total / weights.sum()


def _grid(k: int, steps: int) -> np.ndarray:
    """Every policy on the simplex with coordinates in multiples of ``1 / steps``."""
    pts = [c for c in itertools.product(range(steps + 1), repeat=k - 1) if sum(c) <= steps]
    grid = np.array([(*c, steps - sum(c)) for c in pts], dtype=float)
    return grid / steps


def _instance(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    values = rng.uniform(size=(2, 3, 3))  # P = 2 rounds, N = 3 facets, K = 3 experts
    weights = np.array([1.0, 3.0])
    costs = np.array([[0.2, 1.0, 0.5]])  # d = 1
    return values, weights, costs


@pytest.mark.parametrize(("seed", "hi"), [(0, 1.0), (1, 0.45), (2, 0.45), (3, 0.35)])
def test_opt_is_the_best_safe_policy_of_a_brute_force_grid(seed, hi):
    """``hi = 1``: only the floor binds; smaller: the cost box cuts the simplex."""
    values, weights, costs = _instance(seed)
    lo_box, hi_box = np.array([-np.inf]), np.array([hi])
    q = solve_opt(values, weights, costs, lo_box, hi_box, draws=2, gamma=GAMMA)
    assert q.shape == (3,) and abs(q.sum() - 1) < 1e-9
    assert (q >= GAMMA - 1e-9).all() and (costs @ q <= hi_box + 1e-6).all()
    grid = _grid(3, 200)
    safe = grid[(grid >= GAMMA - 1e-12).all(1) & ((grid @ costs.T) <= hi_box + 1e-12).all(1)]
    scores = _objective(safe, values, weights, 2)
    best = safe[scores.argmax()]
    # the grid's best is a safe policy, so no better than the optimum (up to the solver's
    # tolerance); the optimum is within a grid step of it (strictly concave here)
    assert _objective(q, values, weights, 2) >= scores.max() - 1e-7
    np.testing.assert_allclose(q, best, atol=2 / 200)


def test_opt_puts_every_mass_above_the_floor_on_an_expert_that_is_best_everywhere():
    values, weights, costs = _instance(4)
    values[..., 1] = values.max(-1) + 0.1  # expert 1 beats the others on every facet
    q = solve_opt(values, weights, costs, np.array([-np.inf]), np.array([np.inf]), 3, GAMMA)
    np.testing.assert_allclose(q, [GAMMA, 1 - 2 * GAMMA, GAMMA], atol=1e-6)
