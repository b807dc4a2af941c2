"""Per-round time of HPG's low-rank mirror step against the dense ``eigh`` path.

Workload (docs/papers/hpg.md): ``M = 8`` models, ``R`` trials (``--trials``, default 1
on the CPU), one query per round. One HPG round = the policy scores ``q^T W_m q`` of every
model from the low-rank state (``O(d k)``; their basis coordinates ``q U`` reused by the
step) plus the mirror step of every model
(:func:`torchroute.functional.hypentropy.mirror_step`: rank-one eigen-update in the span of
``[U, q_perp]`` by the batched secular-equation solver of
:mod:`torchroute.functional.secular`, nuclear projection, compaction to the capacity
``k = 32``, the new basis written into a buffer kept across rounds, as the learner
does), from a steady state where every slot is active and the projection binds. The
dense path does the same round from the dense mirror iterate: the scores from the dense
``W_m`` and a full ``d x d`` ``eigh`` per model per round (:func:`dense_mirror_step`) plus
the reconstruction of ``W``. Both are timed in the same run for
``d in {64, 128, 256, 512, 768, 1024}`` (the fastest of several ~50 ms blocks after a
warm-up; at least 3 blocks).

Prints one line per ``d`` and, last, ``ratio_vs_dense_d768: <dense / hpg>`` and
``time_exponent_vs_d: <slope of log hpg time vs log d>``. With ``--device cuda`` it also
prints the HPG throughput in trials x models per second.

With ``--scaling R1,R2`` it instead times the HPG round alone at ``R = R1`` and ``R = R2``
(default ``1,64``) for each ``--dims`` (CPU time of this process on the CPU, so time spent
descheduled on a busy machine does not count; wall time on a GPU) and prints the per-trial
time at both and ``per_trial_ratio_d<d>: <per-trial at R2 / per-trial at R1>``. On a machine
shared with other jobs, set ``OMP_NUM_THREADS=1``: idle OpenMP threads that spin while
another process holds the cores count as CPU time and can inflate a block many times over.

    .venv/bin/python benchmarks/hpg_round.py [--device cuda] [--trials 256]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/hpg_round.py --scaling 1,64 --dims 64,256,768
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from torchroute.functional.hypentropy import (
    basis_coordinates,
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


def _best_process_time(fn, device: torch.device, min_time: float) -> float:
    """Per-call time of ``fn`` from the fastest of at least 3 blocks, in CPU time of this
    process on the CPU (wall time elsewhere)."""
    clock = time.process_time if device.type == "cpu" else time.perf_counter
    fn()
    _sync(device)
    t0 = clock()
    fn()
    _sync(device)
    calls = max(1, int(0.05 / max(clock() - t0, 1e-6)))
    times, start = [], time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < min_time and len(times) < 15):
        t0 = clock()
        for _ in range(calls):
            fn()
        _sync(device)
        times.append((clock() - t0) / calls)
    return min(times)


def hpg_round_fn(d: int, r: int, device: torch.device, dtype: torch.dtype):
    """One HPG round (scores and mirror step of ``M`` models, ``R = r`` trials) as a closure."""
    gen = torch.Generator().manual_seed(d)
    tau, beta = 8.0, 8.0 / d
    basis, theta = _state(r, d, device, dtype, gen)
    q = torch.nn.functional.normalize(torch.randn(r, 1, d, generator=gen, dtype=dtype), dim=-1)
    qm = q.to(device)[:, None].expand(r, M, 1, d)
    c = (torch.randn(r, M, 1, generator=gen, dtype=dtype) * 0.1).to(device)

    return _hpg_round(basis, theta, qm, c, tau, beta)


def _hpg_round(basis, theta, qm, c, tau: float, beta: float):
    """The HPG round as the learner plays it: the basis coordinates ``q U`` computed once
    for the scores and the step, the new basis written into a buffer kept across rounds."""
    out = torch.empty_like(basis)

    def hpg_round():
        proj = basis_coordinates(basis, qm)
        quadratic_form(basis, theta, beta, qm, proj)
        mirror_step(basis, theta, theta != 0, qm, c, tau, beta, CAPACITY, proj, out)

    return hpg_round


def scaling(dims, trials, device: torch.device, dtype: torch.dtype, min_time: float) -> None:
    """Per-trial time of the HPG round at two trial counts, for each ``d``."""
    r1, r2 = trials
    for d in dims:
        t1 = _best_process_time(hpg_round_fn(d, r1, device, dtype), device, min_time)
        t2 = _best_process_time(hpg_round_fn(d, r2, device, dtype), device, min_time)
        print(
            f"d={d:5d} R={r1}: {t1 * 1e3 / r1:8.4f} ms/trial  R={r2}: {t2 * 1e3 / r2:8.4f} "
            f"ms/trial ({t2 * 1e3:9.3f} ms/round)",
            flush=True,
        )
        print(f"per_trial_ratio_d{d}: {(t2 / r2) / (t1 / r1):.3f}")


def _state(r: int, d: int, device, dtype, gen):
    basis = torch.linalg.qr(torch.randn(r, M, d, CAPACITY, generator=gen, dtype=dtype))[0]
    theta = torch.randn(r, M, CAPACITY, generator=gen, dtype=dtype) * 2
    return basis.contiguous().to(device), theta.to(device)


def bench(d: int, r: int, device: torch.device, dtype: torch.dtype, min_time: float):
    gen = torch.Generator().manual_seed(d)
    tau, beta = 8.0, 8.0 / d
    basis, theta = _state(r, d, device, dtype, gen)
    q = torch.nn.functional.normalize(torch.randn(r, 1, d, generator=gen, dtype=dtype), dim=-1)
    q = q.to(device)
    c = (torch.randn(r, M, 1, generator=gen, dtype=dtype) * 0.1).to(device)
    qm = q[:, None].expand(r, M, 1, d)
    hpg_round = _hpg_round(basis, theta, qm, c, tau, beta)

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
    parser.add_argument("--scaling", default=None, help="R1,R2: per-trial time at both")
    parser.add_argument("--dims", default=",".join(map(str, DIMS)), help="d values, comma list")
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    if args.scaling:
        dims = [int(v) for v in args.dims.split(",")]
        r1, r2 = (int(v) for v in args.scaling.split(","))
        print(f"device={device} threads={torch.get_num_threads()} M={M} capacity={CAPACITY}")
        scaling(dims, (r1, r2), device, dtype, args.min_time)
        return
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
