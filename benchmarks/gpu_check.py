"""Check every learner config and env on a device against the CPU, its device discipline and
its throughput, in one unattended run (sized for under 5 minutes on one CUDA GPU).

1. **Same results as the CPU.** Every config of ``configs/learner/`` is built as the
   experiment runner builds it (``<Learner>.from_problem`` with the config's
   hyper-parameters; a small fixed :class:`~torchroute.models.MultiHeadOracle` stands in
   for a pre-trained oracle) on a small float64 problem of its protocol
   (:mod:`benchmarks.gpu_problems`: single-choice learners on a ``SingleChoiceEnv``, subset
   learners on a ``SubsetEnv``, the HPG family on ``LowRankExperts``; the rest of the envs
   through the extra cases of :data:`OVERRIDES`; ``--learner-dir`` adds the configs of
   another folder), and :func:`torchroute.loop.simulate` runs
   ``--rounds`` rounds once on the CPU and once on ``--device`` with the same seed. The
   summaries, the curves and the final learner states must agree within the tolerance of
   the case: :data:`DEFAULT_TOL` unless :data:`OVERRIDES` names another. The cases
   (:data:`CASES`) are found from the configs (:func:`find_cases`): a new learner config is
   checked without editing this file.

   *Randomness.* CPU and CUDA generators give different streams, so instead of comparing
   statistically the device run is fed the CPU run's random numbers: inside
   :class:`~benchmarks.cpu_randomness.CpuRandomness` every draw made on the device (action
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
   8th iteration off the CPU. Eigen-pairs (``basis``, ``theta``) are compared through the
   matrix ``U diag(theta) U^T`` they represent, since eigenvector signs and the order of
   equal eigenvalues are the solver's choice.

   *Coverage.* A learner class or an env exported by ``torchroute.learners`` /
   ``torchroute.envs`` that no case checks and no ``SKIPPED_*`` table names with its reason
   is a failure, so a new one cannot be skipped silently.
2. **Device discipline.** Every tensor of the device learner's ``state_dict()`` (extra
   state such as optimizer moments included) must be on the device after ``.to(device)``
   and after the rounds; only 0-d ``step`` counters of an optimizer state may stay on the
   host (torch keeps Adam's step count there by design).
3. **Throughput** on the device, trial-rounds per second (:mod:`benchmarks.gpu_throughput`):
   LinUCB (``d = 128, R = 4096, K = 11``), the graph program (``K = 11``, 4096 instances),
   HPG (``d = 768, M = 8``, ``R = 256``).

Any failure exits with status 1 after listing every failure. ``--device cpu`` is a dry run
(CPU against CPU through the same redirection of the random draws), used as a smoke test.
The CPU runs go ahead in ``--workers`` spawned processes (default: one per core but one,
at most 8) while the device runs in this one.

    .venv/bin/python benchmarks/gpu_check.py [--device cuda] [--rounds 300] [--only linucb]
"""

from __future__ import annotations

import argparse
import copy
import functools
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torchroute.envs
import torchroute.learners
from benchmarks import gpu_problems, gpu_throughput
from benchmarks.cpu_randomness import CpuRandomness
from torchroute.envs import Env
from torchroute.learners import Learner
from torchroute.loop import SimulationResult, simulate

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs" / "learner"


@dataclass(frozen=True)
class Tol:
    """``||device - cpu|| <= atol + rtol ||cpu||`` per tensor or summary column (2-norm)."""

    rtol: float
    atol: float


EXACT = Tol(1e-9, 1e-12)
NEURAL = Tol(1e-7, 1e-10)
SOLVER = Tol(1e-5, 1e-8)
IPS = Tol(1e-4, 1e-8)


@dataclass(frozen=True)
class Case:
    """One learner config on one small env, with the tolerance of the comparison."""

    config: str
    env: str
    tol: Tol
    directory: Path | None = None  # where <config>.yaml is; None: configs/learner/


