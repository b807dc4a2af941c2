"""Per-round time of HPG's low-rank mirror step against the dense ``eigh`` path.

Workload (docs/papers/hpg.md): ``M = 8`` models, ``R`` trials (``--trials``, default 1
on the CPU), one query per round. One HPG round = the policy scores ``q^T W_m q`` of every
model from the low-rank state (``O(d k)``) plus the mirror step of every model
(:func:`torchroute.functional.hypentropy.mirror_step`: rank-one eigen-update in the span of
``[U, q_perp]``, nuclear projection, compaction to the capacity ``k = 32``), from a steady
state where every slot is active and the projection binds. The dense path does the same
round from the dense mirror iterate: the scores from the dense ``W_m`` and a full ``d x d``
``eigh`` per model per round (:func:`dense_mirror_step`) plus the reconstruction of ``W``.
Both are timed in the same run for ``d in {64, 128, 256, 512, 768, 1024}`` (the fastest
of several ~50 ms blocks after a warm-up; at least 3 blocks).

Prints one line per ``d`` and, last, ``ratio_vs_dense_d768: <dense / hpg>`` and
``time_exponent_vs_d: <slope of log hpg time vs log d>``. With ``--device cuda`` it also
prints the HPG throughput in trials x models per second.

    .venv/bin/python benchmarks/hpg_round.py [--device cuda] [--trials 256]
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from torchroute.functional.hypentropy import (
    dense_mirror_step,
    inverse_mirror_map,
    mirror_step,
    quadratic_form,
)

M, CAPACITY, DIMS = 8, 32, (64, 128, 256, 512, 768, 1024)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best_time(fn, device: torch.device, min_time: float, max_blocks: int = 15) -> float:
    """Per-call time: the fastest of several blocks of calls (on a shared, loaded machine
    other processes only ever add time, so the minimum is the least noisy estimate)."""
    fn()  # warm-up
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    calls = max(1, int(0.05 / max(time.perf_counter() - t0, 1e-6)))  # ~50 ms blocks
    times, start = [], time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < min_time and len(times) < max_blocks):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        _sync(device)
        times.append((time.perf_counter() - t0) / calls)
    return min(times)


def _state(r: int, d: int, device, dtype, gen):
    basis = torch.linalg.qr(torch.randn(r, M, d, CAPACITY, generator=gen, dtype=dtype))[0]
    theta = torch.randn(r, M, CAPACITY, generator=gen, dtype=dtype) * 2
    return basis.to(device), theta.to(device)


def bench(d: int, r: int, device: torch.device, dtype: torch.dtype, min_time: float):
    gen = torch.Generator().manual_seed(d)
    tau, beta = 8.0, 8.0 / d
    basis, theta = _state(r, d, device, dtype, gen)
    q = torch.nn.functional.normalize(torch.randn(r, 1, d, generator=gen, dtype=dtype), dim=-1)
    q = q.to(device)
    c = (torch.randn(r, M, 1, generator=gen, dtype=dtype) * 0.1).to(device)
    qm = q[:, None].expand(r, M, 1, d)

    def hpg_round():
        quadratic_form(basis, theta, beta, qm)
        mirror_step(basis, theta, theta != 0, qm, c, tau, beta, CAPACITY)

    dense_theta = (basis * theta[..., None, :]) @ basis.transpose(-1, -2)
    dense_w = (basis * inverse_mirror_map(theta, beta)[..., None, :]) @ basis.transpose(-1, -2)

    def dense_round():
        torch.einsum("rbd,rmde,rbe->rbm", q, dense_w, q)
        new = dense_mirror_step(dense_theta, qm, c, tau, beta)
        vals, vecs = torch.linalg.eigh(new)  # W = V beta sinh(Lambda) V^T for the next round
        (vecs * inverse_mirror_map(vals, beta)[..., None, :]) @ vecs.transpose(-1, -2)

    hpg = _best_time(hpg_round, device, min_time)
    dense = _best_time(dense_round, device, min_time, max_blocks=3)
    return hpg, dense


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--trials", type=int, default=None, help="R (default 1 CPU, 256 GPU)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--min-time", type=float, default=0.5, help="seconds per measurement")
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    r = args.trials or (256 if device.type == "cuda" else 1)
    print(f"device={device} threads={torch.get_num_threads()} R={r} M={M} capacity={CAPACITY}")
    hpg_times = {}
    ratio_768 = float("nan")
    for d in DIMS:
        hpg, dense = bench(d, r, device, dtype, args.min_time)
        hpg_times[d] = hpg
        line = f"d={d:5d} hpg_ms={hpg * 1e3:9.3f} dense_ms={dense * 1e3:10.3f}"
        line += f" ratio={dense / hpg:8.1f}"
        if device.type == "cuda":
            line += f" hpg_trial_models_per_s={r * M / hpg:,.0f}"
        print(line, flush=True)
        if d == 768:
            ratio_768 = dense / hpg
    xs = [math.log(d) for d in DIMS]
    ys = [math.log(hpg_times[d]) for d in DIMS]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    print(f"ratio_vs_dense_d768: {ratio_768:.1f}")
    print(f"time_exponent_vs_d: {slope:.3f}")


if __name__ == "__main__":
    main()
