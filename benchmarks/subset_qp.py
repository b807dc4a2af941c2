"""Per-instance time of the OMD-Approachability QP: the batched exact solver vs cvxpy.

Workload (docs/papers/subset.md, step 2): the projection of ``y`` onto
``{q in simplex, q >= gamma, a^T q <= b}`` with ``K = 50``, ``gamma = 1/(10K)``, 200 random
instances per call (``y`` around the uniform policy, ``a`` uniform in ``[0, 1]``, ``b``
between the smallest reachable ``a^T q`` and that of the unconstrained projection, so the
halfspace is active). Three solvers, timed in the same run:

1. ``project_capped_simplex_halfspace`` (float64, one batched call for the 200 instances;
   median of ``--repeats`` calls, divided by 200);
2. cvxpy + Clarabel, one ``Problem.solve`` per instance on a parametrised problem (built
   once), tolerances 1e-12 (the accuracy the tests use), over ``--cvxpy-instances``;
3. cvxpylayers: one batched call of a ``CvxpyLayer`` over the 200 instances (default
   solver settings; it is the differentiable-QP reference, not an exact solver).

It also prints the largest deviation of our solution from cvxpy's. The last line is
``ratio_vs_cvxpy_K50: <cvxpy time per instance / ours>``.

Usage: ``.venv/bin/python benchmarks/subset_qp.py [--repeats 5] [--cvxpy-instances 50]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import cvxpy as cp
import numpy as np
import torch

from torchroute.functional.projections import (
    project_capped_simplex,
    project_capped_simplex_halfspace,
)

K, BATCH = 50, 200


def instances(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    gamma = 1.0 / (10 * K)
    y = torch.randn(BATCH, K, generator=g, dtype=torch.float64) * 0.05 + 1.0 / K
    a = torch.rand(BATCH, K, generator=g, dtype=torch.float64)
    q0 = project_capped_simplex(y, gamma)
    low = gamma * a.sum(-1) + (1 - K * gamma) * a.amin(-1)
    b = low + torch.rand(BATCH, generator=g, dtype=torch.float64) * ((a * q0).sum(-1) - low)
    return y, a, b, gamma


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--cvxpy-instances", type=int, default=50)
    args = parser.parse_args()
    y, a, b, gamma = instances()

    project_capped_simplex_halfspace(y, gamma, a, b)  # warm-up
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        ours = project_capped_simplex_halfspace(y, gamma, a, b)
        times.append(time.perf_counter() - start)
    ours_t = statistics.median(times) / BATCH

    yp, ap, bp = cp.Parameter(K), cp.Parameter(K), cp.Parameter()
    q = cp.Variable(K)
    cons = [cp.sum(q) == 1, q >= gamma, ap @ q <= bp]
    problem = cp.Problem(cp.Minimize(cp.sum_squares(q - yp)), cons)
    n = min(args.cvxpy_instances, BATCH)
    dev, start = 0.0, time.perf_counter()
    for i in range(n):
        yp.value, ap.value, bp.value = y[i].numpy(), a[i].numpy(), float(b[i])
        problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
        dev = max(dev, float(np.abs(q.value - ours[i].numpy()).max()))
    cvx_t = (time.perf_counter() - start) / n

    layer_t = float("nan")
    try:
        from cvxpylayers.torch import CvxpyLayer

        layer = CvxpyLayer(problem, parameters=[yp, ap, bp], variables=[q])
        layer(y, a, b)  # warm-up (canonicalisation)
        start = time.perf_counter()
        (sol,) = layer(y, a, b)
        layer_t = (time.perf_counter() - start) / BATCH
        layer_dev = float((sol - ours).abs().max())
    except Exception as exc:  # report, do not fail the benchmark
        print(f"cvxpylayers: unavailable ({type(exc).__name__}: {exc})")
        layer_dev = float("nan")

    feas = float(((a * ours).sum(-1) - b).max())
    print(f"K={K}, {BATCH} instances per call, threads={torch.get_num_threads()}")
    print(f"ours (batched, float64):  {ours_t * 1e6:10.1f} us / instance")
    print(f"cvxpy + Clarabel (1e-12): {cvx_t * 1e6:10.1f} us / instance ({n} instances)")
    print(f"cvxpylayers (batched):    {layer_t * 1e6:10.1f} us / instance")
    print(
        f"max |ours - cvxpy| = {dev:.2e}; max |ours - cvxpylayers| = {layer_dev:.2e}; "
        f"max a^T q - b = {feas:.2e}"
    )
    print(f"ratio_vs_cvxpylayers_K50: {layer_t / ours_t:.1f}")
    print(f"ratio_vs_cvxpy_K50: {cvx_t / ours_t:.1f}")


if __name__ == "__main__":
    main()
