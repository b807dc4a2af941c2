"""Trial pieces: a run's trials split into torchrun shards and chunks, and merged back.

Rank ``r`` of ``W`` runs the contiguous trials ``[r R / W, (r + 1) R / W)``, at most
``trial_chunk`` at a time; each piece has its own env (``Env.select_trials``), learner and
checkpoint. With per-trial random streams a piece's numbers are those its trials have in
the whole run, so merging the pieces' results (global trial numbering, the curve rows in
round-major order) reproduces a single-process run exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from torchroute.errors import OptionError


@dataclass(frozen=True)
class Piece:
    """Trials ``start .. stop - 1`` of the run, chunk ``chunk`` of rank ``rank``.

    Attributes:
        start, stop: the global trial range.
        rank, world_size: the rank that runs it, and how many there are.
        chunk, chunks: its index among its rank's chunks, and how many the rank has.
    """

    start: int
    stop: int
    rank: int = 0
    world_size: int = 1
    chunk: int = 0
    chunks: int = 1

    @property
    def index(self) -> list[int]:
        """The global trial positions ``[stop - start]``."""
        return list(range(self.start, self.stop))

    def checkpoint_name(self, learner: str) -> str:
        """``<learner>[.rank<r>of<W>][.chunk<c>].pt``."""
        name = learner
        if self.world_size > 1:
            name += f".rank{self.rank}of{self.world_size}"
        if self.chunks > 1:
            name += f".chunk{self.chunk}"
        return f"{name}.pt"

    def label(self, learner: str) -> str:
        """A progress-bar label: the learner, and the trial range of a part of the run."""
        if self.world_size == 1 and self.chunks == 1:
            return learner
        return f"{learner}[{self.start}:{self.stop}]"


def plan(num_trials: int, trial_chunk: int | None, world_size: int, rank: int) -> list[Piece]:
    """The pieces rank ``rank`` of ``world_size`` runs, in trial order.

    Raises:
        ValueError: more ranks than trials, or ``trial_chunk < 1``.
    """
    if world_size > num_trials:
        raise OptionError(
            f"WORLD_SIZE={world_size} processes for {num_trials} trials; run at most "
            f"{num_trials} processes (each rank needs a trial)"
        )
    if trial_chunk is not None and trial_chunk < 1:
        raise OptionError(f"trial_chunk must be an integer >= 1 or null, got {trial_chunk!r}")
    start = rank * num_trials // world_size
    stop = (rank + 1) * num_trials // world_size
    size = stop - start if trial_chunk is None else trial_chunk
    bounds = list(range(start, stop, size))
    return [
        Piece(a, min(a + size, stop), rank, world_size, c, len(bounds))
        for c, a in enumerate(bounds)
    ]


def layout(num_trials: int, trial_chunk: int | None, world_size: int) -> dict[str, int | None]:
    """How a run splits its trials, as checkpoints record it: ``world_size`` and the
    ``trial_chunk`` that takes effect (``None`` when no rank's slice is split)."""
    largest = -(-num_trials // world_size)
    chunk = trial_chunk if trial_chunk is not None and trial_chunk < largest else None
    return {"world_size": world_size, "trial_chunk": chunk}


def merge(parts: list[tuple[Piece, pd.DataFrame, pd.DataFrame]]) -> tuple[pd.DataFrame, ...]:
    """The summary and curve of the whole run from its pieces' ``(piece, summary, curve)``.

    Summaries are stacked in trial order; curve rows get their global ``trial`` number and
    are ordered by round, then trial, as a single process writes them.
    """
    parts = sorted(parts, key=lambda p: p[0].start)
    summary = pd.concat([s for _, s, _ in parts], ignore_index=True)
    curves = []
    for piece, _, curve in parts:
        curves.append(curve.assign(trial=curve["trial"] + piece.start))
    curve = pd.concat(curves, ignore_index=True)
    curve = curve.sort_values(["round", "trial"], kind="stable").reset_index(drop=True)
    return summary, curve


class LogRecorder:
    """A tracker that keeps what the loop logs, to be merged over pieces and replayed."""

    def __init__(self) -> None:
        self.logs: list[tuple[int, dict[str, float]]] = []

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Keep ``metrics`` of round ``step`` for rank 0 to log."""
        self.logs.append((step, dict(metrics)))

    def log_table(self, name: str, frame: pd.DataFrame) -> None:
        """Tables are logged by rank 0 from the merged results; nothing to keep."""
        pass

    def finish(self) -> None:
        """Nothing to close: the kept metrics are read by rank 0."""
        pass


def merge_logs(parts: list[tuple[int, list[tuple[int, dict[str, float]]]]]) -> list[tuple]:
    """The logs of the whole run from each piece's ``(number of trials, logs)``.

    Each logged value is a mean over the piece's trials, so the run's mean is their mean
    weighted by trial counts (``round`` stays the step).
    """
    total = sum(n for n, _ in parts)
    merged = []
    for entries in zip(*(logs for _, logs in parts)):
        step = entries[0][0]
        keys = [k for k in entries[0][1] if k != "round"]
        values = {k: sum(n * e[1][k] for (n, _), e in zip(parts, entries)) / total for k in keys}
        merged.append((step, {**values, "round": step}))
    return merged


__all__ = ["LogRecorder", "Piece", "layout", "merge", "merge_logs", "plan"]
