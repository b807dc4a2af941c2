"""Check every learner config and env on a device against the CPU, its device discipline and
its throughput, in one unattended run (sized for under 5 minutes on one CUDA GPU).

1. **Same results as the CPU.** Every config of ``configs/learner/`` is built as the
   experiment runner builds it (``<Learner>.from_problem`` with the config's
   hyper-parameters; a small fixed :class:`~torchroute.models.MultiHeadOracle` stands in
   for a pre-trained oracle) on a small float64 problem of its protocol
   (:mod:`torchroute.devicecheck.problems`: single-choice learners on a ``SingleChoiceEnv``,
   subset learners on a ``SubsetEnv``, the HPG family on ``LowRankExperts``; the rest of the
   envs through ``EXTRA_CASES``; ``--config-dir`` adds the learner and env
   configs of an extra config folder, ``--learner-dir`` those of a folder of learner
   configs), and :func:`torchroute.loop.simulate` runs
   ``--rounds`` rounds once on the CPU and once on ``--device`` with the same seed. The
   summaries, the curves and the final learner states must agree within the tolerance of
   the case: the one the learner class declares (``Learner.device_tolerance``). The cases
   are found from the configs (:func:`torchroute.devicecheck.cases.find_cases`): a new
   learner config is checked without editing the check; an env config that no case runs
   on is checked with the ``random`` learner (``random_subset`` on a subset env), and
   ``--only <learner>@<env>`` pairs any learner config with any env.

   *Randomness.* CPU and CUDA generators give different streams, so instead of comparing
   statistically the device run is fed the CPU run's random numbers: inside
   :class:`~torchroute.devicecheck.randomness.CpuRandomness` every draw made on the device (action
   sampling, tie-breaks, Thompson and Gumbel noise, replay mini-batches, env noise, the
   env's end-of-run Monte Carlo) runs on a CPU twin of its generator and is copied to the
   device. Both runs then follow the same trajectory and differ only by floating-point
   rounding, so tight tolerances fit and a real device bug (a wrong code path, a lost
   update, a host round trip that changes a value) shows up as an O(1) difference. (A
   rounding difference ``delta`` in a probability flips a sampled arm with probability
   about ``K delta`` per draw, negligible over the few thousand draws of a case. Exact ties,
   such as the untried arms of LinUCB or Beta(1, 1) posteriors, break alike on both devices
   as long as identical states give bitwise identical scores, as batched kernels do.)

   *Tolerances* (per tensor of the state and per summary or curve column, 2-norm:
   ``||device - cpu|| <= atol + rtol ||cpu||``): ``EXACT`` for closed-form updates,
   ``NEURAL`` for MLPs trained with Adam (reductions summed in another order compound over
   the steps), ``SOLVER`` for iterative solvers (projections, eigen-updates) and the OMD
   learners, whose importance-weighted gradients ``r / q`` amplify a relative perturbation
   of ``1e-13`` of the initial state to ``6e-8`` in 300 rounds, and ``IPS`` for CABS, whose
   targets divide by probabilities (floored at ``1e-3``) of the graph program, an
   interior-point method that stops at its tolerance and tests its stopping rule every
   8th iteration off the CPU. Eigen-pairs (``basis`` with ``theta`` or ``lam``) are
   compared through the matrix ``U diag(theta) U^T`` they represent, since eigenvector
   signs and the order of equal eigenvalues are the solver's choice.

   *Coverage.* A learner class or an env exported by ``torchroute.learners`` /
   ``torchroute.envs`` that no case checks and no ``SKIPPED_*`` table names with its reason
   is a failure, so a new one cannot be skipped silently.
2. **Device discipline.** Every tensor of the device learner's ``state_dict()`` (extra
   state such as optimizer moments included) must be on the device after ``.to(device)``
   and after the rounds; only 0-d ``step`` counters of an optimizer state may stay on the
   host (torch keeps Adam's step count there by design).
3. **Throughput** on the device, trial-rounds per second
   (:mod:`torchroute.devicecheck.throughput`):
   LinUCB (``d = 128, R = 4096, K = 11``), the graph program (``K = 11``, 4096 instances),
   HPG (``d = 768, M = 8``, ``R = 256``).

Each run of a case (its CPU run, its device run) stops with a failure once it takes longer
than ``--per-case-seconds`` (default 120 s), so no case holds up the others; a failing
case prints its reasons right under its own line (and, with the line of the package that
raised, when a run raised). Any failure exits with status 1 after listing every failure
again. ``--json PATH`` writes the rows (each case with its largest relative error, time and
the trial-rounds per second of its device run; the throughput figures) and rewrites them
after every case (:mod:`torchroute.devicecheck.report`). ``--device cpu`` is a dry run
(CPU against CPU through the same redirection of the random draws), used as a smoke test.
The CPU runs go ahead in ``--workers`` spawned processes (default: one per core but one,
at most 8) while the device runs in this one.

    python -m torchroute.devicecheck [--device cuda] [--rounds 300] [--only linucb]
        [--per-case-seconds 120] [--json devicecheck.json]
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import re
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from torchroute.devicecheck import throughput
from torchroute.devicecheck.cases import CASES, coverage_failures, find_cases, pair_case
from torchroute.devicecheck.check import CaseResult, Reference, check_case, reference
from torchroute.devicecheck.report import Report


def _init_worker() -> None:
    torch.set_num_threads(1)


def _raised(where: str, exc: BaseException, t0: float) -> CaseResult:
    """A case whose run raised: the exception and the line of the package it came from."""
    text = "".join(traceback.format_exception(exc))  # a worker's traceback is the cause
    frames = re.findall(r'File "([^"]*torchroute[^"]*)", line (\d+)', text)
    at = f" at {Path(frames[-1][0]).name}:{frames[-1][1]}" if frames else ""
    reason = f"{where} raised {type(exc).__name__}{at}: {exc}"
    return CaseResult([reason], float("nan"), 0, time.perf_counter() - t0)


# ------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (``argv`` or ``sys.argv[1:]``)."""
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rounds", type=int, default=300, help="rounds per case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--config-dir",
        action="append",
        default=None,
        metavar="DIR",
        help="an extra config folder (learner/, env/): its configs are cases too; repeatable",
    )
    parser.add_argument(
        "--learner-dir",
        default=None,
        help="a folder of extra learner configs, each a case on the env of its protocol",
    )
    parser.add_argument("--only", nargs="*", default=None, help="case names (default: all)")
    parser.add_argument(
        "--per-case-seconds",
        type=float,
        default=120.0,
        help="time limit of each run of a case (its CPU run, its device run); 0: none",
    )
    parser.add_argument(
        "--json", default=None, metavar="PATH", help="write the rows (cases, throughput) here"
    )
    parser.add_argument("--linucb-trials", type=int, default=4096)
    parser.add_argument("--linucb-dim", type=int, default=128)
    parser.add_argument("--graph-instances", type=int, default=4096)
    parser.add_argument("--hpg-trials", type=int, default=256)
    parser.add_argument("--hpg-dim", type=int, default=768)
    parser.add_argument("--bench-rounds", type=int, default=10, help="rounds per timed block")
    parser.add_argument("--no-throughput", action="store_true")
    parser.add_argument(
        "--workers", type=int, default=None, help="processes for the CPU runs (0: inline)"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads (small problems: 1 is fastest)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the checks; returns the exit status (0: all passed, 1: failures, 2: no device, a
    bad option, or a config folder that is missing or holds a config of the same name as
    another)."""
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"device {device} requested but torch.cuda.is_available() is False")
        return 2
    if args.rounds < 1 or args.per_case_seconds < 0:
        print("error: --rounds must be >= 1 and --per-case-seconds >= 0")
        return 2
    if args.json is not None and not Path(args.json).resolve().parent.is_dir():
        print(f"error: --json {args.json}: its folder does not exist")
        return 2
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        return _main(args, device)
    finally:
        torch.set_num_threads(threads)


def _main(args: argparse.Namespace, device: torch.device) -> int:
    start = time.perf_counter()
    extra, learner_dirs = args.config_dir or [], [args.learner_dir] if args.learner_dir else []
    try:
        cases = find_cases(extra, learner_dirs) if extra or learner_dirs else dict(CASES)
        names = list(cases) if args.only is None else args.only
        for name in names:
            if name not in cases and (pair := pair_case(name, cases, extra, learner_dirs)):
                cases[name] = pair
    except ValueError as exc:  # a missing or clashing config folder
        print(f"error: {exc}")
        return 2
    failures = [f"unknown case {n!r}" for n in names if n not in cases]
    names = [n for n in names if n in cases]
    if args.only is None:
        failures += coverage_failures()
    workers = args.workers if args.workers is not None else min(8, (os.cpu_count() or 2) - 1)
    print(f"device={device} rounds={args.rounds} seed={args.seed} cases={len(names)}")
    print(f"CPU runs in {workers or 'no'} worker processes")
    pool = None
    limit = args.per_case_seconds or None
    report = Report(args.json, device, args.rounds, args.seed)
    refs: dict[str, Callable[[], Reference]] = {
        name: functools.partial(reference, name, args.rounds, args.seed, cases[name], limit)
        for name in names
    }
    if workers > 0:  # the CPU runs go ahead in other processes while the device runs here
        spawn = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(workers, mp_context=spawn, initializer=_init_worker)
        refs = {name: pool.submit(job).result for name, job in refs.items()}
    head = f"{'case':28s} {'env':18s} {'rtol':>7s} {'atol':>7s} {'rel err':>9s} {'draws':>6s}"
    print(f"{head} {'s':>6s}")
    for name in names:
        case = cases[name]
        t0 = time.perf_counter()
        try:
            ref = refs[name]()
        except Exception as exc:  # one broken case must not hide the others
            result = _raised("its CPU run", exc, t0)
        else:
            try:
                result = check_case(name, device, args.rounds, args.seed, ref, case, limit)
            except Exception as exc:
                result = _raised(f"its {device} run", exc, t0)
        status = "ok" if not result.failures else "FAIL"
        print(
            f"{name:28s} {case.env:18s} {case.tol.rtol:7.0e} {case.tol.atol:7.0e} "
            f"{result.max_err:9.2e} {result.draws:6d} {result.seconds:6.1f} {status}",
            flush=True,
        )
        for failure in result.failures:  # the reasons now, not only in the final list
            print(f"    {name}: {failure}", flush=True)
        failures += [f"{name}: {f}" for f in result.failures]
        report.case(name, case, result)
    if pool is not None:
        pool.shutdown(cancel_futures=True)
    if not args.no_throughput:
        n = args.bench_rounds
        rates = {
            f"linucb_d{args.linucb_dim}_R{args.linucb_trials}_K11": throughput.linucb_rate(
                device, args.linucb_trials, args.linucb_dim, rounds=n
            ),
            f"graph_program_K11_n{args.graph_instances}": throughput.graph_program_rate(
                device, args.graph_instances, rounds=max(n // 3, 1)
            ),
            f"hpg_d{args.hpg_dim}_M8_R{args.hpg_trials}": throughput.hpg_rate(
                device, args.hpg_trials, args.hpg_dim, rounds=max(n // 2, 1)
            ),
        }
        for key, rate in rates.items():
            print(f"throughput {key}: {rate:,.0f} trial-rounds/s")
            report.throughput(key, rate)
    print(f"total {time.perf_counter() - start:.1f} s")
    report.finish(time.perf_counter() - start, failures)
    if args.json is not None:
        print(f"rows written to {args.json}")
    if failures:
        print(f"FAILURES ({len(failures)}):")
        for failure in failures:
            print(f"  {failure}")
        return 1
    print("all checks passed")
    return 0
