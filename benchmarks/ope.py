"""Off-policy evaluation: 64 targets x 200 bootstrap replicates in one batched call.

Workload: a log of ``n = 10,000`` decisions over ``K = 11`` arms (behaviour probabilities
from a Dirichlet, logged arms drawn from them, Bernoulli rewards, a reward model ``q_hat``
``[n, K]``), ``P = 64`` target policies (softmax of random linear scores of ``d = 16``
features), the six estimators of :mod:`torchroute.functional.ope` (IPS, SNIPS, DM, DR,
switch-DR, clipped DR) with 200 bootstrap replicates, standard errors and 95% percentile
intervals.

Players (the same bootstrap draws ``index [B, n]``, so the outputs must agree, which is
checked: values and standard errors to 1e-10, interval bounds to 1e-6 since the batched
replicates come from a float32 matmul):

1. **batched**: one :func:`torchroute.functional.ope.estimate` call on ``--device``
   (float64 inputs): per-decision terms computed a few targets at a time, centred, then
   ``[R, P, n]`` times the replicate counts ``[n, B]`` in float32.
2. **numpy loop**: the same estimators for one policy at a time, written here in numpy
   the way a per-policy library evaluates them (vectorised over decisions): the terms,
   then each replicate as ``terms[index].mean(1)`` (SNIPS: a ratio of sums), then
   ``np.quantile``.
3. **numpy loop, counts**: the same loop, but each policy's replicates as one matmul with
   the count matrix (the batched trick without the batching), a stronger reference.

Each player runs ``--reps`` times, taking turns; the figure is the median wall time.
Printed: the times, then ``ratio_vs_numpy_loop`` and ``ratio_vs_numpy_counts``.

    .venv/bin/python benchmarks/ope.py            # CPU, default threads
    .venv/bin/python benchmarks/ope.py --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from torchroute.functional.ope import ESTIMATORS, bootstrap_counts, estimate

TAU, CLIP, ALPHA = 10.0, 10.0, 0.05


def make_log(n: int, k: int, d: int, p: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    mu = rng.dirichlet(np.ones(k) * 2, size=n)
    a = (mu.cumsum(1) > rng.uniform(size=(n, 1))).argmax(1)
    means = 1 / (1 + np.exp(-x @ rng.normal(size=(d, k)) / np.sqrt(d)))
    r = (rng.uniform(size=n) < means[np.arange(n), a]).astype(float)
    q = np.clip(means + rng.normal(scale=0.1, size=means.shape), 0, 1)
    scores = np.einsum("nd,pdk->pnk", x, rng.normal(size=(p, d, k)))
    pi = np.exp(scores - scores.max(-1, keepdims=True))
    pi /= pi.sum(-1, keepdims=True)
    return pi, a, mu[np.arange(n), a], r, q


def numpy_loop(pi, a, prop, r, q, index, counts=None):
    """One policy at a time; returns value, std_error, lower, upper, each [E, P]."""
    n = len(a)
    rows = np.arange(n)
    out = np.zeros((4, len(ESTIMATORS), pi.shape[0]))
    for j in range(pi.shape[0]):
        w = pi[j, rows, a] / prop
        dm = (pi[j] * q).sum(1)
        res = r - q[rows, a]
        terms = {
            "ips": w * r,
            "dm": dm,
            "dr": dm + w * res,
            "switch_dr": dm + np.where(w <= TAU, w, 0.0) * res,
            "clipped_dr": dm + np.minimum(w, CLIP) * res,
        }
        for e, name in enumerate(ESTIMATORS):
            if name == "snips":
                wr = w * r
                value = wr.sum() / w.sum()
                infl = w * (r - value) / w.mean()
                if counts is None:
                    reps = wr[index].sum(1) / w[index].sum(1)
                else:
                    reps = (counts @ wr) / (counts @ w)
            else:
                t = terms[name]
                value, infl = t.mean(), t
                reps = t[index].mean(1) if counts is None else counts @ t / n
            lo, hi = np.quantile(reps, [ALPHA / 2, 1 - ALPHA / 2])
            out[:, e, j] = value, np.sqrt(infl.var(ddof=1) / n), lo, hi
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--targets", type=int, default=64)
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--arms", type=int, default=11)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    device = torch.device(args.device)
    pi, a, prop, r, q = make_log(args.n, args.arms, 16, args.targets)
    index, counts = bootstrap_counts(args.n, args.bootstrap, torch.Generator().manual_seed(1))
    idx_np, counts_np = index.numpy(), counts.numpy()
    tensors = [torch.as_tensor(v, device=device) for v in (pi, a, prop, r, q)]
    counts_dev = counts.to(device)

    def batched():
        out = estimate(*tensors, switch_tau=TAU, clip=CLIP, counts=counts_dev, alpha=ALPHA)
        stacked = torch.stack([out.value, out.std_error, out.lower, out.upper])
        return stacked.cpu().numpy()  # the one sync

    players = {
        "batched": batched,
        "numpy loop": lambda: numpy_loop(pi, a, prop, r, q, idx_np),
        "numpy loop, counts": lambda: numpy_loop(pi, a, prop, r, q, idx_np, counts_np),
    }
    results = {name: f() for name, f in players.items()}  # warm-up and agreement check
    gaps = {}
    for name in ("numpy loop", "numpy loop, counts"):
        gap = np.abs(results[name] - results["batched"])  # [4, E, P]
        gaps[name] = (gap[:2].max(), gap[2:].max())
        assert gaps[name][0] < 1e-10, f"{name}: values/std errors differ by {gaps[name][0]}"
        assert gaps[name][1] < 1e-6, f"{name}: interval bounds differ by {gaps[name][1]}"
    times: dict[str, list[float]] = {name: [] for name in players}
    for _ in range(args.reps):
        for name, f in players.items():
            if device.type == "cuda" and name == "batched":
                torch.cuda.synchronize()
            start = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - start)
    med = {name: statistics.median(t) for name, t in times.items()}
    print(
        f"n={args.n} K={args.arms} P={args.targets} B={args.bootstrap} estimators={len(ESTIMATORS)}"
        f" device={device} threads={torch.get_num_threads()}"
    )
    for name, (g_value, g_bounds) in gaps.items():
        print(f"{name}: values/std errors agree to {g_value:.1e}, bounds to {g_bounds:.1e}")
    for name, t in med.items():
        print(f"{name:>20}: {t * 1e3:9.1f} ms  (min {min(times[name]) * 1e3:.1f})")
    print(f"ratio_vs_numpy_loop {med['numpy loop'] / med['batched']:.1f}")
    print(f"ratio_vs_numpy_counts {med['numpy loop, counts'] / med['batched']:.1f}")


if __name__ == "__main__":
    main()
