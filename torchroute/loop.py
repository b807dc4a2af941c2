"""The training-style loop: rounds instead of steps, metrics, logging, checkpoints, resume."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import Tensor
from tqdm.auto import tqdm

from torchroute.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from torchroute.envs.single_choice import SingleChoiceEnv
from torchroute.learners.base import Learner
from torchroute.metrics import RunningMetrics
from torchroute.tracking import NullTracker, Tracker


@dataclass
class SimulationResult:
    """The outcome of :func:`simulate`.

    Attributes:
        summary: per-trial metrics, columns ``rho, seed, rounds, avg_utility, avg_regret,
            accuracy, avg_cost`` (one row per trial).
        curve: cumulative regret per logged round, columns ``trial, rho, seed, round,
            cum_regret``.
    """

    summary: pd.DataFrame
    curve: pd.DataFrame


def _same_env(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], Tensor) else a[k] == b[k] for k in a
    )


def simulate(
    learner: Learner,
    env: SingleChoiceEnv,
    *,
    seed: int = 0,
    log_every: int = 100,
    ckpt_every: int | None = None,
    ckpt_path: str | Path | None = None,
    resume_from: str | Path | None = None,
    tracker: Tracker | None = None,
    config: dict[str, Any] | None = None,
    progress: bool = True,
    desc: str | None = None,
) -> SimulationResult:
    """Run ``learner`` on ``env`` for ``env.horizon`` rounds.

    Per round: ``context -> learner.act -> env.step -> learner.update``, all batched over
    ``R`` trials with no host sync. Every ``log_every`` rounds the running metrics are
    synced once, recorded in the regret curve and sent to ``tracker``; every
    ``ckpt_every`` rounds (and at the end) a checkpoint is written atomically to
    ``ckpt_path``. ``resume_from`` continues a run from such a checkpoint; the result is
    bit-for-bit the same as an uninterrupted run on the same device.

    Args:
        learner: the learner, already on ``env.device``.
        env: the environment.
        seed: seed of the run's generator (action draws and tie-breaks).
        log_every: logging interval in rounds.
        ckpt_every: checkpoint interval in rounds (``None``: only at the end).
        ckpt_path: checkpoint file; no checkpoints when ``None``.
        resume_from: checkpoint to continue from.
        tracker: receives metrics (means over trials) at each logging interval.
        config: stored in checkpoints and compared when resuming.
        progress: show a progress bar.
        desc: progress-bar label.

    Returns:
        A :class:`SimulationResult`.
    """
    if log_every < 1:
        raise ValueError(f"log_every must be >= 1, got {log_every}")
    if ckpt_every is not None and ckpt_every < 1:
        raise ValueError(f"ckpt_every must be >= 1 or None, got {ckpt_every}")
    tracker = tracker or NullTracker()
    device = env.device
    generator = torch.Generator(device=device).manual_seed(seed)
    metrics = RunningMetrics(env.num_trials, device)
    start = 0
    if resume_from is not None:
        start = _restore(resume_from, learner, env, generator, metrics, config)

    def checkpoint(t: int) -> None:
        if ckpt_path is not None:
            save_checkpoint(
                ckpt_path,
                {
                    "learner": learner.state_dict(),
                    "learner_class": type(learner).__name__,
                    "round": t,
                    "generator": generator.get_state(),
                    "env": env.state_dict(),
                    "metrics": metrics.state_dict(),
                    "config": config or {},
                },
            )

    full = learner.full_feedback or env.feedback == "full"
    bar = tqdm(total=env.horizon, initial=start, desc=desc, disable=not progress, leave=False)
    for t in range(start, env.horizon):
        context = env.context(t)
        decision = learner.act(context, generator)
        feedback, outcome = env.step(context, decision, full=full)
        learner.update(context, decision, feedback)
        metrics.add(outcome)
        done = t + 1
        if done % log_every == 0 or done == env.horizon:
            metrics.mark()
            means = {k: float(v.mean()) for k, v in metrics.summary().items()}
            tracker.log({**means, "round": done}, step=done)
            bar.set_postfix(regret=f"{means['avg_regret']:.4f}", refresh=False)
            bar.update(done - bar.n)
        if ckpt_every is not None and done % ckpt_every == 0 and done < env.horizon:
            checkpoint(done)
    bar.close()
    checkpoint(env.horizon)
    return _result(env, metrics)


def _restore(path, learner, env, generator, metrics, config) -> int:
    payload = load_checkpoint(path)
    if payload.get("config", {}) != (config or {}):
        raise CheckpointError(
            f"checkpoint {path} was written by another configuration; resume it with the "
            "configuration it was written with (see config.yaml next to the results)"
        )
    if payload.get("learner_class") != type(learner).__name__:
        raise CheckpointError(
            f"checkpoint {path} holds a {payload.get('learner_class')}, not a "
            f"{type(learner).__name__}"
        )
    if not _same_env(payload["env"], env.state_dict()):
        raise CheckpointError(f"checkpoint {path} was written for another table, stream or rho")
    try:
        learner.load_state_dict(payload["learner"])
    except RuntimeError as exc:
        raise CheckpointError(f"checkpoint {path} does not fit this learner: {exc}") from exc
    generator.set_state(payload["generator"])
    metrics.load_state_dict(payload["metrics"])
    return int(payload["round"])


def _result(env: SingleChoiceEnv, metrics: RunningMetrics) -> SimulationResult:
    rho = env.rho.double().cpu().numpy()
    seeds = env.seeds.cpu().numpy()
    summary = pd.DataFrame({"rho": rho, "seed": seeds, "rounds": metrics.rounds})
    for name, values in metrics.summary().items():
        summary[name] = values.numpy()
    rounds, values = metrics.curve()  # [P, R]
    p, r = values.shape
    curve = pd.DataFrame(
        {
            "trial": torch.arange(r).repeat(p).numpy(),
            "rho": rho[None].repeat(p, 0).reshape(-1),
            "seed": seeds[None].repeat(p, 0).reshape(-1),
            "round": torch.tensor(rounds, dtype=torch.long).repeat_interleave(r).numpy(),
            "cum_regret": values.reshape(-1).numpy(),
        }
    )
    return SimulationResult(summary=summary, curve=curve)
