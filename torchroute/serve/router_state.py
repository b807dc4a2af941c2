"""Persistence of a :class:`~torchroute.serve.router.Router`: the checkpoint of its learner, the
writes to its SQLite store (:class:`~torchroute.serve.log.RouterLog`) and the restore at start
(the last checkpoint, then the events logged after it replayed)."""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from torchroute.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from torchroute.learners.base import Learner
from torchroute.serve.log import RouterLog, clean_temp_files, log_path

#: the router's logger (its warnings keep one name whichever file they come from)
log = logging.getLogger("torchroute.serve.router")


class StoreError(RuntimeError):
    """The decision log cannot be written (read-only folder, full disk): nothing changed."""


def mix_seed(*parts: object) -> int:
    """A 63-bit seed from ``parts`` (stable across processes)."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def state_fingerprint(learner: Learner) -> str:
    """sha256 of a learner's state (names, dtypes, shapes and bytes of every tensor)."""
    h = hashlib.sha256()

    def feed(key: str, value: Any) -> None:
        if isinstance(value, Tensor):
            h.update(f"{key}:{value.dtype}:{tuple(value.shape)}".encode())
            source = value.detach().cpu().reshape(-1)
            flat = torch.empty(source.shape, dtype=source.dtype).copy_(source)  # unit stride
            h.update(flat.view(torch.uint8).numpy().tobytes())
        elif isinstance(value, dict):
            for sub in sorted(value, key=str):
                feed(f"{key}.{sub}", value[sub])
        elif isinstance(value, (list, tuple)):
            for i, sub in enumerate(value):
                feed(f"{key}.{i}", sub)
        else:
            h.update(f"{key}={value!r}".encode())

    for key, value in sorted(learner.state_dict().items()):
        feed(key, value)
    return h.hexdigest()


def learner_settings(learner: Learner) -> dict[str, Any]:
    """The learner's plain hyper-parameters (numbers, strings, booleans)."""
    return {
        key: value
        for key, value in sorted(vars(learner).items())
        if not key.startswith("_") and isinstance(value, (bool, int, float, str))
    }


class RouterState:
    """The persistence half of :class:`~torchroute.serve.router.Router` (mixed into it; the
    attributes it reads are the router's)."""

    def save(self, path: str | Path | None = None) -> Path:
        """Checkpoint the learner's state atomically to ``path`` (default: ``state_path``)."""
        target = path or self.state_path
        if target is None:
            raise ValueError("save needs a path: this router has no state_path")
        with self._lock:
            return self._save(Path(target))

    def close(self) -> None:
        """Checkpoint the state and close the log."""
        with self._lock:
            if self.state_path is not None and self._events > self._checkpointed:
                self._save(self.state_path)
            self.log.close()

    def _open(self) -> None:
        """Open the log, load the last checkpoint, replay the events after it."""
        path = None if self.state_path is None else log_path(self.state_path)
        if self.state_path is not None:
            for stale in clean_temp_files(self.state_path):
                log.warning("removed %s (an interrupted checkpoint write)", stale)
        self.log = RouterLog(path, self.fingerprint)
        last = self.log.last_event()
        start = 0
        if self.state_path is not None and self.state_path.exists():
            start = self._restore(load_checkpoint(self.state_path), last)
        self._events = start
        for event in self.log.events(after=start):
            if event.kind == "model":
                self._add_arm(event.name, event.price)
            else:
                items = [self._item(row) for row in event.rows]
                self._update(items, torch.from_numpy(event.score), torch.from_numpy(event.cost))
            self._events = event.seq
        self._checkpointed = start
        for row in self.log.pending():
            self.pending[row.request_id] = self._item(row)
        counts = self.log.counts()
        self.withdrawn_count = counts["withdrawn"]
        self.feedback_count = counts["answered"]
        self.expired_count, self.dropped_count = counts["expired"], counts["dropped"]
        self._routes = self.log.num_routes()
        self._checkpoint_feedback = self.feedback_count
        if self._events > start and self.state_path is not None:
            self._save(self.state_path)

    def _write(self, method: Callable[..., Any], *args: Any) -> Any:
        try:
            return method(*args)
        except sqlite3.Error as exc:
            raise StoreError(f"the decision log cannot be written: {exc}") from exc

    def _save(self, path: Path | None) -> Path | None:
        if path is None:
            return None
        prices = self.problem.prices
        saved = save_checkpoint(
            path,
            {
                "kind": "router",
                "fingerprint": self.fingerprint,
                "learner_class": type(self.learner).__name__,
                "learner": self.learner.state_dict(),
                "arm_names": list(self.arm_names),
                "prices": None if prices is None else prices.tolist(),
                "rho": self.rho,
                "event": self._events,
            },
        )
        if path == self.state_path:
            self._checkpointed = self._events
            self._checkpoint_feedback = self.feedback_count
        return saved

    def _restore(self, payload: dict[str, Any], last_event: int) -> int:
        """Load a checkpoint; returns the last event it holds."""
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
        names, k = list(payload["arm_names"]), self.learner.num_arms
        prices = payload.get("prices")
        for i in range(k, len(names)):
            self._add_arm(names[i], None if prices is None else prices[i])
        try:
            self.learner.load_state_dict(payload["learner"])
        except (RuntimeError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{where} does not fit this learner: {exc}") from exc
        return event


__all__ = ["RouterState", "StoreError", "learner_settings", "mix_seed", "state_fingerprint"]
