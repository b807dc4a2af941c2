"""One simulation run: every learner of the options on the built env, results written.

:func:`run` validates and builds everything (env, every learner) before the first file is
written, then runs each learner over this rank's trial pieces (:mod:`torchroute.run.shards`)
and writes the run folder (:mod:`torchroute.run.outdir`). A plain run (one process, no
``trial_chunk``) is a single piece: one :func:`~torchroute.loop.simulate` on the whole env
with the tracker attached live. Otherwise every piece runs with its own env, learner and
checkpoint; rank 0 gathers the pieces of every rank, merges them, replays the merged logs
into the tracker and writes ``runs/<learner>/``. A failure on any rank is raised on every
rank (no rank waits forever). With ``jobs > 1`` the learners run in that many worker
processes at once (:mod:`torchroute.run.jobs`), each as it would here; the parent then
checks each learner by building it for the first trial alone with its static fits skipped
(:func:`~torchroute.learners.fits.fits_skipped`), and only the worker fits it. A static
router is fitted once per process (:func:`~torchroute.learners.fits.fitted`): the residual
learners whose ``base`` is the run's own router config, and the pieces of a split run,
reuse its fit.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from torchroute.checkpoint import CheckpointError
from torchroute.envs.base import Env
from torchroute.errors import ConfigError
from torchroute.io import write_csv_atomic, write_text_atomic
from torchroute.learners.base import Learner
from torchroute.learners.fits import fits_skipped
from torchroute.loop import simulate
from torchroute.run.budgets import (
    PacingPlan,
    check_budget_learners,
    check_budgets,
    plan_all,
)
from torchroute.run.build import (
    Built,
    build,
    check_learner_options,
    instantiate_node,
    learner_for,
)
from torchroute.run.choose_on_validation import (
    CHOICE_FILE,
    Choice,
    all_candidates,
    choose_all,
    chosen_learner,
)
from torchroute.run.decision_logger import DecisionRecorder, write_decision_logs
from torchroute.run.jobs import map_in_processes, worker_threads
from torchroute.run.options import RunOptions
from torchroute.run.outdir import (
    check_out_dir,
    check_resume,
    check_run_folders,
    layout_mismatch,
    remove_stale_temp_files,
    reusable,
    write_inputs,
)
from torchroute.run.ranks import Distributed
from torchroute.run.shards import LogRecorder, Piece, layout, merge, merge_logs, plan
from torchroute.tracking import NullTracker, Tracker

log = logging.getLogger(__name__)


@dataclass
class Job:
    """What every learner of a run shares: the options, the ranks, the whole env, this
    rank's pieces, the trial layout and the learner that ``resume`` continues."""

    opts: RunOptions
    ranks: Distributed
    env: Env
    pieces: list[Piece]
    layout: dict[str, Any]
    resume_name: str | None = None
    plans: dict[str, PacingPlan] = field(default_factory=dict)
    #: the learners whose change options were chosen on validation, and their choices
    choices: dict[str, Choice] = field(default_factory=dict)

    @property
    def single(self) -> bool:
        """One process, one piece: the plain run."""
        return self.ranks.world_size == 1 and len(self.pieces) == 1

    def config(self, name: str) -> dict[str, Any]:
        """What the learner's checkpoints store and compare (with the layout when split)."""
        config = {**self.opts.fingerprint, "learner": name}
        return config if self.single else {**config, "layout": self.layout}

    def piece_env(self, piece: Piece) -> Env:
        """The env of ``piece`` (the whole env for the plain run)."""
        return self.env if self.single else self.env.select_trials(piece.index)

    def learner_env(self, name: str, piece: Piece) -> Env:
        """The env learner ``name`` runs ``piece`` on: with budgets, each trial at the
        starting rho of the learner's pacing plan, its budget in the problem
        (``Problem.budget``)."""
        env = self.piece_env(piece)
        plan = self.plans.get(name)
        if plan is None:
            return env
        mine = plan.select(piece.index)
        return env.with_rho(mine.rho, mine.budget)  # type: ignore[attr-defined]

    def learner(
        self, name: str, env: Env, piece: Piece, trials: Sequence[int] | None = None
    ) -> Learner:
        """Learner ``name`` for ``env`` (the env of ``piece``, or of the run's trials
        ``trials`` of it): with the values chosen on validation for its trials when its
        config gives lists of them."""
        choice = self.choices.get(name)
        if choice is None:
            return learner_for(self.opts, name, env)
        index = piece.index if trials is None else trials
        return chosen_learner(self.opts, name, env, choice, index)

    def tracker(self, name: str) -> Tracker:
        """The learner's tracker (``logger`` config; none when unset)."""
        opts = self.opts
        if opts.logger is None:
            return NullTracker()
        factory = instantiate_node(opts.logger, "logger", _partial_=True)
        return factory(name=name, group=opts.name, config={**opts.fingerprint, "learner": name})


