"""The benchmark ``OPT`` of multinomial subset routing, solved with cvxpy (set-up only).

docs/papers/subset.md, paper 002 eq. (3): ``max_q sum_p w_p Phi_p(q)`` over the safe set
``{q in simplex, q >= gamma, C q in S}``, with the closed form of
:func:`torchroute.functional.subset.expected_sum_max` (concave: a sum of
``1 - (1 - Q_j)^M`` terms with ``Q_j`` linear in ``q``).
"""

from __future__ import annotations

import numpy as np

from torchroute.errors import UnreachableTargetError


def solve_opt(
    values: np.ndarray,
    weights: np.ndarray,
    costs: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    draws: int,
    gamma: float,
) -> np.ndarray:
    """The optimal safe policy ``q* [K]`` of one trial.

    Args:
        values: ``[P, N, K]`` facet values of the ``P`` distinct rounds (or block means).
        weights: ``[P]`` how often each occurs (any positive scale).
        costs: ``[d, K]`` the per-expert cost matrix ``C``.
        lo: ``[d]`` the safe box ``S``'s lower corner.
        hi: ``[d]`` its upper corner.
        draws: ``M``.
        gamma: the floor.

    Returns:
        ``[K]`` float64.

    Raises:
        UnreachableTargetError: the safe set is empty.
    """
    p, n, k = values.shape
    order = np.argsort(-values, axis=-1, kind="stable")  # [P, N, K]
    v = np.take_along_axis(values, order, -1)
    gaps = v - np.concatenate([v[..., 1:], np.zeros_like(v[..., :1])], -1)
    rows, coefs = [], []
    for i in range(p):
        for j in range(n):
            keep = np.flatnonzero(gaps[i, j] > 1e-12)
            for t in keep:
                row = np.zeros(k)
                row[order[i, j, : t + 1]] = 1.0
                rows.append(row)
                coefs.append(weights[i] * gaps[i, j, t])
    import cvxpy as cp  # imported where used: `import torchroute.envs` stays light

    q = cp.Variable(k)
    cons = [cp.sum(q) == 1, q >= gamma, costs @ q >= lo, costs @ q <= hi]
    if rows:
        a = np.asarray(rows)
        c = np.asarray(coefs) / np.sum(weights)
        objective = cp.Minimize(c @ cp.power(1 - a @ q, draws))
    else:
        objective = cp.Minimize(0)
    problem = cp.Problem(objective, cons)
    problem.solve(solver=cp.CLARABEL)
    if problem.status not in ("optimal", "optimal_inaccurate") or q.value is None:
        raise UnreachableTargetError(
            f"target box: no policy with q >= {gamma:.3g} reaches the safe cost box "
            f"[{lo.tolist()}, {hi.tolist()}] (cvxpy status {problem.status}); loosen the "
            "constraint or check the cost vectors"
        )
    out = np.clip(q.value, gamma, None)
    return out / out.sum()
