"""Throughput of the batched LinUCB against per-trial numpy loops and the memory bandwidth.

Workload: ``K = 11`` arms, float32, one ``act`` and one bandit ``update`` per round for each
of ``R`` independent trials (``B = 1`` context per trial, feedback observed for the played
arm only, ``alpha = 1, lam = 10``), in two settings: ``d = 128, R = 210`` and ``d = 384,
R = 32``. The unit is the *trial-round*: one trial doing one act and one update.

Figures per setting, each the median rate of its blocks; the players take turns (3 slices
of ``--seconds / 3`` each) so that every figure samples the machine's load over the same
stretch of time:

1. **LinUCB** (:class:`torchroute.learners.LinUCB` on ``--device``, ``torch.get_num_threads()``
   as set by default): ``eager`` (``kernel="torch"``, all ``R`` trials in one learner),
   ``fused`` (``kernel="fused"``, all ``R``), ``fused C=...`` (the trials split into learners
   of ``C`` trials; a block plays about 0.5 s of rounds on one learner after the other, so
   that one learner's state stays in cache, as the simulate loop's trial chunks do) and
   ``fp16 C=...`` (``kernel="fused_fp16"``, chunked alike). Contexts and rewards come from
   a pool of pre-generated rounds (linear rewards plus noise), so data generation is not
   timed; building the ``Context``/``Feedback`` containers and the one-hot ``observed``
   mask is. The fused kernels run on CPU tensors only (with ``--device cuda`` only
   ``eager`` runs).
2. **Numpy reference** (``numpy``): a straightforward per-trial Sherman–Morrison loop written
   here: for one trial at a time (state ``A_inv [K, d, d]``, ``theta [K, d]``, float32),
   for each round, for each arm ``theta_k^T x + alpha sqrt(x^T A_k^{-1} x)``, argmax,
   rank-one update of the played arm. One block is one fresh trial of 64 rounds. Its state
   is cache-resident (0.7 MB at ``d = 128``: in a core's L2; 6.5 MB at ``d = 384``).
   ``np-vec`` scores all arms with one ``A_inv @ x``.
3. **Bandwidth bound**: ``tr/s x K x d x d x 4`` bytes per second (one read of every
   ``A_k^{-1}`` a trial-round, what the eager path does) over the bandwidth of a large copy
   (a 1 GiB float32 ``Tensor.copy_``, median of a few, measured before and after the
   settings, the higher one used), counted as read + write, the STREAM "Copy" convention.
   The fused kernels read about half of each matrix (less for arms at their prior), so for
   them this is an equivalent, not the traffic.

The last lines are for scripts: ``ratio_vs_numpy_vectorised_d128`` and
``ratio_vs_numpy_d128`` (``fused C=16`` over ``np-vec`` and ``numpy`` at ``d = 128``;
``eager`` with ``--device cuda``), then ``bandwidth_fraction_d384`` (figure 3 of ``eager``
at ``d = 384``, as before the fused kernels).

How the fused path got there, measured on the 2-core CPU this was developed on (an AMD EPYC
VM, 1 MB L2 per core, 32 MB L3, shared with other jobs at a load of 2.5-4.5: figures move by
+-30% between runs, ratios within one interleaved run much less):

- Starting point (this script before the fused kernels, ``d = 128``): eager 7.3k
  trial-rounds/s = 0.50x numpy (14.7k), 0.26x np-vec (28.6k); ``d = 384``: 0.37x numpy.
- One kernel call per step (C++ through :mod:`ctypes`, ``torchroute/functional/
  ridge_kernel.cpp``): the eager path runs some 20 operators a round; in C++ the quadratic
  form as row dot products (reduction chains) took 17 us per trial at ``d = 128`` against
  6.8 us as axpy over column blocks, which also lets it read only the block upper triangle
  (11.5 vs 12.7 us for the whole matrix when L2-resident; 4 rows per pass beat 1 row per
  pass 51k to 42k trial-rounds/s end to end). The update's ``A x`` from the upper triangle
  (axpy plus a dot product per row) was slower, 4.5 vs 3.5 us (compute-bound), as was a
  4-row axpy there (4.2 vs 3.3 us): kept as one row per pass over the full matrix.
- Threads: OpenMP's static schedule over trials collapsed whenever another job held the
  second core (the barrier waits for a descheduled thread): chunks of 16 ran at 1.9-3.7k
  trial-rounds/s on 2 threads against 28-34k on 1 (eager torch alike: 3-4k vs 14-15k).
  The kernels therefore use their own pool in which the caller never waits for a worker
  that has not started an item: 56k with 2 threads vs 54k on 1 in the same run (no
  collapse; on this busy machine little gain either). The kernel is now a standard torch
  C++ extension split over ``at::parallel_for`` (torch's threads, no pool of its own);
  its quiet/loaded figures are in ``docs/performance.md``.
- Chunks (``d = 128``, ``fused``; ranges over runs): ``C = 16`` 39-48k, 24: 43k, 32: 47-59k,
  48: 45k, 64: 37k; all 210 trials in one learner: 24k (150 MB of state streams from memory).
  With the kernel as a torch extension (``at::parallel_for``) a separate choice run (every
  ``C`` of 4, 8, 12, 16, 24, 32 beside both numpy loops, 2 quiet and 2 loaded turns of 8 s,
  ratios over numpy / np-vec) put ``C = 16`` first in all four turns: quiet 4.52 / 2.31 and
  3.45 / 2.34, loaded 2.68 / 1.81 and 3.36 / 1.79, against ``C = 32`` 2.93 / 1.50, 2.02 /
  1.37, 2.32 / 1.57, 2.01 / 1.07 (the chunk's 11 MB of ``A^{-1}`` sits in the shared L3
  beside other jobs' data; 23 MB does not), and ``C = 8`` 3.27 / 1.68 quiet (the per-round
  Python costs more per trial). The goal figures use ``C = 16`` since.
  ``d = 384``: ``C = 1`` 5.0k, 2: 5.6k, 4: 8.1k, all 32: 3.9k (numpy 3.5k).
- Arms at their prior (the dual form with no observation): in this workload 50.5% of the
  (trial, arm) pairs are never played (an untried arm scores ``sqrt(0.1) |x| = 0.32``, below
  a good arm), and their width ``sqrt(c |x|^2)`` needs no read of ``A^{-1}``. Same run,
  ``C = 32``: 48.0k with the shortcut, 19.8k without (``C = 16`` without: 24.6k); numpy
  15.0k, np-vec 26.8k. The dual form for ``0 < n_k < d`` observations (widths from the
  observations, ``n_k d + n_k^2`` per arm instead of ``d^2 / 2``) was costed, not built: by
  round 400 here the arms' counts (141, 107, 77, 48, 21, ... per trial) make it 91k against
  113k multiply-adds a trial-round, for extra state ``[R, K, n, d]``.
- Float16 copy of ``lambda A^{-1}`` for the widths (``fused_fp16``): the quadratic form in
  isolation 6.5 vs 11.8 us at ``C = 16``, 7.2 vs 24.4 us at ``C = 32``, 45.6 vs 63.9 us at
  ``d = 384``; end to end at ``C = 32`` 55.1k vs 48.0k with the prior shortcut and 42.5k vs
  19.8k without. Its widths carry up to ``2^-11 |x|^T |A^{-1}| |x|`` of error in ``x^T A^{-1}
  x`` (tested), so near-tied arms may be ordered differently: opt-in.
- ``torch.compile`` of a pure act + update step on a chunk (``C = 32``, one thread, in-place
  updates of the played arm; not wired into the learner): 19-31k trial-rounds/s against
  11-12k for the same function eager and 14.4k for numpy, after 12 s of compilation cold
  (23.5 s under a heavier load; 4.5 s from inductor's cache), still reading whole matrices
  (with an out-of-place ``index_put`` instead: 4.4k). Building the fused kernel takes 3.8-4.0
  s once (later processes load the cached library in 10-25 ms); a
  ``torch.utils.cpp_extension.load_inline`` build of a one-line op took 48 s, hence ctypes
  at first (the kernel is now built once with ``torch.utils.cpp_extension.load`` and cached
  with a checksum).
  numba (a new dependency) was not tried.

Choices in :mod:`torchroute.functional.ridge` and the eager bandit update of
:class:`torchroute.learners.RidgeLearner`, measured earlier on a quiet 2-core CPU (K = 11,
B = 1, R = 210 / d = 128 and R = 32 / d = 384, 2 threads):

- widths ``x^T A_k^{-1} x``: one ``bmm`` of ``[R, K*d, d] @ [R, d, B]`` runs at about 80% of
  a plain streaming sum over ``A_inv``; ``x^T A_k`` as a bmm over ``R*K`` batches is 1.4-2x
  slower, ``einsum`` 2-4x and ``(A * x).sum`` 6-10x;
- rank-one update: ``addcmul`` (the outer product broadcast, not materialised) is 3-5x
  faster than building the outer product and subtracting it, 1.4-5x faster than an
  out-of-place ``baddbmm``;
- the played arm's matrix: ``index_select`` gathers in half the time of advanced indexing
  (1.5 vs 3.0 ms at d = 128), and updating the gathered copy in place then writing it back
  with ``index_copy_`` takes 30-40% less time than an out-of-place update with ``index_put``.

``--load``: the goal figures at ``d = 128, R = 210`` (``fused C=16`` and ``eager`` over
``numpy`` and ``np-vec``) in ``--reps`` repetitions (default 5), each a quiet turn and a
turn with :func:`cpu_load.cpu_hog` running (one busy process per core, stopped after the
turn), interleaved; prints the median ratios of each side with the load averages. Lines
``ratio_vs_numpy_d128_quiet``/``_loaded`` and ``ratio_vs_numpy_vectorised_d128_quiet``/
``_loaded``.

``--latency``: serving-like use, ``R = 1, B = 1, d = 384, K = 11``: the wall time of one
``act`` + ``update`` over ``--latency-rounds`` rounds (default 10,000), p50 and p99, for
``kernel="fused"``, ``kernel="torch"`` and the numpy per-trial loop, taking turns in blocks
of 500 rounds; the eager path plays ``--latency-eager-rounds`` (default 200) spread over the
same blocks, as it is some 100x slower there.

Usage: ``python benchmarks/linucb_throughput.py [--device cuda] [--seconds S] [--quick]
[--load] [--reps 5] [--latency] [--latency-rounds N] [--latency-eager-rounds N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_load import cpu_hog, load_average

from torchroute.learners import LinUCB
from torchroute.types import Context, Feedback

NUM_ARMS = 11
ALPHA = 1.0
LAM = 10.0
SETTINGS = ((128, 210, 16), (384, 32, 4))  # (d, R, C: trials per learner when chunked)
POOL_ROUNDS = 64  # pre-generated rounds, cycled


@dataclass
class Rate:
    """Median and spread of per-block rates (units per second)."""

    median: float
    low: float
    high: float
    blocks: int


def _rate(samples: list[float]) -> Rate:
    return Rate(statistics.median(samples), min(samples), max(samples), len(samples))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_pool(d: int, r: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Contexts ``[P, R, 1, d]`` (unit norm) and rewards ``[P, R, 1, K]`` of a linear model."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(POOL_ROUNDS, r, 1, d, generator=gen)
    x = x / x.norm(dim=-1, keepdim=True)
    w = torch.randn(r, NUM_ARMS, d, generator=gen) / d**0.5
    noise = 0.1 * torch.randn(POOL_ROUNDS, r, 1, NUM_ARMS, generator=gen)
    reward = (torch.einsum("prbd,rkd->prbk", x, w) + 0.5 + noise).clamp(0.0, 1.0)
    return x, reward


def torch_player(
    d: int,
    r: int,
    device: torch.device,
    kernel: str = "torch",
    chunk: int | None = None,
) -> Callable[[], tuple[float, int]]:
    """A block of :class:`LinUCB` rounds per call: returns ``(trial-rounds/s, rounds)``.

    ``chunk = C`` splits the ``R`` trials into learners of ``C`` trials each; a block plays
    its rounds on the first learner, then on the next, so that one learner's state stays in
    cache through the block. Blocks last about 0.1 s (0.5 s when chunked, so that each
    learner plays some 50-100 rounds in a row and its first, uncached round weighs little).
    """
    x_pool, reward_pool = (t.to(device) for t in make_pool(d, r))
    size = chunk or r
    chunks = []
    for start in range(0, r, size):
        stop = min(start + size, r)
        learner = LinUCB(stop - start, NUM_ARMS, d, alpha=ALPHA, lam=LAM, kernel=kernel)
        pools = (x_pool[:, start:stop].contiguous(), reward_pool[:, start:stop].contiguous())
        chunks.append((learner.to(device), *pools))
    gen = torch.Generator(device=device).manual_seed(0)
    step = 0

    def play(n: int) -> float:
        nonlocal step
        _sync(device)
        t0 = time.perf_counter()
        for learner, xs, rewards in chunks:
            for t in range(step, step + n):
                i = t % POOL_ROUNDS
                context = Context(xs[i])
                decision = learner.act(context, gen)
                observed = torch.nn.functional.one_hot(decision.action, NUM_ARMS).bool()
                feedback = Feedback(
                    reward=rewards[i] * observed, observed=observed, only_played=True
                )
                learner.update(context, decision, feedback)
        _sync(device)
        step += n
        return time.perf_counter() - t0

    play(5)  # warm-up: allocator, thread pool, kernels
    block = max(1, round((0.5 if len(chunks) > 1 else 0.1) / max(play(5) / 5, 1e-6)))

    def run() -> tuple[float, int]:
        return block * r / play(block), block

    return run


def numpy_player(d: int, r: int, vectorised: bool = False) -> Callable[[], tuple[float, int]]:
    """One trial of the numpy reference per call: returns ``(trial-rounds/s, rounds)``."""
    x_pool, reward_pool = make_pool(d, r)
    x = x_pool[:, :, 0].numpy()  # [P, R, d]
    reward = reward_pool[:, :, 0].numpy()  # [P, R, K]
    numpy_trial(x[:8, 0], reward[:8, 0], vectorised)  # warm-up
    trial = 0

    def run() -> tuple[float, int]:
        nonlocal trial
        t0 = time.perf_counter()
        numpy_trial(x[:, trial % r], reward[:, trial % r], vectorised)
        trial += 1
        return POOL_ROUNDS / (time.perf_counter() - t0), POOL_ROUNDS

    return run


def interleaved(
    players: dict[str, Callable[[], tuple[float, int]]], seconds: float, slices: int
) -> dict[str, tuple[Rate, int]]:
    """Each player's block rates over ``slices`` turns of ``seconds / slices`` each.

    The turns alternate between the players, so that every figure samples the machine's
    load over the same stretch of time. Returns the rate and the rounds timed per player.
    """
    samples: dict[str, list[float]] = {name: [] for name in players}
    rounds = dict.fromkeys(players, 0)
    for _ in range(slices):
        for name, run in players.items():
            start = time.perf_counter()
            while time.perf_counter() - start < seconds / slices or not samples[name]:
                rate, n = run()
                samples[name].append(rate)
                rounds[name] += n
    return {name: (_rate(samples[name]), rounds[name]) for name in players}


def numpy_trial(x: np.ndarray, reward: np.ndarray, vectorised: bool) -> np.ndarray:
    """One trial of LinUCB for ``T`` rounds: x ``[T, d]``, reward ``[T, K]`` -> arms ``[T]``.

    The reference loop: per round, per arm, score ``theta_k^T x + alpha sqrt(x^T A_k^{-1} x)``;
    argmax; Sherman–Morrison on the played arm. ``vectorised`` scores all arms with one
    ``A_inv @ x`` instead of the loop over arms.
    """
    k, d = reward.shape[1], x.shape[1]
    a_inv = np.broadcast_to(np.eye(d, dtype=np.float32) / LAM, (k, d, d)).copy()
    theta = np.zeros((k, d), dtype=np.float32)
    scores = np.empty(k, dtype=np.float32)
    arms = np.empty(x.shape[0], dtype=np.int64)
    for t in range(x.shape[0]):
        xt = x[t]
        if vectorised:
            ax_all = a_inv @ xt  # [K, d]
            scores = theta @ xt + ALPHA * np.sqrt(np.maximum((ax_all * xt).sum(1), 0.0))
        else:
            for arm in range(k):
                quad = float(xt @ (a_inv[arm] @ xt))
                scores[arm] = theta[arm] @ xt + ALPHA * np.sqrt(max(quad, 0.0))
        arm = int(np.argmax(scores))
        ax = a_inv[arm] @ xt
        denom = 1.0 + ax @ xt
        residual = reward[t, arm] - theta[arm] @ xt
        a_inv[arm] -= np.outer(ax / denom, ax)
        theta[arm] += (residual / denom) * ax
        arms[t] = arm
    return arms


def copy_bandwidth(device: torch.device, gib: float, repeats: int) -> float:
    """Bytes per second of ``dst.copy_(src)``, counting the read of src and the write of dst."""
    n = int(gib * 2**30) // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touch the pages once
    _sync(device)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        samples.append(2 * n * 4 / (time.perf_counter() - t0))  # read + write
    return statistics.median(samples)


def loaded_ratios(seconds: float, reps: int) -> None:
    """Quiet and loaded turns, interleaved: median ratios at ``d = 128, R = 210``."""
    d, r, chunk = SETTINGS[0]
    players = {
        "eager": torch_player(d, r, torch.device("cpu")),
        f"fused C={chunk}": torch_player(d, r, torch.device("cpu"), "fused", chunk),
        "numpy": numpy_player(d, r),
        "np-vec": numpy_player(d, r, vectorised=True),
    }
    ratios: dict[tuple[str, str, str], list[float]] = {}
    loads: dict[str, list[str]] = {"quiet": [], "loaded": []}
    for _ in range(reps):
        for mode in ("quiet", "loaded"):
            with cpu_hog() if mode == "loaded" else contextlib.nullcontext():
                figures = interleaved(players, seconds, 1)
                loads[mode].append(load_average())
            for name in ("eager", f"fused C={chunk}"):
                for ref in ("numpy", "np-vec"):
                    ratio = figures[name][0].median / figures[ref][0].median
                    ratios.setdefault((mode, name, ref), []).append(ratio)
    print(f"\nd = {d}, R = {r}: {reps} repetitions, quiet and loaded interleaved (median)")
    for mode in ("quiet", "loaded"):
        print(f"[{mode}] {loads[mode][0]} (first rep), {loads[mode][-1]} (last rep)")
        for (m, name, ref), values in ratios.items():
            if m == mode:
                runs = " ".join(f"{v:.2f}" for v in values)
                print(f"[{mode}] {name:>10} / {ref:<6}: {statistics.median(values):.2f}  ({runs})")
    best = f"fused C={chunk}"
    for mode in ("quiet", "loaded"):
        print(f"ratio_vs_numpy_d128_{mode}: {statistics.median(ratios[mode, best, 'numpy']):.3f}")
        vec = statistics.median(ratios[mode, best, "np-vec"])
        print(f"ratio_vs_numpy_vectorised_d128_{mode}: {vec:.3f}")


def latency(rounds: int, eager_rounds: int, d: int = 384, block: int = 500) -> None:
    """p50/p99 of one ``act`` + ``update`` at ``R = 1, B = 1`` against the numpy loop.

    ``fused`` and ``numpy`` play ``rounds`` rounds each in alternating blocks of ``block``;
    the eager path (two orders of magnitude slower on a busy machine) plays ``eager_rounds``
    spread evenly over the same blocks (0: not measured).
    """
    x_pool, reward_pool = make_pool(d, 1)
    times: dict[str, list[float]] = {"fused": [], "torch": [], "numpy": []}
    learners = {
        k: LinUCB(1, NUM_ARMS, d, alpha=ALPHA, lam=LAM, kernel=k) for k in ("fused", "torch")
    }
    gen = torch.Generator().manual_seed(0)
    xs = [Context(x_pool[i]) for i in range(POOL_ROUNDS)]
    x_np = x_pool[:, 0, 0].numpy()
    r_np = reward_pool[:, 0, 0].numpy()
    a_inv = np.broadcast_to(np.eye(d, dtype=np.float32) / LAM, (NUM_ARMS, d, d)).copy()
    theta = np.zeros((NUM_ARMS, d), dtype=np.float32)
    clock = time.perf_counter

    def torch_round(learner: LinUCB, t: int) -> float:
        i = t % POOL_ROUNDS
        t0 = clock()
        decision = learner.act(xs[i], gen)
        observed = torch.nn.functional.one_hot(decision.action, NUM_ARMS).bool()
        feedback = Feedback(reward=reward_pool[i] * observed, observed=observed, only_played=True)
        learner.update(xs[i], decision, feedback)
        return clock() - t0

    def numpy_round(t: int) -> float:
        i = t % POOL_ROUNDS
        t0 = clock()
        xt = x_np[i]
        scores = np.empty(NUM_ARMS, dtype=np.float32)
        for arm in range(NUM_ARMS):
            quad = float(xt @ (a_inv[arm] @ xt))
            scores[arm] = theta[arm] @ xt + ALPHA * np.sqrt(max(quad, 0.0))
        arm = int(np.argmax(scores))
        ax = a_inv[arm] @ xt
        denom = 1.0 + ax @ xt
        residual = r_np[i, arm] - theta[arm] @ xt
        a_inv[arm] -= np.outer(ax / denom, ax)
        theta[arm] += (residual / denom) * ax
        return clock() - t0

    for t in range(20):  # warm-up
        torch_round(learners["fused"], t), torch_round(learners["torch"], t), numpy_round(t)
    blocks = max(1, -(-rounds // block))
    for i, start in enumerate(range(0, rounds, block)):
        n = min(block, rounds - start)
        n_eager = eager_rounds * (i + 1) // blocks - eager_rounds * i // blocks
        for name, count in (("fused", n), ("torch", n_eager), ("numpy", n)):
            for t in range(start, start + count):
                dt = numpy_round(t) if name == "numpy" else torch_round(learners[name], t)
                times[name].append(dt)
    print(
        f"\nper-decision latency, R = 1, B = 1, d = {d}, K = {NUM_ARMS}: {rounds} rounds "
        f"(eager: {eager_rounds})"
    )
    print(load_average())
    p = {}
    for name, values in times.items():
        if not values:
            continue
        q = np.percentile(np.asarray(values) * 1e6, [50, 99])
        p[name] = q
        print(f"{name:>6}: p50 {q[0]:8.1f} us  p99 {q[1]:8.1f} us")
    print(f"latency_p50_fused_over_numpy: {p['fused'][0] / p['numpy'][0]:.3f}")
    print(f"latency_p99_fused_over_numpy: {p['fused'][1] / p['numpy'][1]:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="time per figure and setting (default 3; 0.6 with --quick)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="short smoke run (0.6 s per figure, 256 MiB copy); figures are noisier",
    )
    parser.add_argument("--load", action="store_true", help="quiet vs loaded ratios, d = 128")
    parser.add_argument("--reps", type=int, default=5, help="--load repetitions")
    parser.add_argument("--latency", action="store_true", help="R = 1 per-decision latency")
    parser.add_argument("--latency-rounds", type=int, default=10_000)
    parser.add_argument(
        "--latency-eager-rounds", type=int, default=200, help="eager rounds in --latency (0: none)"
    )
    args = parser.parse_args()
    if args.load or args.latency:
        print(f"torch {torch.__version__}, torch.get_num_threads() = {torch.get_num_threads()}")
        if args.load:
            loaded_ratios(args.seconds or 2.0, args.reps)
        if args.latency:
            latency(args.latency_rounds, args.latency_eager_rounds)
        return
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but torch.cuda.is_available() is False")
    seconds = args.seconds or (0.6 if args.quick else 3.0)
    gib, repeats = (0.25, 3) if args.quick else (1.0, 5)
    fused = device.type == "cpu"  # the fused kernel runs on CPU tensors only

    print(
        f"torch {torch.__version__}, device {device}, torch.get_num_threads() = "
        f"{torch.get_num_threads()}, numpy {np.__version__}, K = {NUM_ARMS}, float32"
    )
    bandwidth = copy_bandwidth(device, gib, repeats)
    results = {}
    for d, r, chunk in SETTINGS:
        players = {"eager": torch_player(d, r, device)}
        if fused:
            players["fused"] = torch_player(d, r, device, "fused")
            players[f"fused C={chunk}"] = torch_player(d, r, device, "fused", chunk)
            players[f"fp16 C={chunk}"] = torch_player(d, r, device, "fused_fp16", chunk)
        players["numpy"] = numpy_player(d, r)
        players["np-vec"] = numpy_player(d, r, vectorised=True)
        results[d, r] = interleaved(players, seconds, 3)
    bandwidth = max(bandwidth, copy_bandwidth(device, gib, repeats))  # the less disturbed

    print(
        f"\ncopy bandwidth (read + write, 1 large copy): {bandwidth / 1e9:.2f} GB/s "
        f"(before/after the settings: median of the better)"
    )
    header = (
        f"{'d':>4} {'R':>4} {'learner':>12} | {'tr/s':>8} {'[min..max]':>17} {'ms/round':>8} "
        f"{'rounds':>6} | {'/numpy':>6} {'/np-vec':>7} | {'A GB/s':>7} {'bw frac':>7}"
    )
    print(header)
    print("-" * len(header))
    lines = {}
    for (d, r), figures in results.items():
        np_rate, np_vec = figures["numpy"][0].median, figures["np-vec"][0].median
        for name, (rate, timed) in figures.items():
            gbs = rate.median * NUM_ARMS * d * d * 4
            lines[d, name] = (rate.median / np_rate, rate.median / np_vec, gbs / bandwidth)
            spread = f"[{rate.low:.0f}..{rate.high:.0f}]"
            print(
                f"{d:>4} {r:>4} {name:>12} | {rate.median:>8.0f} {spread:>17} "
                f"{1e3 * r / rate.median:>8.2f} {timed:>6} | {lines[d, name][0]:>6.2f} "
                f"{lines[d, name][1]:>7.2f} | {gbs / 1e9:>7.2f} {lines[d, name][2]:>7.3f}"
            )
    print(
        "tr/s = trial-rounds per second (median of blocks); eager = LinUCB(kernel='torch') on "
        "all R trials; fused = kernel='fused' on all R trials, or on learners of C trials; "
        "fp16 = kernel='fused_fp16', C trials per learner; numpy = per-trial, per-arm loop "
        "(the reference); np-vec = arms vectorised; A GB/s = tr/s x K d^2 x 4 bytes (the "
        "fused kernels read about half of it, less for arms at their prior); bw frac = A GB/s "
        "/ copy bandwidth"
    )
    best = f"fused C={SETTINGS[0][2]}" if fused else "eager"
    print(f"ratio_vs_numpy_vectorised_d128: {lines[128, best][1]:.3f}")
    print(f"ratio_vs_numpy_d128: {lines[128, best][0]:.3f}")
    print(f"bandwidth_fraction_d384: {lines[384, 'eager'][2]:.3f}")


if __name__ == "__main__":
    main()