#: the tolerance of a config without an override
DEFAULT_TOL = EXACT
#: per-case overrides: case name -> (config of configs/learner/, env of gpu_problems.ENVS,
#: tolerance). Every config of configs/learner/ is a case on the tiny env of its protocol
#: (:func:`protocol_env`) with :data:`DEFAULT_TOL` unless named here; extra cases (a config
#: on a second env) are named ``<config>@<env>``.
OVERRIDES: dict[str, Case] = {
    "cabs_c": Case("cabs_c", "single_choice", IPS),
    "cabs_c_neural": Case("cabs_c_neural", "single_choice", IPS),
    "cabs_d": Case("cabs_d", "single_choice", IPS),
    "cabs_d_neural": Case("cabs_d_neural", "single_choice", IPS),
    "linucb_full": Case("linucb_full", "single_choice_full", EXACT),
    "neural_ucb": Case("neural_ucb", "single_choice", NEURAL),
    "neural_ucb_full": Case("neural_ucb_full", "single_choice", NEURAL),
    "squarecb_neural": Case("squarecb_neural", "single_choice", NEURAL),
    "contextual_omd": Case("contextual_omd", "subset", SOLVER),
    "contextual_omd@table_subset": Case("contextual_omd", "table_subset", SOLVER),
    "omd_approachability": Case("omd_approachability", "subset", SOLVER),
    "hpg": Case("hpg", "low_rank_experts", SOLVER),
    "pf_hpg": Case("pf_hpg", "low_rank_experts", SOLVER),
}


def protocol_env(learner: type) -> str:
    """The gpu_problems env of a learner class's protocol (subset, policy, single choice)."""
    from torchroute.learners.policy_baselines import SoftmaxPolicy
    from torchroute.learners.subset_base import SubsetLearner

    if issubclass(learner, SubsetLearner):
        return "subset"
    if issubclass(learner, SoftmaxPolicy):
        return "low_rank_experts"
    return "single_choice"


def find_cases(config_dir: Path | None = None) -> dict[str, Case]:
    """Every config of ``config_dir`` (default configs/learner/) plus :data:`OVERRIDES`."""
    directory = CONFIG_DIR if config_dir is None else Path(config_dir)
    where = None if config_dir is None else directory
    found = {
        stem: Case(stem, protocol_env(_target_class(stem, where)), DEFAULT_TOL, where)
        for stem in sorted(p.stem for p in directory.glob("*.yaml"))
        if stem not in SKIPPED_CONFIGS
    }
    overrides = {
        n: Case(c.config, c.env, c.tol, where)
        for n, c in OVERRIDES.items()
        if (directory / f"{c.config}.yaml").is_file()
    }
    return {**found, **overrides}


#: configs of configs/learner/ not checked, with the reason (none at present)
SKIPPED_CONFIGS: dict[str, str] = {}
#: names of torchroute.learners.__all__ that no config targets, with the reason
SKIPPED_LEARNERS: dict[str, str] = {
    "Learner": "abstract base class",
    "RidgeLearner": "base class of the ridge learners (covered through them)",
    "SubsetLearner": "base class of the subset learners (covered through them)",
}


def env_coverage() -> dict[str, str]:
    """``{name in torchroute.envs.__all__: the gpu_problems env that covers it}``, found from
    the ``_target_`` of each env config (plus the bare ``SubsetEnv`` problem)."""
    return {"SubsetEnv": "subset", **{_env_name(stem): stem for stem in gpu_problems.find_envs()}}


def _env_name(stem: str) -> str:
    """The exported name an env config's ``_target_`` builds (its last dotted part)."""
    target = str(OmegaConf.load(gpu_problems.ENV_CONFIG_DIR / f"{stem}.yaml")["_target_"])
    return target.rsplit(".", 1)[-1]


SKIPPED_ENVS: dict[str, str] = {
    "Env": "abstract base class",
    "SubsetProblem": "the problem description of SubsetEnv, not an env",
    **{_env_name(stem): reason for stem, reason in gpu_problems.SKIPPED_ENV_CONFIGS.items()},
}


