"""Pending requests of a :class:`~torchroute.serve.router.Router`: their admission (with expiry
after ``pending_ttl`` and the ``max_pending`` bound), withdrawal, what is asked about one
(its routed model, ranked models, status), and the transaction a layer above writes its own
rows of the decision log in."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchroute.serve.arms import pad_arms
from torchroute.serve.log import STATUS_NAMES, RouteRow

#: the router's logger (its warnings keep one name whichever file they come from)
log = logging.getLogger("torchroute.serve.router")


class Admission:
    """The pending-requests half of :class:`~torchroute.serve.router.Router` (mixed into it;
    the attributes it reads are the router's). Call with the router's lock held where a
    method does not take it itself."""

    def ranked(self, request_id: str) -> list[tuple[str, float]]:
        """Every served model with its probability for a pending request, most probable
        first (ties in the order of the models); ``[]`` when ``request_id`` is not pending.

        The probabilities are those logged at decision time (``probabilities [K']``, zero
        for models added since).
        """
        with self._lock:
            item = self.pending.get(request_id)
            if item is None:
                return []
            probs = pad_arms(item["probs"], len(self.arm_names)).tolist()  # [K]
            order = sorted(range(len(probs)), key=lambda a: (-probs[a], a))
            return [(self.arm_names[a], float(probs[a])) for a in order]

    def routed_model(self, request_id: str) -> str | None:
        """The model a pending request was routed to (``None``: not pending)."""
        with self._lock:
            item = self.pending.get(request_id)
            return None if item is None else self.arm_names[item["arm"]]

    def request_status(self, request_id: str) -> str | None:
        """``pending``, ``answered``, ``expired``, ``dropped`` or ``withdrawn`` (``None``:
        never routed here)."""
        with self._lock:
            code = self.log.statuses([request_id]).get(request_id)
        return None if code is None else STATUS_NAMES[code]

    def withdraw(self, request_ids: Sequence[str]) -> None:
        """Take pending requests out without learning (their routed model never answered)."""
        self.store(lambda db: None, request_ids)

    def store(
        self, statements: Callable[[sqlite3.Connection], Any], withdraw: Sequence[str] = ()
    ) -> Any:
        """Run ``statements(db)`` on the decision log and withdraw the pending ids among
        ``withdraw``, in one transaction under the router's lock (a layer above writes its
        own tables so: the gateway's ledger). Returns what ``statements`` returns.

        Raises:
            StoreError: the log cannot be written; nothing changed.
        """
        with self._lock:
            ids = [rid for rid in withdraw if rid in self.pending]
            out = self._write(self.log.write, statements, ids)
            for rid in ids:
                self.pending.pop(rid)
            self.withdrawn_count += len(ids)
            return out

    def query(self, query: Callable[[sqlite3.Connection], Any]) -> Any:
        """``query(db)`` on the decision log under the router's lock (a layer above reads
        its own tables so)."""
        with self._lock:
            return self.log.select(query)

    def _admit(self, rows: list[RouteRow], now: float) -> None:
        """Log ``rows`` as pending (expiring and dropping older requests as needed)."""
        expired = self._expired(now)
        over = len(self.pending) - len(expired) + len(rows) - self.max_pending
        dropped = self._oldest(len(expired), over)
        dropped += [row.request_id for row in rows[: max(0, over - len(dropped))]]
        self._write(self.log.add_routes, rows, expired, dropped)
        for row in rows:
            self.pending[row.request_id] = self._item(row)
        self._drop(expired, dropped)
        self._routes += len(rows)

    def _item(self, row: RouteRow) -> dict[str, Any]:
        dtype = self.problem.dtype
        return {
            "x": torch.from_numpy(row.x).to(dtype),
            "embedding": torch.from_numpy(row.embedding).to(dtype),
            "arm": row.arm,
            "probs": torch.from_numpy(row.probabilities).to(dtype),
            "t": row.timestamp,
        }

    def _expired(self, now: float) -> list[str]:
        """Pending ids older than ``pending_ttl`` (oldest first; none are removed here)."""
        if self.pending_ttl is None:
            return []
        cutoff, out = now - self.pending_ttl, []
        for rid, item in self.pending.items():
            if item["t"] >= cutoff:
                break
            out.append(rid)
        return out

    def _oldest(self, skip: int, count: int) -> list[str]:
        """``count`` pending ids after the ``skip`` oldest."""
        if count <= 0:
            return []
        out = []
        for i, rid in enumerate(self.pending):
            if i >= skip + count:
                break
            if i >= skip:
                out.append(rid)
        return out

    def _drop(self, expired: list[str], dropped: list[str]) -> None:
        for rid in expired:
            self.pending.pop(rid)
        for rid in dropped:
            self.pending.pop(rid)
        if dropped:
            log.warning("dropped %d requests: over max_pending=%d", len(dropped), self.max_pending)
        self.expired_count += len(expired)
        self.dropped_count += len(dropped)


__all__ = ["Admission"]
