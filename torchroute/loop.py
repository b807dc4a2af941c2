"""The training-style loop: rounds instead of steps, metrics, logging, checkpoints, resume."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import torch
from torch import Tensor
from tqdm.auto import tqdm

from torchroute.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from torchroute.envs.base import Env
from torchroute.errors import NonFiniteError, OptionError
from torchroute.feedback_queue import PendingFeedback
from torchroute.functional.pacing import BudgetPacer
from torchroute.functional.random import TrialRNG, trial_keys
from torchroute.heartbeat import Heartbeat, show_bar
from torchroute.learners.base import Learner
from torchroute.metrics import RunningMetrics
from torchroute.tracking import NullTracker, Tracker
from torchroute.types import Context, Decision, Feedback

#: the share of a paced trial's first rounds left out of ``budget_overrun_after_warmup``
WARMUP_SHARE = 0.05

#: ``on_round(t, context, decision, feedback)``, called by :func:`simulate` after each
#: ``env.step`` (before ``learner.update``); it must not sync with the host per round.
RoundCallback = Callable[[int, Context, Decision, Feedback], None]


@dataclass
class SimulationResult:
    """The outcome of :func:`simulate`.

    Attributes:
        summary: one row per trial: the env's trial labels (e.g. ``rho, seed``),
            ``rounds``, then the env's result columns (e.g. ``avg_utility, avg_regret,
            accuracy, avg_cost``), then the per-round means of the metrics the learner's
            ``update`` returned (e.g. ``loss``) and the learner's ``result_columns()``
            (e.g. a static router's ``val_utility``).
        curve: one row per trial and logged round: ``trial``, the labels, ``round``,
            ``cum_<name>`` for each of the env's ``curve_keys`` (e.g. ``cum_regret``) and
            ``stat_<name>`` for each metric the learner's ``update`` returned, averaged over
            the logging interval (e.g. HPG's ``stat_rank``, NeuralUCB's ``stat_loss``).
    """

    summary: pd.DataFrame
    curve: pd.DataFrame


def check_compatible(learner: Learner, env: Env) -> None:
    """A one-line error when ``learner`` was built for another env (``R``, ``K``, ``d``), or
    when the env's requests carry their own trade-offs (``env.request_rhos``) and the
    learner cannot decide per request (:attr:`Learner.per_request_rho`)."""
    learner.check_problem(env.problem(), who=f"{type(env).__name__}")
    if env.request_rhos is not None and not learner.per_request_rho:
        raise OptionError(
            f"{type(learner).__name__} decides for each trial's own rho and cannot serve "
            f"requests that carry their own (env.request_rhos={list(env.request_rhos)}); "
            "use objective: quality_cost (LinUCB, LinTS, SquareCB and their forgetting "
            "forms), a static score router or a residual learner"
        )


def simulate(
    learner: Learner,
    env: Env,
    *,
    seed: int = 0,
    rng: Literal["shared", "per_trial"] = "shared",
    log_every: int = 100,
    ckpt_every: int | None = None,
    ckpt_path: str | Path | None = None,
    resume_from: str | Path | None = None,
    tracker: Tracker | None = None,
    config: dict[str, Any] | None = None,
    progress: bool = True,
    desc: str | None = None,
    on_round: RoundCallback | None = None,
    pacer: BudgetPacer | None = None,
) -> SimulationResult:
    """Run ``learner`` on ``env`` for ``env.horizon`` rounds.

    Per round: ``context -> learner.act -> env.step -> learner.update``, all batched over
    ``R`` trials with no host sync. With an env whose feedback comes late or for some
    requests only (``env.feedback_delay``, ``env.feedback_arrives``), the round's batch is
    kept pending (:class:`PendingFeedback`) and handed to ``learner.update`` in the round
    its feedback arrives; a trial whose decision is never rated is not updated by it.
    Every ``log_every`` rounds the running metrics are
    synced once, checked for NaN/inf together with the learner's state, recorded in the
    curves and sent to ``tracker``; every ``ckpt_every`` rounds (and at the end) a
    checkpoint is written atomically to ``ckpt_path``. ``resume_from`` continues a run
    from such a checkpoint; the result is bit-for-bit the same as an uninterrupted run on
    the same device.

    With ``rng="shared"`` every draw comes from one ``torch.Generator`` seeded with ``seed``
    (a trial's numbers then depend on the trials beside it); with ``rng="per_trial"`` each
    trial draws from its own stream (:class:`~torchroute.functional.random.TrialRNG`) keyed
    by its labels (``env.trials()``) and ``seed``: a trial's numbers are the same alone, in
    any set of trials and at any position, and trials with identical labels get identical
    numbers.

    Args:
        learner: the learner, already on ``env.device``.
        env: the environment.
        seed: seed of the run's generator (action draws, tie-breaks, env noise, updates).
        rng: ``"shared"`` (one generator) or ``"per_trial"`` (one stream per trial).
        log_every: logging interval in rounds.
        ckpt_every: checkpoint interval in rounds (``None``: only at the end).
        ckpt_path: checkpoint file; no checkpoints when ``None``.
        resume_from: checkpoint to continue from.
        tracker: receives metrics (means over trials) at each logging interval.
        config: stored in checkpoints and compared when resuming.
        progress: show a progress bar when stderr is a terminal; otherwise (or without it)
            a run longer than a few seconds prints a line now and then on stderr
            (:class:`~torchroute.heartbeat.Heartbeat`).
        desc: progress-bar label (also names the learner in errors).
        on_round: called with ``(t, context, decision, feedback)`` every round, after
            ``env.step`` and before ``learner.update`` (e.g. to log the decisions); the
            feedback is the round's, as it will arrive.
        pacer: a budget pacer of the ``R`` trials: every round its ``rho [R]`` becomes the
            context's ``Context.rho [R, B]`` before ``learner.act``, and the chosen arms'
            costs (the outcome's ``cost [R, B]``) update it after ``env.step``; the summary
            gains ``budget``, ``rho_final``, ``avg_cost_after_warmup`` (the mean cost after
            the first :data:`WARMUP_SHARE` of the rounds), ``budget_overrun`` and
            ``budget_overrun_after_warmup`` (realised mean cost / budget - 1).

    Returns:
        A :class:`SimulationResult`.

    Raises:
        NonFiniteError: the learner's state or the metrics became NaN/inf (the round and
            the learner are named).
    """
    if log_every < 1:
        raise ValueError(f"log_every must be >= 1, got {log_every}")
    if ckpt_every is not None and ckpt_every < 1:
        raise ValueError(f"ckpt_every must be >= 1 or None, got {ckpt_every}")
    check_compatible(learner, env)
    tracker = tracker or NullTracker()
    generator = _source(rng, env, seed)
    metrics = RunningMetrics(env.num_trials, env.device, env.curve_keys)
    name = desc or type(learner).__name__
    pending = PendingFeedback(env)
    paced = _Paced(pacer, env) if pacer is not None else None
    start = 0
    if resume_from is not None:
        start = _restore(resume_from, learner, env, generator, metrics, config, pending, paced)

    def checkpoint(t: int) -> None:
        if ckpt_path is not None:
            save_checkpoint(
                ckpt_path,
                {
                    "learner": learner.state_dict(),
                    "learner_class": type(learner).__name__,
                    "round": t,
                    **_source_state(generator),
                    "env": env.state_dict(),
                    "env_fingerprint": env.fingerprint(),
                    "metrics": metrics.state_dict(),
                    "config": config or {},
                    **pending.checkpoint_entry(),
                    **({} if paced is None else {"pacer": paced.state_dict()}),
                },
            )

    shown = show_bar(progress)
    bar = tqdm(total=env.horizon, initial=start, desc=desc, disable=not shown, leave=False)
    beat = None if shown else Heartbeat(desc or type(learner).__name__, env.horizon, "rounds")
    for t in range(start, env.horizon):
        context = env.context(t)
        if paced is not None:
            context = paced.context(context)
        decision = learner.act(context, generator)
        feedback, outcome = env.step(context, decision, generator)
        if paced is not None:
            paced.update(t, outcome["cost"])
        if on_round is not None:
            on_round(t, context, decision, feedback)
        stats = pending.update(learner, t, (context, decision, feedback), generator)
        metrics.add(outcome)
        if stats:
            metrics.add_learner_stats(stats)
        done = t + 1
        if done % log_every == 0 or done == env.horizon:
            _check_finite(learner, metrics, name, done)
            metrics.mark()
            columns = env.summarize(metrics.sums, metrics.rounds)
            means = {k: float(v.mean()) for k, v in columns.items() if v.ndim == 1}
            tracker.log({**means, "round": done}, step=done)
            if means:
                key = "avg_regret" if "avg_regret" in means else next(iter(means))
                bar.set_postfix({key: f"{means[key]:.4f}"}, refresh=False)
            bar.update(done - bar.n)
            if beat is not None:
                beat.update(done)
        if ckpt_every is not None and done % ckpt_every == 0 and done < env.horizon:
            checkpoint(done)
    bar.close()
    if beat is not None:
        beat.close()
    checkpoint(env.horizon)
    result = _result(env, metrics, learner)
    if paced is not None:
        columns = {name: values.cpu().numpy() for name, values in paced.columns().items()}
        result.summary.insert(len(env.trials().columns), "budget", columns.pop("budget"))
        for name, values in columns.items():
            result.summary[name] = values
    return result


class _Paced:
    """A pacer driven by the loop: the rho it puts in each context, the costs it records
    (all of them and those after the warm-up, ``[R]`` sums on the device; no host sync)."""

    def __init__(self, pacer: BudgetPacer, env: Env) -> None:
        self.pacer = pacer
        self.warmup = math.ceil(WARMUP_SHARE * env.horizon)  # rounds left out after
        self.late_spent = torch.zeros_like(pacer.spent)
        self.late_requests = 0

    def context(self, context: Context) -> Context:
        """``context`` with ``rho [R, B]``: the pacer's ``rho [R]`` for every request."""
        rho = self.pacer.rho.to(context.x.dtype)[:, None].expand(context.x.shape[:2])
        return replace(context, rho=rho)

    def update(self, t: int, cost: Tensor) -> None:
        """Record round ``t``'s chosen costs ``[R, B]``; the pacer takes its step."""
        self.pacer.update(cost)
        if t >= self.warmup:
            self.late_spent = self.late_spent + cost.to(self.late_spent.dtype).sum(-1)
            self.late_requests += cost.shape[-1]

    def columns(self) -> dict[str, Tensor]:
        """The summary's budget columns, each ``[R]``."""
        budget = self.pacer.budget
        late = self.late_spent / max(self.late_requests, 1)
        if not self.late_requests:
            late = torch.full_like(late, torch.nan)
        return {
            "budget": budget,
            "rho_final": self.pacer.rho,
            "avg_cost_after_warmup": late,
            "budget_overrun": self.pacer.mean_cost / budget - 1,
            "budget_overrun_after_warmup": late / budget - 1,
        }

    def state_dict(self) -> dict[str, Any]:
        """The pacer's state and the costs after the warm-up (checkpoints)."""
        return {
            **self.pacer.state_dict(),
            "late_spent": self.late_spent.clone(),
            "late_requests": self.late_requests,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`."""
        self.pacer.load_state_dict(state)
        self.late_spent = torch.as_tensor(state["late_spent"]).to(self.late_spent).clone()
        self.late_requests = int(state["late_requests"])


def _check_finite(learner: Learner, metrics: RunningMetrics, name: str, done: int) -> None:
    """One host sync: every floating tensor of the learner's state and the sums are finite."""
    flags = [_finite(t) for t in learner.state_dict().values() if _is_float(t) and t.numel()]
    flags.append(metrics.all_finite())
    if not bool(torch.stack([f.to(metrics.device) for f in flags]).all()):
        bad = sorted(
            key
            for key, t in learner.state_dict().items()
            if _is_float(t) and not bool(torch.isfinite(t).all())
        )
        where = f"its state {bad}" if bad else "the metrics (a NaN/inf reward or cost?)"
        raise NonFiniteError(
            f"learner {name!r}: non-finite values in {where} by round {done}; check the "
            "data and the hyper-parameters"
        )


def _finite(t: Tensor) -> Tensor:
    """Whether every element of a non-empty float tensor is finite, as a 0-d bool tensor.

    The smallest and largest element in one reduction (a NaN propagates into both, an
    infinity is one of them): one read of ``t`` and no ``t``-sized temporary, where
    ``isfinite(t).all()`` writes a bool copy first (a neural learner's replay is 100s of MB).
    """
    low, high = torch.aminmax(t)
    return torch.isfinite(low) & torch.isfinite(high)


def _is_float(t: Any) -> bool:
    return isinstance(t, Tensor) and t.is_floating_point()


def _source(rng: str, env: Env, seed: int) -> torch.Generator | TrialRNG:
    """The run's source of randomness: one generator, or one stream per trial."""
    if rng == "shared":
        return torch.Generator(device=env.device).manual_seed(seed)
    if rng == "per_trial":
        return TrialRNG(trial_keys(env.trials(), seed), device=env.device)
    raise ValueError(f"rng must be 'shared' or 'per_trial', got {rng!r}")


def _source_state(source: torch.Generator | TrialRNG) -> dict[str, Any]:
    if isinstance(source, TrialRNG):
        return {"rng": source.state_dict()}
    return {"generator": source.get_state()}


def _restore(path, learner, env, generator, metrics, config, pending, paced=None) -> int:
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
    if payload.get("env_fingerprint") != env.fingerprint():
        raise CheckpointError(
            f"checkpoint {path} was written for another environment (table, stream, rho or "
            "trial labels differ)"
        )
    done = payload.get("round")
    if not isinstance(done, int) or isinstance(done, bool) or not 0 <= done <= env.horizon:
        raise CheckpointError(
            f"checkpoint {path} has round {done!r}; expected an integer in 0..{env.horizon}"
        )
    per_trial = isinstance(generator, TrialRNG)
    if ("rng" if per_trial else "generator") not in payload:
        written = "shared" if per_trial else "per_trial"
        raise CheckpointError(f"checkpoint {path} was written with rng={written}; resume with it")
    try:
        learner.load_state_dict(payload["learner"])
        env.load_state_dict(payload["env"])
        if isinstance(generator, TrialRNG):
            generator.load_state_dict(payload["rng"])
        else:
            generator.set_state(payload["generator"])
        metrics.load_state_dict(payload["metrics"])
        pending.load_state_dict(payload.get("pending"))
        if paced is not None:
            if "pacer" not in payload:
                raise KeyError("no pacer state (written without budgets)")
            paced.load_state_dict(payload["pacer"])
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {path} does not fit this run: {exc}") from exc
    return done


def _result(env: Env, metrics: RunningMetrics, learner: Learner) -> SimulationResult:
    labels = env.trials().reset_index(drop=True)
    summary = labels.copy()
    summary["rounds"] = metrics.rounds
    columns = env.summarize(metrics.sums_cpu(), metrics.rounds)
    extra = {**metrics.learner_means(), **learner.result_columns()}
    for name, values in {**columns, **extra}.items():
        values = values.cpu()
        if values.ndim == 1:
            summary[name] = values.numpy()
        else:
            for j in range(values.shape[1]):
                summary[f"{name}_{j}"] = values[:, j].numpy()
    rounds, values = metrics.curve()  # [P, C, R]
    p, r = len(rounds), env.num_trials
    curve = pd.DataFrame({"trial": torch.arange(r).repeat(p).numpy()})
    for column in labels.columns:
        curve[column] = labels[column].to_numpy()[None].repeat(p, 0).reshape(-1)
    curve["round"] = torch.tensor(rounds, dtype=torch.long).repeat_interleave(r).numpy()
    for c, key in enumerate(env.curve_keys):
        curve[f"cum_{key}"] = values[:, c].reshape(-1).numpy()
    for key, trajectory in metrics.learner_trajectory().items():
        curve[f"stat_{key}"] = trajectory.reshape(-1).numpy()
    return SimulationResult(summary=summary, curve=curve)
