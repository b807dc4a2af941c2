"""Persistence of a live router: its decision log (SQLite, :class:`~torchroute.serve.log.
RouterLog`), the checkpoint of its learner and the count of state events they hold."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchroute.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from torchroute.errors import StoreError as StoreError
from torchroute.learners.base import Learner
from torchroute.serve.log import RouterLog, clean_temp_files, log_path
from torchroute.types import Problem

#: the router's logger (its warnings keep one name whichever file they come from)
log = logging.getLogger("torchroute.serve.router")


class RouterStore:
    """Owns a router's decision log, its checkpoint file and the count of state events.

    The log is ``state_path`` with suffix ``.sqlite`` (in memory when ``state_path`` is
    ``None``: nothing is written); temporary files of an interrupted checkpoint write are
    removed on opening. ``events`` is the last state event (feedback or model added) the
    learner's state holds, ``checkpointed`` the one the file ``state_path`` holds. Not
    thread-safe: its owner calls it under one lock.

    Args:
        state_path: the checkpoint file, or ``None``.
        fingerprint: the router's configuration; the log and the checkpoint must match it.
    """

    def __init__(self, state_path: Path | None, fingerprint: dict[str, Any]) -> None:
        self.state_path, self.fingerprint = state_path, fingerprint
        if state_path is not None:
            for stale in clean_temp_files(state_path):
                log.warning("removed %s (an interrupted checkpoint write)", stale)
        self.log = RouterLog(None if state_path is None else log_path(state_path), fingerprint)
        self.events = 0
        self.checkpointed = 0

    def write(self, method: Callable[..., Any], *args: Any) -> Any:
        """``method(*args)``, a write of the log; :class:`StoreError` when SQLite fails."""
        try:
            return method(*args)
        except sqlite3.Error as exc:
            raise StoreError(f"the decision log cannot be written: {exc}") from exc

    def save(
        self, path: Path | None, learner: Learner, problem: Problem, rho: float
    ) -> Path | None:
        """Checkpoint ``learner`` (serving ``problem``) at event ``events`` atomically to
        ``path`` (``None``: nothing written)."""
        if path is None:
            return None
        prices = problem.prices
        saved = save_checkpoint(
            path,
            {
                "kind": "router",
                "fingerprint": self.fingerprint,
                "learner_class": type(learner).__name__,
                "learner": learner.state_dict(),
                "arm_names": list(problem.arm_names),
                "prices": None if prices is None else prices.tolist(),
                "rho": rho,
                "event": self.events,
            },
        )
        if path == self.state_path:
            self.checkpointed = self.events
        return saved

    def read_checkpoint(self) -> dict[str, Any] | None:
        """The checkpoint at ``state_path`` (``None``: there is none), checked against the
        fingerprint and the log: its ``event`` is one the log holds.

        Raises:
            CheckpointError: the file belongs to another configuration or log, or its
                names, prices or state are not valid.
        """
        if self.state_path is None or not self.state_path.exists():
            return None
        last_event = self.log.last_event()
        payload = load_checkpoint(self.state_path)
        where = f"router state {self.state_path}"
        if payload.get("kind") != "router":
            raise CheckpointError(f"{where} is not a router state (a simulate checkpoint?)")
        theirs = payload.get("fingerprint")
        if not isinstance(theirs, dict):
            raise CheckpointError(f"{where} has no configuration fingerprint (an old format?)")
        for key in [*self.fingerprint, *(k for k in theirs if k not in self.fingerprint)]:
            if theirs.get(key) != self.fingerprint.get(key):
                raise CheckpointError(
                    f"{where} belongs to another configuration: {key} is {theirs.get(key)!r} "
                    f"there, {self.fingerprint.get(key)!r} here"
                )
        event = payload.get("event")
        if not isinstance(event, int) or not 0 <= event <= last_event:
            raise CheckpointError(
                f"{where} holds event {event!r} but its log {log_path(self.state_path)} ends at "
                f"event {last_event}; the log and the state file do not belong together"
            )
        from torchroute.run.validate import check_router_state

        check_router_state(payload, where)  # names, prices, finite state: before any is used
        return payload

    def close(self) -> None:
        """Close the log."""
        self.log.close()


__all__ = ["RouterStore", "StoreError"]