# ------------------------------------------------------------------------ coverage
def coverage_failures(config_stems: list[str] | None = None) -> list[str]:
    """One line per config, learner class or env that is neither checked nor skipped."""
    stems = config_stems if config_stems is not None else _config_stems()
    failures = []
    checked = {case.config for case in CASES.values()}
    for stem in sorted(set(stems) - checked - set(SKIPPED_CONFIGS)):
        failures.append(f"coverage: configs/learner/{stem}.yaml is neither in CASES nor skipped")
    for stem in sorted((checked | set(SKIPPED_CONFIGS)) - set(stems)):
        failures.append(f"coverage: CASES or SKIPPED_CONFIGS name {stem!r}, not a config")
    targets = {_target_class(stem).__name__ for stem in checked & set(stems)}
    for name in torchroute.learners.__all__:
        if name not in targets and name not in SKIPPED_LEARNERS:
            failures.append(f"coverage: learner {name} has no checked config and no skip reason")
    covered = env_coverage()
    for name in torchroute.envs.__all__:
        if name not in covered and name not in SKIPPED_ENVS:
            failures.append(f"coverage: env {name} is neither checked nor skipped")
    for case_name, case in CASES.items():
        if case.env not in gpu_problems.ENVS:
            failures.append(f"coverage: case {case_name} names an unknown env {case.env!r}")
    return failures


def _config_stems() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def _target_class(stem: str, directory: Path | None = None) -> type:
    target = str(OmegaConf.load((directory or CONFIG_DIR) / f"{stem}.yaml")["_target_"])
    return get_class(target.rsplit(".", 1)[0] if target.endswith(".from_problem") else target)


#: every case: each config of configs/learner/ and the overrides
CASES: dict[str, Case] = find_cases()


# --------------------------------------------------------------------- one case
def build_learner(config: str, env: Env, directory: Path | None = None) -> Learner:
    """The learner of ``configs/learner/<config>.yaml`` for ``env`` (on its device, float64).

    A config's ``oracle`` node (a pre-trained checkpoint) is replaced by
    :func:`gpu_problems.tiny_oracle`.
    """
    node = OmegaConf.load((directory or CONFIG_DIR) / f"{config}.yaml")
    extra: dict[str, Any] = {}
    problem = env.problem()
    if "oracle" in node:
        del node["oracle"]
        extra["oracle"] = gpu_problems.tiny_oracle(problem.arm_names)
    factory = instantiate(node, **extra)
    return factory(problem).to(device=env.device, dtype=torch.float64)