def run(
    opts: RunOptions, built: Built | None = None, on_start: Callable[[], None] | None = None
) -> pd.DataFrame:
    """Run every learner of ``opts.run_learners``; write the run folder; the results frame.

    ``built``: the env already built for these options (``sweep`` builds it once per
    split); by default it is built here. ``on_start``: called once every check has passed
    and the run has written its inputs into ``out_dir`` (a run refused before never calls
    it, so a caller knows whether the folder now holds this run).

    Under ``torchrun`` (``WORLD_SIZE > 1``; needs ``rng=per_trial``) the process group is
    set up (gloo on the CPU, nccl on CUDA, one GPU per local rank), each rank runs a
    contiguous slice of the trials, and rank 0 gathers the results and alone writes files
    and logs; other ranks return the rows of their own trials. Chunks and ranks give the
    numbers of a single process.
    """
    ranks = Distributed.from_env()
    if ranks.world_size > 1 and opts.rng != "per_trial":
        raise ConfigError(
            f"torchrun (WORLD_SIZE={ranks.world_size}) shards the trials and needs "
            "rng=per_trial (with one shared generator a trial's numbers depend on the others)"
        )
    if ranks.world_size > 1 and opts.jobs > 1:
        raise ConfigError(
            f"jobs={opts.jobs} with torchrun (WORLD_SIZE={ranks.world_size}): torchrun splits "
            "the trials over its ranks, jobs the learners over processes; use one (jobs=1)"
        )
    device = ranks.device(opts.torch_device())
    if opts.jobs > 1 and device.type != "cpu":
        raise ConfigError(
            f"jobs={opts.jobs} runs learners in parallel CPU processes; on device={device} "
            "they run one after the other with the trials batched on the device: set jobs=1"
        )
    with ranks.group(device):
        return _run(opts, ranks, device, built, on_start)


