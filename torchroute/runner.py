"""One learner of an experiment run over this rank's trial pieces, merged and written by rank 0.

A plain run (one process, no ``trial_chunk``) is a single piece: one :func:`simulate` on
the whole env with the tracker attached live, as always. Otherwise every piece (a chunk of
a torchrun shard, see :mod:`torchroute.pieces`) runs with its own env, learner and
checkpoint; rank 0 gathers the pieces of every rank, merges them into the run's summary
and curve, replays the merged logs into the tracker and writes ``runs/<learner>/``. A
failure on any rank is raised on every rank (no rank waits forever).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig

from torchroute.distributed import Distributed
from torchroute.envs.base import Env
from torchroute.io import write_csv_atomic, write_text_atomic
from torchroute.learners.base import Learner
from torchroute.loop import simulate
from torchroute.pieces import LogRecorder, Piece, merge, merge_logs
from torchroute.tracking import Tracker


@dataclass
class Job:
    """What every learner of a run shares.

    Attributes:
        cfg: the composed configuration.
        ranks: this process's rank and the world size.
        env: the whole run's env (every trial).
        pieces: the pieces this rank runs (:func:`torchroute.pieces.plan`).
        numbers: the configuration fingerprint (checkpoints compare it).
        layout: how the trials are split (:func:`torchroute.pieces.layout`).
        digest: ``(learner) -> fingerprint digest`` of a learner's results.
        build: ``(learner name, env) -> learner`` for that env's trials.
        tracker: ``(learner name) -> tracker`` (rank 0).
        resume_name: the learner whose checkpoint ``cfg.resume`` continues.
    """

    cfg: DictConfig
    ranks: Distributed
    env: Env
    pieces: list[Piece]
    numbers: dict[str, Any]
    layout: dict[str, Any]
    digest: Callable[[str], str]
    build: Callable[[str, Env], Learner]
    tracker: Callable[[str], Tracker]
    resume_name: str | None = None

    @property
    def single(self) -> bool:
        """One process, one piece: the plain run."""
        return self.ranks.world_size == 1 and len(self.pieces) == 1

    @property
    def out_dir(self) -> Path:
        return Path(str(self.cfg.out_dir))

    def config(self, name: str) -> dict[str, Any]:
        """What the learner's checkpoints store and compare (with the layout when split)."""
        config = {**self.numbers, "learner": name}
        return config if self.single else {**config, "layout": self.layout}

    def piece_env(self, piece: Piece) -> Env:
        """The env of ``piece`` (the whole env for the plain run)."""
        return self.env if self.single else self.env.select_trials(piece.index)


def run_learner(
    job: Job, name: str, learner: Learner | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run learner ``name`` on this rank's pieces (``learner``: already built for the first).

    Returns:
        ``(summary, curve)`` with a leading ``learner`` column: the whole run's on rank 0,
        this rank's trials elsewhere.
    """
    ranks = job.ranks
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
    if result is None:  # another rank: its own trials
        result = merge([(p, s, c) for p, s, c, _ in local])
        for frame in result:
            frame.insert(0, "learner", name)
    return result


def _run_piece(
    job: Job, name: str, piece: Piece, learner: Learner | None, tracker: Tracker | None
) -> tuple[Piece, pd.DataFrame, pd.DataFrame, tuple[int, list]]:
    cfg = job.cfg
    env = job.piece_env(piece)
    learner = learner if learner is not None else job.build(name, env)
    recorder = tracker or LogRecorder()
    result = simulate(
        learner,
        env,
        seed=int(cfg.get("loop_seed", 0)),
        rng=str(cfg.get("rng", "shared")),
        log_every=int(cfg.log_every),
        ckpt_every=cfg.get("ckpt_every"),
        ckpt_path=job.out_dir / "checkpoints" / piece.checkpoint_name(name),
        resume_from=_resume_from(job, name, piece),
        tracker=recorder,
        config=job.config(name),
        progress=bool(cfg.progress),
        desc=piece.label(name),
    )
    logs = recorder.logs if isinstance(recorder, LogRecorder) else []
    return piece, result.summary, result.curve, (len(piece.index), logs)


def _resume_from(job: Job, name: str, piece: Piece) -> Path | str | None:
    """The checkpoint a piece continues from: ``cfg.resume`` itself for the plain run, else
    the piece's own file beside it (a piece that never wrote one starts afresh)."""
    if name != job.resume_name:
        return None
    if job.single:
        return job.cfg.resume
    path = Path(str(job.cfg.resume)).parent / piece.checkpoint_name(name)
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
    run_dir = job.out_dir / "runs" / name
    write_csv_atomic(run_dir / "summary.csv", summary)
    write_csv_atomic(run_dir / "curve.csv", curve)
    digest = json.dumps({"config": job.digest(name)}) + "\n"
    write_text_atomic(run_dir / "fingerprint.json", digest)
    return summary, curve


__all__ = ["Job", "run_learner"]
