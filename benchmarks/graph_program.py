"""Amortised time per instance of the batched SquareCB-G solver against cvxpylayers and cvxpy.

Workload: ``K = 11`` arms, random instances (losses ``U(0, 1)``, random graphs of density
0.3 plus the diagonal, ``gamma`` log-uniform in ``[1e-2, 1e4]``). Three figures measured in
the same run so that their ratio shares the machine's load:

1. :func:`torchroute.functional.graph_squarecb_probs` on 210 instances per call
   (``--device``), median of ``--repeats`` calls, divided by 210 (default tolerance:
   certified ``V(p) - V* <= 1e-7 max(1, |V(p)|)``; ``kernel="auto"``: on the CPU the
   fused C++ iteration when the extension builds), and beside it one call of the eager
   torch path (``kernel="torch"``).
2. cvxpylayers (the DPP form with ``w = G^T p``, :mod:`tests.functional.graph_reference`)
   on a batch of 32 instances per call, median of the calls, divided by 32.
3. A plain cvxpy re-solve (Clarabel) of the same parametrised problem, one instance per
   call, median.

It also reports the worst relative gap ``(V_ours - V_ref) / max(1, |V_ref|)`` against
cvxpylayers (negative: ours is better). Inputs are float32, as a learner passes them; torch
runs with its default threads unless ``--threads`` is given.

``--load`` also measures every figure with :func:`cpu_load.cpu_hog` running (one busy
process per core, stopped after each measurement), the quiet and loaded measurements
interleaved in ``--reps`` repetitions, and prints the median of each side by side with the
machine's load averages. The last lines are ``ratio_vs_cvxpylayers_K11: <x>`` (quiet) and,
with ``--load``, ``ratio_vs_cvxpylayers_K11_loaded: <x>``.

Usage: ``.venv/bin/python benchmarks/graph_program.py [--device cpu] [--repeats 3]
[--reps 5] [--threads 0] [--load]``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_load import cpu_hog, load_average

from tests.functional.graph_reference import (
    TIGHT,
    reference_layer,
    squarecb_g_problem,
)
from torchroute.functional.graph_program import (
    graph_squarecb_probs,
    graph_squarecb_value,
)

K = 11


def instances(n: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    f = torch.rand(n, K, generator=generator, dtype=torch.float64)
    g = torch.rand(n, K, K, generator=generator) < 0.3
    gamma = 10 ** (torch.rand(n, generator=generator, dtype=torch.float64) * 6 - 2)
    return f, g, gamma


def timed(fn, repeats: int, sync) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3, help="calls per measurement")
    parser.add_argument("--reps", type=int, default=5, help="interleaved repetitions")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--load", action="store_true", help="also measure under a CPU hog")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    gen = torch.Generator().manual_seed(0)
    f, g, gamma = instances(210, gen)
    # float32, as a learner passes them (the solver works in float64 inside)
    fd, gd, gammad = f.float().to(dev), g.to(dev), gamma.float().to(dev)
    graph_squarecb_probs(fd, gd, gammad)  # warm-up

    layer = reference_layer(K)
    eye = torch.eye(K, dtype=torch.bool)
    gf = (g[:32] | eye).double()
    args32 = (f[:32], gf, 1.0 / gamma[:32])
    (p_ref,) = layer(*args32, solver_args=dict(TIGHT))

    problem, (fp, gp, igp), _ = squarecb_g_problem(K)
    cvx_opts = {k: v for k, v in TIGHT.items() if k != "solve_method"}

    def cvxpy_one(i: int = 0) -> None:
        fp.value, gp.value, igp.value = f[i].numpy(), gf[i].numpy(), float(1.0 / gamma[i])
        problem.solve(solver="CLARABEL", **cvx_opts)

    cvxpy_one()

    def measure() -> dict[str, float]:
        ours = timed(lambda: graph_squarecb_probs(fd, gd, gammad), args.repeats, sync) / 210
        eager = timed(lambda: graph_squarecb_probs(fd, gd, gammad, kernel="torch"), 1, sync) / 210
        layers = timed(lambda: layer(*args32, solver_args=dict(TIGHT)), args.repeats, sync) / 32
        plain = timed(cvxpy_one, max(args.repeats, 5), lambda: None)
        return {"ours": ours, "eager": eager, "layers": layers, "plain": plain}

    modes = ("quiet", "loaded") if args.load else ("quiet",)
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    loads: dict[str, list[str]] = {m: [] for m in modes}
    for _ in range(args.reps):
        for mode in modes:
            with cpu_hog() if mode == "loaded" else contextlib.nullcontext():
                runs[mode].append(measure())
                loads[mode].append(load_average())

    p_ours = graph_squarecb_probs(fd[:32], gd[:32], gammad[:32])
    v_ours = graph_squarecb_value(p_ours, f[:32], g[:32], gamma[:32])
    p_ref = p_ref.clamp_min(0) / p_ref.clamp_min(0).sum(-1, keepdim=True)
    v_ref = graph_squarecb_value(p_ref, f[:32], g[:32], gamma[:32])
    gap = ((v_ours - v_ref) / v_ref.abs().clamp_min(1)).max().item()
    print(f"threads: {torch.get_num_threads()}  device: {dev}  reps: {args.reps} (median)")
    for mode in modes:
        names = ("ours", "eager", "layers", "plain")
        med = {k: statistics.median(r[k] for r in runs[mode]) for k in names}
        ratio = statistics.median(r["layers"] / r["ours"] for r in runs[mode])
        ratio_plain = statistics.median(r["plain"] / r["ours"] for r in runs[mode])
        print(f"[{mode}] {loads[mode][0]} (first rep), {loads[mode][-1]} (last rep)")
        print(f"[{mode}] ours (210 per call):        {med['ours'] * 1e6:9.1f} us/instance")
        print(f"[{mode}] ours, eager torch path:     {med['eager'] * 1e6:9.1f} us/instance")
        print(f"[{mode}] cvxpylayers (32 per call):  {med['layers'] * 1e6:9.1f} us/instance")
        print(f"[{mode}] cvxpy re-solve (1 per call):{med['plain'] * 1e6:9.1f} us/instance")
        ratio_eager = statistics.median(r["layers"] / r["eager"] for r in runs[mode])
        print(
            f"[{mode}] ratio vs cvxpylayers: {ratio:.2f}  vs cvxpy: {ratio_plain:.2f}  "
            f"(eager path vs cvxpylayers: {ratio_eager:.2f})"
        )
        runs[mode] = [{"ratio": ratio, "ratio_plain": ratio_plain}]
    print(f"worst relative V gap vs cvxpylayers: {gap:.3e}")
    print(f"ratio_vs_cvxpy_K11: {runs['quiet'][0]['ratio_plain']:.2f}")
    print(f"ratio_vs_cvxpylayers_K11: {runs['quiet'][0]['ratio']:.2f}")
    if args.load:
        print(f"ratio_vs_cvxpylayers_K11_loaded: {runs['loaded'][0]['ratio']:.2f}")


if __name__ == "__main__":
    main()
