"""Throughput of the batched LinUCB against a per-trial numpy loop and the memory bandwidth.

Workload: ``K = 11`` arms, float32, one ``act`` and one bandit ``update`` per round for each
of ``R`` independent trials (``B = 1`` context per trial, feedback observed for the played
arm only), in two settings: ``d = 128, R = 210`` and ``d = 384, R = 32``. The unit is the
*trial-round*: one trial doing one act and one update.

Three figures per setting, measured in one run so that their ratios share the machine's
load at that moment:

1. **Batched torch.** :class:`torchroute.learners.LinUCB` on ``--device`` with
   ``torch.get_num_threads()`` as set by default. Contexts and rewards come from a pool of
   pre-generated rounds (linear rewards plus noise) so that data generation is not timed;
   building the ``Context``/``Feedback`` containers and the one-hot ``observed`` mask is.
   After a warm-up the rounds run in blocks of about 0.1 s (the device is synchronised at
   each block end) until at least 2 s have passed (``--rounds`` fixes the count instead).
   Reported: the median block rate, in trial-rounds per second.
2. **Numpy reference.** A straightforward per-trial Sherman–Morrison loop written here: for
   one trial at a time (state ``A_inv [K, d, d]``, ``theta [K, d]``, float32), for each
   round, for each arm ``theta_k^T x + alpha sqrt(x^T A_k^{-1} x)``, argmax, rank-one update
   of the played arm. One block is one trial played for a fixed number of rounds; blocks
   cycle over a few trials until the time budget is spent, and the median block rate is
   reported per trial-round. Its state fits in the last-level cache (0.7 MB at ``d = 128``,
   6.5 MB at ``d = 384``), so it runs cache-resident. An arm-vectorised variant (``A_inv @
   x`` for all arms in one call) is timed for information only.
3. **Bandwidth bound.** Every trial-round must read the ``K x d x d`` float32 inverse Gram
   matrices at least once (the widths need all of them), so the LinUCB traffic is at least
   ``trial-rounds/s x K x d x d x 4`` bytes per second. It is divided by the bandwidth of a
   large copy (a 1 GiB float32 tensor with ``Tensor.copy_``, median of a few copies, measured
   before and after the settings; the higher of the two is used, which can only lower the
   fraction), counted as read + write (2 GiB of traffic per copy), the STREAM "Copy"
   convention.

It ends with two lines for scripts: ``ratio_vs_numpy_d128`` (batched / numpy reference at
``d = 128``) and ``bandwidth_fraction_d384`` (figure 3 at ``d = 384``).

Choices in :mod:`torchroute.functional.ridge` and the bandit update of
:class:`torchroute.learners.RidgeLearner`, measured on a 2-core CPU (K = 11, B = 1,
R = 210 / d = 128 and R = 32 / d = 384, 2 threads, quiet machine):

- widths ``x^T A_k^{-1} x``: one ``bmm`` of ``[R, K*d, d] @ [R, d, B]`` runs at about 80% of
  a plain streaming sum over ``A_inv``; ``x^T A_k`` as a bmm over ``R*K`` batches is 1.4-2x
  slower, ``einsum`` 2-4x and ``(A * x).sum`` 6-10x;
- rank-one update: ``addcmul`` (the outer product broadcast, not materialised) is 3-5x
  faster than building the outer product and subtracting it, 1.4-5x faster than an
  out-of-place ``baddbmm``;
- the played arm's matrix: ``index_select`` gathers in half the time of advanced indexing
  (1.5 vs 3.0 ms at d = 128), and updating the gathered copy in place then writing it back
  with ``index_copy_`` takes 30-40% less time than an out-of-place update with ``index_put``.

Usage: ``python benchmarks/linucb_throughput.py [--device cuda] [--rounds N] [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from torchroute.learners import LinUCB
from torchroute.types import Context, Feedback

NUM_ARMS = 11
ALPHA = 1.0
LAM = 10.0
SETTINGS = ((128, 210, 16), (384, 32, 1))  # (d, R, trials per learner of the chunked path)
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
    args = parser.parse_args()
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
        "all R trials; fused = kernel='fused', all R trials or C trials per learner; numpy = "
        "per-trial, per-arm loop (the reference); np-vec = arms vectorised; A GB/s = tr/s x "
        "K d^2 x 4 bytes; bw frac = A GB/s / copy bandwidth"
    )
    best = f"fused C={SETTINGS[0][2]}" if fused else "eager"
    print(f"ratio_vs_numpy_vectorised_d128: {lines[128, best][1]:.3f}")
    print(f"ratio_vs_numpy_d128: {lines[128, best][0]:.3f}")
    print(f"bandwidth_fraction_d384: {lines[384, 'eager'][2]:.3f}")


if __name__ == "__main__":
    main()