def _run(
    opts: RunOptions,
    ranks: Distributed,
    device: Any,
    built: Built | None,
    on_start: Callable[[], None] | None,
) -> pd.DataFrame:
    check_learner_options(opts)  # before an oracle is pre-trained into out_dir
    check_budget_learners(opts)
    candidates = all_candidates(opts)  # list-valued change options, checked likewise

    def guard():
        check_run_folders(opts)
        check_out_dir(opts.out_dir, opts.digest(), opts.overwrite)
        remove_stale_temp_files(opts.out_dir)  # a folder of this configuration (or overwrite)
        return check_resume(opts)

    resume_name, resume_layout = ranks.on_rank0(guard)
    if built is None:
        built = ranks.rank0_first(lambda: build(opts, device))
    env = built.env
    if opts.log_decisions and not env.single_choice:
        raise ConfigError(
            "log_decisions=true needs an env that routes each decision to one arm "
            f"(Env.single_choice, e.g. env=single_choice or env=low_rank_experts); "
            f"{type(env).__name__} does not declare it (a decision log holds one arm per row, "
            "not a subset)"
        )
    try:
        pieces = plan(env.num_trials, opts.trial_chunk, ranks.world_size, ranks.rank)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    split = layout(env.num_trials, opts.trial_chunk, ranks.world_size)
    job = Job(opts, ranks, env, pieces, split, resume_name)
    if resume_name is not None and resume_layout != job.layout:
        raise CheckpointError(layout_mismatch(opts.resume, resume_layout, job.layout))
    try:
        first_env = job.piece_env(pieces[0])
    except NotImplementedError as exc:
        raise ConfigError(f"trial_chunk / torchrun: {exc}") from exc
    if opts.budgets is not None:  # each learner's pacing chosen on validation, first
        check_budgets(opts, built)
        log.info(
            "budgets %s: trials are budgets x seeds; the rhos %s do not enter the grid (each "
            "learner's pacer starts from the rho chosen on the validation split)",
            list(opts.budgets),
            list(opts.rhos),
        )
        job.plans = plan_all(opts, built)  # with jobs > 1: the workers' threads
    # change options given as lists: chosen on the validation split before anything is written
    job.choices = choose_all(opts, built, env, candidates) if candidates else {}
    learners: dict[str, Learner] = {}
    for name in opts.run_learners:  # each built (options checked) before anything is written
        learner_env = job.learner_env(name, pieces[0])  # with budgets: its starting rhos
        if opts.jobs == 1:
            learners[name] = job.learner(name, learner_env, pieces[0])
        else:  # the worker running it builds (and fits) it: checked here, not fitted
            one = learner_env
            if not _has_per_trial_values(opts.learners[name], learner_env.num_trials):
                one = _one_trial(learner_env)
            first = list(pieces[0].index)[:1] if one is not learner_env else None
            with fits_skipped():
                job.learner(name, one, pieces[0], first)  # freed before the next one is built
    ranks.barrier()  # every rank validated before rank 0 writes
    if ranks.is_main:
        write_inputs(opts, env.problem(), built.feature_map, job.layout)
        problem = first_env.problem()
        log.debug(
            "%s: %d trials x %d rounds, d=%d, K=%d",
            type(env).__name__,
            env.num_trials,
            env.horizon,
            problem.dim,
            env.num_arms,
        )
    if on_start is not None:
        on_start()
    # learners that resume finds done in out_dir by this configuration, then those run here
    finished: dict[str, tuple[pd.DataFrame, pd.DataFrame]] = {}
    for name in opts.run_learners if opts.resume else ():
        if name != resume_name:
            run_dir, digest = opts.out_dir / "runs" / name, opts.digest(name)
            found = ranks.on_rank0(lambda: reusable(run_dir, digest))  # noqa: B023
            if found is not None:
                finished[name] = found
                learners.pop(name, None)
    to_run = [name for name in opts.run_learners if name not in finished]
    if opts.jobs > 1 and len(to_run) > 1:
        finished.update(map_in_processes(run_learner, job, to_run, opts.jobs))
    else:  # (jobs > 1 with one learner left: run_learner builds it here, as a worker would)
        with worker_threads(opts.jobs, len(opts.run_learners)):
            for name in to_run:
                finished[name] = run_learner(job, name, learners.pop(name, None))
    summaries = [finished[name][0] for name in opts.run_learners]
    curves = [finished[name][1] for name in opts.run_learners]
    results = pd.concat(summaries, ignore_index=True)
    if ranks.is_main:
        write_csv_atomic(opts.out_dir / "results.csv", results)
        write_csv_atomic(opts.out_dir / "curves.csv", pd.concat(curves, ignore_index=True))
    return results


def _has_per_trial_values(node: Any, trials: int) -> bool:
    """Whether learner config ``node`` gives some hyper-parameter one value per trial (a
    list of ``trials > 1`` values, as a sweep's batched grid does): its options are then
    checked on every trial, not the first alone."""
    from omegaconf import ListConfig

    values = node.values() if hasattr(node, "values") else ()
    return trials > 1 and any(
        isinstance(v, (list, tuple, ListConfig)) and len(v) == trials for v in values
    )


def _one_trial(env: Env) -> Env:
    """The env of ``env``'s first trial, on which a parallel run checks its learners'
    options (``env`` itself when it cannot select trials)."""
    try:
        return env.select_trials([0])
    except NotImplementedError:
        return env


