"""cvxpy / cvxpylayers references for the SquareCB-G program (tests and benchmarks only).

The DPP form of ``docs/papers/cabs.md`` (CABS-C): the auxiliary variable ``w = G^T p`` makes
``quad_over_lin(p_i - 1[i=a], w_i)`` DPP with ``G`` a parameter (same optimum).
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import torch
from cvxpylayers.torch import CvxpyLayer

#: tight Clarabel tolerances: the defaults are off by up to ~1e-4 in V at large gamma
TIGHT = {
    "solve_method": "Clarabel",
    "tol_gap_abs": 1e-11,
    "tol_gap_rel": 1e-11,
    "tol_feas": 1e-11,
    "max_iter": 500,
}


def squarecb_g_problem(k: int) -> tuple[cp.Problem, list[cp.Parameter], cp.Variable]:
    """The DPP problem with parameters ``(f [K], G [K, K], 1/gamma)`` and variable ``p``."""
    f = cp.Parameter(k)
    g = cp.Parameter((k, k), nonneg=True)
    inv_gamma = cp.Parameter(nonneg=True)
    p, z, w = cp.Variable(k), cp.Variable(), cp.Variable(k)
    cons = [cp.sum(p) == 1, p >= 0, w == g.T @ p]
    for a in range(k):
        e = np.zeros(k)
        e[a] = 1.0
        quad = cp.sum(cp.hstack([cp.quad_over_lin(p[i] - e[i], w[i]) for i in range(k)]))
        cons.append(inv_gamma * quad <= f[a] + z)
    return cp.Problem(cp.Minimize(f @ p + z), cons), [f, g, inv_gamma], p


def reference_layer(k: int) -> CvxpyLayer:
    """A cvxpylayers layer ``(f [N, K], G [N, K, K], 1/gamma [N]) -> (p [N, K],)``."""
    problem, params, p = squarecb_g_problem(k)
    assert problem.is_dpp()
    return CvxpyLayer(problem, parameters=params, variables=[p])


def reference_probs(
    losses: torch.Tensor, graph: torch.Tensor, gamma: torch.Tensor, layer: CvxpyLayer | None = None
) -> torch.Tensor:
    """Batched cvxpylayers solution ``[N, K]`` (float64, tight tolerances, on the simplex)."""
    k = losses.shape[-1]
    layer = layer or reference_layer(k)
    g = (graph.bool() | torch.eye(k, dtype=torch.bool)).double()
    (p,) = layer(losses.double(), g, 1.0 / gamma.double(), solver_args=dict(TIGHT))
    p = p.clamp_min(0)
    return p / p.sum(-1, keepdim=True)
