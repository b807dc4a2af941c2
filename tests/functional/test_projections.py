"""The exact projections of OMD-Approachability against cvxpy (Clarabel at 1e-12 tolerances)."""

from __future__ import annotations

import itertools

import cvxpy as cp
import numpy as np
import pytest
import torch

from torchroute.functional.projections import (
    box_distance,
    project_capped_simplex,
    project_capped_simplex_halfspace,
    project_unit_ball,
    safe_box,
    support_function,
    support_maximiser,
)
from torchroute.functional.subset import expected_sum_max, inclusion_probs, sum_max_reward

F64 = torch.float64
TOL = {"tol_gap_abs": 1e-12, "tol_gap_rel": 1e-12, "tol_feas": 1e-12}


def _cvxpy_projection(y, gamma, a=None, b=None):
    q = cp.Variable(len(y))
    cons = [cp.sum(q) == 1, q >= gamma]
    if a is not None:
        cons.append(a @ q <= b)
    cp.Problem(cp.Minimize(cp.sum_squares(q - y)), cons).solve(solver=cp.CLARABEL, **TOL)
    return q.value


def _instances(n, k, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(n, k, generator=g, dtype=F64) * 0.5 + 1.0 / k
    a = torch.rand(n, k, generator=g, dtype=F64)
    gamma = 1.0 / (10 * k)
    # b between the smallest reachable a^T q and a^T q of the unconstrained projection
    q0 = project_capped_simplex(y, gamma)
    low = gamma * a.sum(-1) + (1 - k * gamma) * a.amin(-1)
    b = low + torch.rand(n, generator=g, dtype=F64) * ((a * q0).sum(-1) - low)
    return y, a, b, gamma


@pytest.mark.parametrize("k", [3, 10, 50])
def test_capped_simplex_matches_cvxpy(k):
    y, _, _, gamma = _instances(8, k, seed=k)
    q = project_capped_simplex(y, gamma)
    for i in range(8):
        ref = _cvxpy_projection(y[i].numpy(), gamma)
        np.testing.assert_allclose(q[i].numpy(), ref, atol=1e-7)
    assert torch.allclose(q.sum(-1), torch.ones(8, dtype=F64), atol=1e-12)
    assert (q >= gamma - 1e-12).all()


@pytest.mark.parametrize("newton_iters", [12, 3, 0])  # 0: the bisection fallback alone
@pytest.mark.parametrize("k", [3, 10, 50])
def test_halfspace_projection_matches_cvxpy(k, newton_iters):
    y, a, b, gamma = _instances(10, k, seed=100 + k)
    q = project_capped_simplex_halfspace(y, gamma, a, b, newton_iters=newton_iters)
    for i in range(10):
        ref = _cvxpy_projection(y[i].numpy(), gamma, a[i].numpy(), float(b[i]))
        np.testing.assert_allclose(q[i].numpy(), ref, atol=1e-7)
    assert ((a * q).sum(-1) <= b + 1e-9).all()
    assert torch.allclose(q.sum(-1), torch.ones(10, dtype=F64), atol=1e-12)
    assert (q >= gamma - 1e-12).all()


def test_active_set_newton_alone_is_exact_on_most_instances():
    """The Newton path settles within its budget on these instances (no fallback needed),
    and its KKT point satisfies every condition; the fallback path agrees with it."""
    y, a, b, gamma = _instances(200, 50, seed=7)
    fast = project_capped_simplex_halfspace(y, gamma, a, b)
    slow = project_capped_simplex_halfspace(y, gamma, a, b, newton_iters=0)
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-9)
    assert ((a * fast).sum(-1) <= b + 1e-12).all()
    assert torch.allclose(fast.sum(-1), torch.ones(200, dtype=F64), atol=1e-12)


def test_halfspace_projection_leading_dims_and_inactive_constraint():
    y, a, b, gamma = _instances(12, 6, seed=3)
    q = project_capped_simplex_halfspace(y.view(3, 4, 6), gamma, a.view(3, 4, 6), b.view(3, 4))
    flat = project_capped_simplex_halfspace(y, gamma, a, b)
    torch.testing.assert_close(q.view(12, 6), flat)
    # a slack halfspace leaves the capped-simplex projection unchanged
    loose = project_capped_simplex_halfspace(y, gamma, a, a.sum(-1) + 1.0)
    torch.testing.assert_close(loose, project_capped_simplex(y, gamma))


def test_support_function_is_the_box_maximum_and_distance_is_the_dual():
    g = torch.Generator().manual_seed(0)
    lower = torch.tensor([-float("inf"), 0.2, 0.1], dtype=F64)
    upper = torch.tensor([1.5, float("inf"), 0.9], dtype=F64)
    lo, hi = safe_box(lower, upper, draws=3, cost_max=torch.ones(3, dtype=F64))
    torch.testing.assert_close(lo, torch.tensor([0.0, 0.2, 0.1], dtype=F64))
    torch.testing.assert_close(hi, torch.tensor([0.5, 1.0, 0.3], dtype=F64))
    w = torch.randn(20, 3, generator=g, dtype=F64)
    # brute force over the 8 vertices of the box
    corners = torch.tensor(list(itertools.product(*zip(lo.tolist(), hi.tolist()))), dtype=F64)
    brute = (w @ corners.T).amax(-1)
    torch.testing.assert_close(support_function(w, lo, hi), brute)
    x = support_maximiser(w, lo, hi)
    torch.testing.assert_close((w * x).sum(-1), brute)
    # Lemma 4: dist(u, S) = max_{|w| <= 1} w^T u - h_S(w) (maximiser: normalised u - P_S(u))
    u = torch.randn(20, 3, generator=g, dtype=F64)
    dist = box_distance(u, lo, hi)
    gap = u - u.clamp(lo, hi)
    w_star = project_unit_ball(gap / gap.norm(dim=-1, keepdim=True).clamp_min(1e-300))
    torch.testing.assert_close((w_star * u).sum(-1) - support_function(w_star, lo, hi), dist)
    assert (project_unit_ball(w * 10).norm(dim=-1) <= 1 + 1e-12).all()


def test_expected_sum_max_matches_enumeration():
    g = torch.Generator().manual_seed(1)
    k, n, m = 4, 2, 3
    values = torch.rand(n, k, generator=g, dtype=F64)
    q = torch.softmax(torch.randn(k, generator=g, dtype=F64), -1)
    total = torch.zeros((), dtype=F64)
    for draw in itertools.product(range(k), repeat=m):
        mask = torch.zeros(k, dtype=torch.bool)
        mask[list(draw)] = True
        total += q[list(draw)].prod() * sum_max_reward(values, mask)
    torch.testing.assert_close(expected_sum_max(q, values, m), total)
    singles = torch.zeros(k, dtype=F64)
    for draw in itertools.product(range(k), repeat=m):
        p = q[list(draw)].prod()
        for i in set(draw):
            singles[i] += p
    torch.testing.assert_close(inclusion_probs(q, m), singles)