def run_learner(
    job: Job, name: str, learner: Learner | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run learner ``name`` on this rank's pieces (``learner``: already built for the first).

    Returns:
        ``(summary, curve)`` with a leading ``learner`` column: the whole run's on rank 0,
        this rank's trials elsewhere.
    """
    ranks = job.ranks
    started = time.perf_counter()
    tracker = job.tracker(name) if job.single else None
    local: list[tuple] = []
    error: Exception | None = None
    try:
        for i, piece in enumerate(job.pieces):
            local.append(_run_piece(job, name, piece, learner if i == 0 else None, tracker))
    except Exception as exc:
        if ranks.world_size == 1:
            raise
        error = exc
    gathered = ranks.gather(None if error else local)
    result = None
    if ranks.is_main and error is None and all(g is not None for g in gathered):
        try:
            result = _finish(job, name, [part for parts in gathered for part in parts], tracker)
        except Exception as exc:
            if ranks.world_size == 1:
                raise
            error = exc
    ranks.raise_any(error)
    if result is not None:
        log.info("%s", learner_line(name, result[0], time.perf_counter() - started))
    if result is None:  # another rank: its own trials
        result = merge([(p, s, c) for p, s, c, _ in local])
        for frame in result:
            frame.insert(0, "learner", name)
    return result


#: the fewest points a curve of a run gets: ``log_every`` shrinks to ``horizon // MIN_POINTS``
MIN_POINTS = 5


def logging_interval(log_every: int, horizon: int) -> int:
    """``log_every``, shrunk on a short run so that every curve has at least
    :data:`MIN_POINTS` points (``rounds=20`` with ``log_every=50`` logs every 4 rounds);
    a run of 5 * ``log_every`` rounds or more logs as asked."""
    return max(1, min(log_every, horizon // MIN_POINTS))


def learner_line(name: str, summary: pd.DataFrame, seconds: float) -> str:
    """The console's line for a finished learner: its trials, rounds, mean utility (or
    reward) and wall time, e.g. ``linucb: 15 trials x 1200 rounds, utility 0.702, 3.1 s``."""
    parts = [f"{name}: {len(summary)} trials"]
    if "rounds" in summary and len(summary):
        parts[0] += f" x {int(summary['rounds'].max())} rounds"
    for column in ("avg_utility", "avg_reward"):
        if column in summary and summary[column].notna().any():
            parts.append(f"{column.removeprefix('avg_')} {summary[column].mean():.3f}")
            break
    parts.append(f"{seconds:.1f} s")
    return ", ".join(parts)


def _run_piece(
    job: Job, name: str, piece: Piece, learner: Learner | None, tracker: Tracker | None
) -> tuple[Piece, pd.DataFrame, pd.DataFrame, tuple[int, list]]:
    opts = job.opts
    env = job.learner_env(name, piece)
    learner = learner if learner is not None else job.learner(name, env, piece)
    plan = job.plans.get(name)
    pacer = None
    if plan is not None:
        pacer = plan.select(piece.index).pacer(
            env.device, torch.float64, env.horizon, aim_left=True
        )
    recorder = tracker or LogRecorder()
    decisions = None
    if opts.log_decisions:
        decisions = DecisionRecorder(env, name, opts.log_contexts, first_trial=piece.start)
    result = simulate(
        learner,
        env,
        seed=opts.loop_seed,
        rng=opts.rng,
        log_every=logging_interval(opts.log_every, env.horizon),
        ckpt_every=opts.ckpt_every,
        ckpt_path=opts.out_dir / "checkpoints" / piece.checkpoint_name(name),
        resume_from=_resume_from(job, name, piece),
        tracker=recorder,
        config=job.config(name),
        progress=opts.progress,
        desc=piece.label(name),
        on_round=decisions,
        pacer=pacer,
    )
    if decisions is not None:  # one file per trial: decisions/<learner>/trial<global index>
        folder = opts.out_dir / "decisions" / name
        write_decision_logs(decisions.logs(), folder, start=piece.start)
    logs = recorder.logs if isinstance(recorder, LogRecorder) else []
    summary = result.summary
    if name in job.choices:  # chosen_<key> per trial, from the choice on validation
        summary = summary.assign(**job.choices[name].columns(piece.index))
    return piece, summary, result.curve, (len(piece.index), logs)


def _resume_from(job: Job, name: str, piece: Piece) -> Path | str | None:
    """The checkpoint a piece continues from: ``resume`` itself for the plain run, else
    the piece's own file beside it (a piece that never wrote one starts afresh)."""
    if name != job.resume_name:
        return None
    if job.single:
        return job.opts.resume
    path = Path(str(job.opts.resume)).parent / piece.checkpoint_name(name)
    return path if path.is_file() else None


def _finish(
    job: Job, name: str, parts: list[tuple], tracker: Tracker | None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rank 0: merge the pieces, log them, write ``runs/<name>/``."""
    if job.single:
        _, summary, curve, _ = parts[0]
    else:
        summary, curve = merge([(p, s, c) for p, s, c, _ in parts])
        tracker = job.tracker(name)
        for step, metrics in merge_logs([logs for *_, logs in parts]):
            tracker.log(metrics, step=step)
    summary.insert(0, "learner", name)
    curve.insert(0, "learner", name)
    tracker.log_table("results", summary)
    tracker.finish()
    run_dir = job.opts.out_dir / "runs" / name
    write_csv_atomic(run_dir / "summary.csv", summary)
    write_csv_atomic(run_dir / "curve.csv", curve)
    if name in job.choices:  # every candidate's validation utility per rho
        write_csv_atomic(run_dir / CHOICE_FILE, job.choices[name].table)
    digest = json.dumps({"config": job.opts.digest(name)}) + "\n"
    write_text_atomic(run_dir / "fingerprint.json", digest)
    return summary, curve


__all__ = ["Job", "run", "run_learner"]
