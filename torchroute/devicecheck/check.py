"""One case of the device check: its CPU run, its device run and their comparison."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from torchroute.devicecheck import problems
from torchroute.devicecheck.cases import CASES, Case, case_learner
from torchroute.devicecheck.compare import (
    close,
    comparable_state,
    compare_frames,
    compare_states,
    placement_failures,
)
from torchroute.devicecheck.randomness import CpuRandomness
from torchroute.envs import Env
from torchroute.errors import CaseTimeout
from torchroute.learners import Learner
from torchroute.loop import SimulationResult, simulate


@dataclass
class CaseResult:
    """Failures of one case, the largest relative error seen, the draws fed from the CPU,
    the wall time, and the trial-rounds per second of its device run (0 when it did not
    finish)."""

    failures: list[str]
    max_err: float
    draws: int
    seconds: float
    rate: float = 0.0


def _run(
    learner: Learner, env: Env, seed: int, rounds: int, seconds: float | None = None
) -> SimulationResult:
    """:func:`simulate` ``rounds`` rounds; with ``seconds``, :class:`CaseTimeout` once the
    run has taken longer (checked every round)."""
    on_round = None
    if seconds is not None:
        deadline = time.perf_counter() + seconds

        def on_round(t, context, decision, feedback) -> None:
            if time.perf_counter() > deadline:
                raise CaseTimeout(f"over its limit of {seconds:g} s at round {t} of {rounds}")

    log_every = max(rounds // 3, 1)
    return simulate(learner, env, seed=seed, log_every=log_every, progress=False, on_round=on_round)


_ENVS: dict[tuple[str, Path | None, str, int], Env] = {}


def fresh_env(
    name: str, device: torch.device | str, rounds: int, directory: Path | None = None
) -> Env:
    """A copy of env ``name`` (of :data:`problems.ENVS`, or the env config
    ``<directory>/<name>.yaml``), each built once per process."""
    key = (name, directory, str(device), rounds)
    if key not in _ENVS:
        if directory is None:
            _ENVS[key] = problems.ENVS[name](str(device), rounds)
        else:
            _ENVS[key] = problems.env_from_config(name, str(device), rounds, directory)
    return copy.deepcopy(_ENVS[key])


@dataclass
class Reference:
    """The CPU run of a case: summary, curve and comparable final state."""

    summary: pd.DataFrame
    curve: pd.DataFrame
    state: dict[str, Any]


def reference(
    name: str, rounds: int, seed: int, case: Case | None = None, seconds: float | None = None
) -> Reference:
    """Run case ``name`` (``case``, default ``CASES[name]``) on the CPU (plain simulate),
    within ``seconds`` (:class:`CaseTimeout` past them; ``None``: no limit)."""
    case = CASES[name] if case is None else case
    env = fresh_env(case.env, "cpu", rounds, case.env_directory)
    torch.manual_seed(seed)
    learner = case_learner(case.config, env, case.directory)
    result = _run(learner, env, seed, rounds, seconds)
    return Reference(result.summary, result.curve, comparable_state(learner))


def check_case(
    name: str,
    device: torch.device,
    rounds: int,
    seed: int,
    ref: Reference | None = None,
    case: Case | None = None,
    seconds: float | None = None,
) -> CaseResult:
    """Run case ``name`` on ``device`` and compare it with its CPU run ``ref`` (run here
    when ``None``): results, final states, placement of the state. ``seconds`` limits each
    run (:class:`CaseTimeout` past it; ``None``: no limit)."""
    t0 = time.perf_counter()
    case = CASES[name] if case is None else case
    ref = reference(name, rounds, seed, case, seconds) if ref is None else ref
    failures: list[str] = []
    dev_env = fresh_env(case.env, device, rounds, case.env_directory)
    with CpuRandomness(device) as mode:
        torch.manual_seed(seed)
        dev = case_learner(case.config, dev_env, case.directory)
        failures += placement_failures(dev, device, "after .to(device)")
        t_dev = time.perf_counter()
        dev_result = _run(dev, dev_env, seed, rounds, seconds)
        rate = dev_env.num_trials * rounds / max(time.perf_counter() - t_dev, 1e-9)
    failures += placement_failures(dev, device, f"after {rounds} rounds")
    failures += compare_frames("summary", dev_result.summary, ref.summary, case.tol)
    failures += compare_frames("curve", dev_result.curve, ref.curve, case.tol)
    dev_state = comparable_state(dev)
    failures += compare_states(dev_state, ref.state, case.tol)
    diffs = [
        close(dev_result.summary[c].to_numpy(), ref.summary[c].to_numpy(), case.tol)[1]
        for c in ref.summary.columns
        if c in dev_result.summary and pd.api.types.is_float_dtype(ref.summary[c])
    ]
    diffs += [close(dev_state[k], ref.state[k], case.tol)[1] for k in ref.state.keys() & dev_state]
    finite = [d for d in diffs if np.isfinite(d)]
    seconds = time.perf_counter() - t0
    return CaseResult(failures, max(finite, default=0.0), mode.redirected, seconds, rate)