def flatten(state: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts / lists of a state dict -> ``{"a.b.0": leaf}``."""
    if isinstance(state, dict):
        items = state.items()
    elif isinstance(state, (list, tuple)):
        items = enumerate(state)
    else:
        return {prefix: state}
    out: dict[str, Any] = {}
    for key, value in items:
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def comparable_state(learner: Learner) -> dict[str, Any]:
    """The flattened CPU copy of ``learner.state_dict()``, eigen-pairs as matrices."""
    flat = {k: v.detach().cpu() if torch.is_tensor(v) else v for k, v in flatten(
        learner.state_dict()).items()}  # fmt: skip
    for key in [k for k in flat if k == "basis" or k.endswith(".basis")]:
        theta_key = key[: -len("basis")] + "theta"
        if theta_key in flat:
            basis, theta = flat.pop(key), flat.pop(theta_key)
            flat[key + "·diag(theta)·basisᵀ"] = (basis * theta[..., None, :]) @ basis.mT
    return flat


def placement_failures(learner: Learner, device: torch.device, when: str) -> list[str]:
    """State tensors of ``learner`` that are not on ``device``."""
    bad = []
    for key, value in flatten(learner.state_dict()).items():
        if not torch.is_tensor(value) or _same_device(value.device, device):
            continue
        if value.ndim == 0 and key.rsplit(".", 1)[-1] == "step":
            continue  # optimizer step counters live on the host by design
        bad.append(f"{key} on {value.device}")
    return [f"{when}: {', '.join(bad)}"] if bad else []


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def _close(a: Any, b: Any, tol: Tol) -> tuple[bool, float]:
    """``(a within tol of b, relative error)`` for tensors, arrays or plain values.

    Floating values: the non-finite entries must match exactly and the finite ones satisfy
    ``||a - b|| <= atol + rtol ||b||`` (2-norm over the whole tensor); the relative error is
    ``||a - b|| / ||b||`` (``||a - b||`` when ``b`` is 0). Other values must be equal (error
    0 or inf).
    """
    if torch.is_tensor(a) and torch.is_tensor(b):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False, float("inf")
        a, b = a.numpy(), b.numpy()
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if a.shape != b.shape:
            return False, float("inf")
        if a.dtype.kind not in "fc":
            equal = bool(np.array_equal(a, b))
            return equal, 0.0 if equal else float("inf")
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        finite = np.isfinite(b64)
        same_nonfinite = np.array_equal(a64[~finite], b64[~finite], equal_nan=True)
        if not same_nonfinite or not np.isfinite(a64[finite]).all():
            return False, float("inf")
        err = float(np.linalg.norm(a64[finite] - b64[finite]))
        ref = float(np.linalg.norm(b64[finite]))
        return err <= tol.atol + tol.rtol * ref, err / ref if ref > 0 else err
    equal = bool(a == b)
    return equal, 0.0 if equal else float("inf")


def compare_frames(what: str, a: pd.DataFrame, b: pd.DataFrame, tol: Tol) -> list[str]:
    """Columns of ``a`` (device) outside ``tol`` of ``b`` (CPU)."""
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return [f"{what}: columns or rows differ ({list(a.columns)} vs {list(b.columns)})"]
    bad = []
    for column in a.columns:
        ok, diff = _close(a[column].to_numpy(), b[column].to_numpy(), tol)
        if not ok:
            bad.append(f"{what}.{column} (rel err {diff:.3g})")
    return bad


def compare_states(a: dict[str, Any], b: dict[str, Any], tol: Tol) -> list[str]:
    """Entries of state ``a`` (device) outside ``tol`` of ``b`` (CPU)."""
    if a.keys() != b.keys():
        return [f"state keys differ: {sorted(set(a) ^ set(b))}"]
    bad = []
    for key in a:
        ok, diff = _close(a[key], b[key], tol)
        if not ok:
            bad.append(f"state.{key} (rel err {diff:.3g})")
    return bad


@dataclass
class CaseResult:
    """Failures of one case, the largest relative error seen, the draws fed from the CPU
    and the wall time."""

    failures: list[str]
    max_err: float
    draws: int
    seconds: float


def _run(learner: Learner, env: Env, seed: int, rounds: int) -> SimulationResult:
    return simulate(learner, env, seed=seed, log_every=max(rounds // 3, 1), progress=False)


_ENVS: dict[tuple[str, str, int], Env] = {}


def fresh_env(name: str, device: torch.device | str, rounds: int) -> Env:
    """A copy of env ``name`` of :data:`gpu_problems.ENVS` (each built once per process)."""
    key = (name, str(device), rounds)
    if key not in _ENVS:
        _ENVS[key] = gpu_problems.ENVS[name](str(device), rounds)
    return copy.deepcopy(_ENVS[key])


@dataclass
class Reference:
    """The CPU run of a case: summary, curve and comparable final state."""

    summary: pd.DataFrame
    curve: pd.DataFrame
    state: dict[str, Any]


def reference(name: str, rounds: int, seed: int, case: Case | None = None) -> Reference:
    """Run case ``name`` (``case``, default ``CASES[name]``) on the CPU (plain simulate)."""
    case = CASES[name] if case is None else case
    env = fresh_env(case.env, "cpu", rounds)
    torch.manual_seed(seed)
    learner = build_learner(case.config, env, case.directory)
    result = _run(learner, env, seed, rounds)
    return Reference(result.summary, result.curve, comparable_state(learner))


def check_case(
    name: str,
    device: torch.device,
    rounds: int,
    seed: int,
    ref: Reference | None = None,
    case: Case | None = None,
) -> CaseResult:
    """Run case ``name`` on ``device`` and compare it with its CPU run ``ref`` (run here
    when ``None``): results, final states, placement of the state."""
    t0 = time.perf_counter()
    case = CASES[name] if case is None else case
    ref = reference(name, rounds, seed, case) if ref is None else ref
    failures: list[str] = []
    dev_env = fresh_env(case.env, device, rounds)
    with CpuRandomness(device) as mode:
        torch.manual_seed(seed)
        dev = build_learner(case.config, dev_env, case.directory)
        failures += placement_failures(dev, device, "after .to(device)")
        dev_result = _run(dev, dev_env, seed, rounds)
    failures += placement_failures(dev, device, f"after {rounds} rounds")
    failures += compare_frames("summary", dev_result.summary, ref.summary, case.tol)
    failures += compare_frames("curve", dev_result.curve, ref.curve, case.tol)
    dev_state = comparable_state(dev)
    failures += compare_states(dev_state, ref.state, case.tol)
    diffs = [
        _close(dev_result.summary[c].to_numpy(), ref.summary[c].to_numpy(), case.tol)[1]
        for c in ref.summary.columns
        if c in dev_result.summary and pd.api.types.is_float_dtype(ref.summary[c])
    ]
    diffs += [_close(dev_state[k], ref.state[k], case.tol)[1] for k in ref.state.keys() & dev_state]
    finite = [d for d in diffs if np.isfinite(d)]
    seconds = time.perf_counter() - t0
    return CaseResult(failures, max(finite, default=0.0), mode.redirected, seconds)


def _init_worker() -> None:
    torch.set_num_threads(1)


# ------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (``argv`` or ``sys.argv[1:]``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rounds", type=int, default=300, help="rounds per case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--learner-dir",
        default=None,
        help="a folder of extra learner configs, each a case on the env of its protocol",
    )
    parser.add_argument("--only", nargs="*", default=None, help="case names (default: all)")
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
    """Run the checks; returns the exit status (0: all passed, 1: failures, 2: no device)."""
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"device {device} requested but torch.cuda.is_available() is False")
        return 2
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        return _main(args, device)
    finally:
        torch.set_num_threads(threads)


def _main(args: argparse.Namespace, device: torch.device) -> int:
    start = time.perf_counter()
    cases = {**CASES, **(find_cases(Path(args.learner_dir)) if args.learner_dir else {})}
    names = list(cases) if args.only is None else args.only
    failures = [f"unknown case {n!r}" for n in names if n not in cases]
    names = [n for n in names if n in cases]
    if args.only is None:
        failures += coverage_failures()
    workers = args.workers if args.workers is not None else min(8, (os.cpu_count() or 2) - 1)
    print(f"device={device} rounds={args.rounds} seed={args.seed} cases={len(names)}")
    print(f"CPU runs in {workers or 'no'} worker processes")
    pool = None
    refs: dict[str, Callable[[], Reference]] = {
        name: functools.partial(reference, name, args.rounds, args.seed, cases[name])
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
        try:
            result = check_case(name, device, args.rounds, args.seed, refs[name](), case)
        except Exception as exc:  # one broken case must not hide the others
            result = CaseResult([f"raised {type(exc).__name__}: {exc}"], float("nan"), 0, 0.0)
        status = "ok" if not result.failures else "FAIL"
        print(
            f"{name:28s} {case.env:18s} {case.tol.rtol:7.0e} {case.tol.atol:7.0e} "
            f"{result.max_err:9.2e} {result.draws:6d} {result.seconds:6.1f} {status}",
            flush=True,
        )
        failures += [f"{name}: {f}" for f in result.failures]
    if pool is not None:
        pool.shutdown()
    if not args.no_throughput:
        n = args.bench_rounds
        rates = {
            f"linucb_d{args.linucb_dim}_R{args.linucb_trials}_K11": gpu_throughput.linucb_rate(
                device, args.linucb_trials, args.linucb_dim, rounds=n
            ),
            f"graph_program_K11_n{args.graph_instances}": gpu_throughput.graph_program_rate(
                device, args.graph_instances, rounds=max(n // 3, 1)
            ),
            f"hpg_d{args.hpg_dim}_M8_R{args.hpg_trials}": gpu_throughput.hpg_rate(
                device, args.hpg_trials, args.hpg_dim, rounds=max(n // 2, 1)
            ),
        }
        for key, rate in rates.items():
            print(f"throughput {key}: {rate:,.0f} trial-rounds/s")
    print(f"total {time.perf_counter() - start:.1f} s")
    if failures:
        print(f"FAILURES ({len(failures)}):")
        for failure in failures:
            print(f"  {failure}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
