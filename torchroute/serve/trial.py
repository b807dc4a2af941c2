"""The serve API: trials of a run opened as live routers, everything checked before anything
is written.

``torchroute serve`` (one trial) and ``torchroute gateway`` (one trial per rho) open their
routers alike, in two steps:

1. :func:`plan_trial` checks one trial and its state (the learner, rho and seed, the state
   path, ``--fresh`` over an existing state); it writes nothing.
2. :func:`open_trials` loads every trial's router but its state (the checkpoint, the
   learner, the feature map, the encoder: each trial is loadable), then takes each state's lock
   (:class:`~torchroute.serve.state_lock.StateLock`), then discards the states
   ``--overwrite-state`` names, then opens the states. A refusal in any step before the
   last leaves every state as it was, and a refused start creates no folder.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torchroute.serve.from_run as from_run
from torchroute.errors import ServeArgsError as ServeArgsError
from torchroute.run.folder import RunFolder
from torchroute.serve.log import LogError, RouterLog, log_path
from torchroute.serve.request_rho import check_pacable
from torchroute.serve.router import Router
from torchroute.serve.state_lock import StateLock


@dataclass(frozen=True)
class RouterOptions:
    """How a live router keeps its requests and state (the flags of the same names).

    Raises:
        ServeArgsError: a value out of range, naming its flag.
    """

    max_pending: int = 100_000
    pending_ttl: float | None = None
    checkpoint_every: int = 1000
    propensity_draws: int = 200
    explore: float = 0.0

    def __post_init__(self) -> None:
        for flag, value in (
            ("--max-pending", self.max_pending),
            ("--checkpoint-every", self.checkpoint_every),
            ("--propensity-draws", self.propensity_draws),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ServeArgsError(f"{flag} must be an integer >= 1, got {value}")
        if self.pending_ttl is not None and not (
            self.pending_ttl > 0 and math.isfinite(self.pending_ttl)
        ):
            raise ServeArgsError(
                f"--pending-ttl must be a number of seconds > 0, got {self.pending_ttl}"
            )
        if not 0 <= self.explore <= 1:
            raise ServeArgsError(f"--explore must be a probability in [0, 1], got {self.explore}")


@dataclass(frozen=True)
class TrialPlan:
    """One trial checked for serving (:func:`plan_trial`); nothing written yet.

    Attributes:
        folder: the run, opened once.
        learner, rho, seed, trial: the trial (``trial``: its index in the run's grid).
        state_path: the router's state file (its log is ``<state>.sqlite``).
        fresh: start from a fresh learner (``--fresh``, or a state started fresh).
        discard: the state files :func:`open_trials` deletes (``--overwrite-state``).
        state_flag: the flag that chose ``state_path``, for messages.
    """

    folder: RunFolder
    learner: str
    rho: float
    seed: int
    trial: int
    state_path: Path
    fresh: bool = False
    discard: tuple[Path, ...] = field(default=())
    state_flag: str = "--state"


def state_files(state_path: Path) -> list[Path]:
    """The state file, its decision log and the log's WAL companions that exist."""
    log = log_path(state_path)
    candidates = [
        state_path,
        log,
        log.with_name(log.name + "-wal"),
        log.with_name(log.name + "-shm"),
    ]
    return [p for p in candidates if p.exists()]


def check_writable(folder: Path, flag: str) -> None:
    """``folder`` exists and is writable, or can be made (checked, nothing created)."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        why = f"{existing} is a file"
    elif not os.access(existing, os.W_OK | os.X_OK):
        why = f"{existing} is not writable"
    else:
        return
    raise ServeArgsError(
        f"cannot write the router's state to {folder} ({why}); expected {flag} in a writable folder"
    )


def trial_state(
    folder: RunFolder,
    learner: str | None,
    rho: float | None,
    seed: int | None,
    state_path: str | Path | None,
    *,
    rho_flag: str = "--rho",
    state_flag: str = "--state",
) -> tuple[str, float, int, int, Path]:
    """``(learner, rho, seed, trial, state path)`` of a trial of ``folder``, checked: the
    learner, rho and seed are the run's, the state path is no folder. Reads only."""
    name = folder.learner_name(learner, "--learner")
    if rho is not None and float(rho) not in folder.options.rhos:
        raise ServeArgsError(f"{rho_flag} {rho:g} is not in the run's rhos {folder.options.rhos}")
    rho, seed, trial = folder.trial_of(rho, seed, flags=True)
    state = folder.state_path(name, rho, seed) if state_path is None else Path(state_path)
    if state.is_dir():
        example = f" path such as {state / 'router.pt'}" if state_flag == "--state" else ""
        raise ServeArgsError(f"{state_flag}: {state} is a folder; expected a file{example}")
    return name, rho, seed, trial, state


def plan_trial(
    folder: RunFolder,
    learner: str | None = None,
    rho: float | None = None,
    seed: int | None = None,
    *,
    state_path: str | Path | None = None,
    fresh: bool = False,
    overwrite_state: bool = False,
    rho_flag: str = "--rho",
    state_flag: str = "--state",
) -> TrialPlan:
    """Check one trial of ``folder`` for serving; nothing is written or deleted.

    Args:
        folder: the run, opened once.
        learner: the learner's name in the run (default: its only one).
        rho: the trial's rho (default: the run's first).
        seed: the trial's seed (default: the run's first).
        state_path: the router's state file (default: ``serve/<learner>_rho<rho>_seed<seed>
            .pt`` in the run).
        fresh: a fresh learner, not the run's checkpoint.
        overwrite_state: with ``fresh``, discard an existing state when the trials open.
        rho_flag: the flag that gave ``rho``, for messages.
        state_flag: the flag that gave the state's path, for messages.

    Raises:
        ServeArgsError, ConfigError, CheckpointError: the first problem found.
    """
    if overwrite_state and not fresh:
        raise ServeArgsError("--overwrite-state only goes with --fresh")
    name, rho, seed, trial, state = trial_state(
        folder, learner, rho, seed, state_path, rho_flag=rho_flag, state_flag=state_flag
    )
    check_writable(state.parent, state_flag)
    existing = state_files(state)
    if fresh and existing and not overwrite_state:
        raise ServeArgsError(
            f"--fresh but {existing[0]} exists (the router's state and decision log); add "
            "--overwrite-state to discard them, or drop --fresh to resume"
        )
    if not fresh and log_path(state).is_file():  # resuming: started fresh or from the run?
        fresh = _origin(log_path(state)) == "fresh"
    discard = tuple(existing) if overwrite_state else ()
    return TrialPlan(folder, name, rho, seed, trial, state, fresh, discard, state_flag)


def check_checkpoint(plan: TrialPlan) -> None:
    """The run's checkpoint holding the trial (its shard plan), read once and checked
    against the run's configuration (nothing read for a fresh learner)."""
    if not plan.fresh:
        plan.folder.checkpoint(plan.learner, plan.trial)


@dataclass
class OpenTrials:
    """The routers :func:`open_trials` opened, in the order of their plans, and the locks
    on their states (held until :meth:`close`)."""

    routers: list[Router]
    locks: list[StateLock]

    def close(self) -> None:
        """Checkpoint and close every router, then release the locks."""
        try:
            for router in self.routers:
                router.close()
        finally:
            for lock in self.locks:
                lock.release()


def open_trials(
    plans: Sequence[TrialPlan],
    options: RouterOptions,
    *,
    encoder: bool = True,
    paced: str | None = None,
) -> OpenTrials:
    """The routers of ``plans``, opened in the order that deletes nothing before every
    check has passed: every router is loaded (but its state), every state locked, then the
    states of ``plan.discard`` are deleted and the states opened. The trials share the
    first one's text encoder (``encoder=False``: embeddings only). ``paced``: what asks a
    spend pacer to set the rho of the first router's requests (``"--budget"``, for
    messages), so its learner must take each request's rho (checked once it is loaded,
    before any state is touched); ``None``: no pacer.

    Raises:
        ServeArgsError: ``paced`` for a learner that cannot take each request's rho.
        StateInUse: another process serves one of the states.
        ConfigError, CheckpointError: a trial that does not load (nothing written).
    """
    parts = []
    for i, plan in enumerate(plans):
        part = from_run.load_parts(
            plan.folder,
            plan.learner,
            plan.rho,
            plan.seed,
            fresh=plan.fresh,
            encoder=encoder and i == 0,
        )
        if i > 0:
            part.encode = parts[0].encode
        elif paced is not None:
            try:
                check_pacable(part.learner, plan.rho, paced)
            except ValueError as exc:
                raise ServeArgsError(str(exc)) from None
        parts.append(part)
    opened = OpenTrials([], [])
    try:
        for plan in plans:
            opened.locks.append(StateLock(plan.state_path, plan.state_flag))
        for plan in plans:
            for path in plan.discard:
                path.unlink(missing_ok=True)
        for plan, part in zip(plans, parts):
            router = part.build(plan.state_path)
            opened.routers.append(router)
            router.configure(**asdict(options))
            if plan.fresh:
                router.log.set_info("origin", "fresh")
    except BaseException:
        for router in opened.routers:
            router.close()
        for lock in opened.locks:
            lock.release(undo=True)
        raise
    return opened


def _origin(path: Path) -> str | None:
    try:
        log = RouterLog.read(path)
    except LogError as exc:
        raise ServeArgsError(str(exc)) from None
    try:
        return log.info().get("origin")
    finally:
        log.close()
