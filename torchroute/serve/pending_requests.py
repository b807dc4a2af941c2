"""Requests routed and waiting for their feedback: admission with expiry after
``pending_ttl`` and the ``max_pending`` bound, withdrawal, and their counts."""

from __future__ import annotations

import logging
import sqlite3
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from torchroute.serve.log import RouteRow
from torchroute.serve.router_store import RouterStore

#: the router's logger (its warnings keep one name whichever file they come from)
log = logging.getLogger("torchroute.serve.router")


class PendingRequests:
    """Owns the pending requests of a router (oldest first), their bounds and their counts.

    ``requests`` maps a request id to the item the learner's update reads (``x [d]``,
    ``embedding [e]``, ``arm``, ``probs [K']``, ``t``: see ``item``). A request leaves it
    answered (:meth:`remove`), expired (older than ``pending_ttl`` seconds), dropped (the
    oldest beyond ``max_pending``) or withdrawn; each change is written to ``store``'s log
    before it is made. Not thread-safe: its owner calls it under one lock.

    Args:
        store: the router's store (its log is written here).
        item: a routed row -> its pending item.
        max_pending: requests kept; the oldest are dropped beyond it.
        pending_ttl: seconds a request waits before it expires (``None``: never).
    """

    def __init__(
        self,
        store: RouterStore,
        item: Callable[[RouteRow], dict[str, Any]],
        *,
        max_pending: int,
        pending_ttl: float | None,
    ) -> None:
        self.store, self.item = store, item
        self.max_pending, self.pending_ttl = max_pending, pending_ttl
        self.requests: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.routes = 0  # requests ever routed (the seed of the next route's draws)
        self.expired_count = self.dropped_count = self.withdrawn_count = 0

    def restore(self, rows: Iterable[RouteRow], counts: dict[str, int], routes: int) -> None:
        """Take back the pending ``rows`` and the counts (``expired``, ``dropped``,
        ``withdrawn``) and number of ``routes`` a log holds."""
        for row in rows:
            self.requests[row.request_id] = self.item(row)
        self.withdrawn_count = counts["withdrawn"]
        self.expired_count, self.dropped_count = counts["expired"], counts["dropped"]
        self.routes = routes

    def admit(self, rows: list[RouteRow], now: float) -> None:
        """Log ``rows`` as pending (expiring and dropping older requests as needed)."""
        expired = self._expired(now)
        over = len(self.requests) - len(expired) + len(rows) - self.max_pending
        dropped = self._oldest(len(expired), over)
        dropped += [row.request_id for row in rows[: max(0, over - len(dropped))]]
        self.store.write(self.store.log.add_routes, rows, expired, dropped)
        for row in rows:
            self.requests[row.request_id] = self.item(row)
        self._drop(expired, dropped)
        self.routes += len(rows)

    def expire(self, now: float) -> None:
        """Log and take out the requests older than ``pending_ttl`` at ``now``."""
        expired = self._expired(now)
        if expired:
            self.store.write(self.store.log.expire, expired)
            self._drop(expired, [])

    def withdraw(
        self, statements: Callable[[sqlite3.Connection], Any], withdraw: Sequence[str]
    ) -> Any:
        """Run ``statements(db)`` and withdraw the pending ids among ``withdraw`` in one
        transaction of the log; returns what ``statements`` returns."""
        ids = [rid for rid in withdraw if rid in self.requests]
        out = self.store.write(self.store.log.write, statements, ids)
        for rid in ids:
            self.requests.pop(rid)
        self.withdrawn_count += len(ids)
        return out

    def remove(self, ids: Sequence[str]) -> None:
        """Take out answered requests (their feedback is logged)."""
        for rid in ids:
            self.requests.pop(rid)

    def _expired(self, now: float) -> list[str]:
        """Pending ids older than ``pending_ttl`` (oldest first; none are removed here)."""
        if self.pending_ttl is None:
            return []
        cutoff, out = now - self.pending_ttl, []
        for rid, item in self.requests.items():
            if item["t"] >= cutoff:
                break
            out.append(rid)
        return out

    def _oldest(self, skip: int, count: int) -> list[str]:
        """``count`` pending ids after the ``skip`` oldest."""
        if count <= 0:
            return []
        out = []
        for i, rid in enumerate(self.requests):
            if i >= skip + count:
                break
            if i >= skip:
                out.append(rid)
        return out

    def _drop(self, expired: list[str], dropped: list[str]) -> None:
        for rid in expired:
            self.requests.pop(rid)
        for rid in dropped:
            self.requests.pop(rid)
        if dropped:
            log.warning("dropped %d requests: over max_pending=%d", len(dropped), self.max_pending)
        self.expired_count += len(expired)
        self.dropped_count += len(dropped)


__all__ = ["PendingRequests"]
