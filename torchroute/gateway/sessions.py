"""Conversations that keep one model: a session id maps to its routed request for a while.

A session is named by the ``x-session-id`` header or the request's ``user`` field, within
one key and one rho. Its first request is routed and logged; later turns within
``ttl`` seconds of the last one go to the same model under the same request id (logged
as ``session`` attempts, their costs added to the request's), until feedback for the
request arrives or a turn needs a fallback. Sessions live in memory: a restart forgets
them (the next turn is routed again).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class Session:
    """A conversation's routed request, its model and when it lapses."""

    request_id: str
    model: str
    expires: float


class Sessions:
    """Session id -> :class:`Session` (``ttl`` seconds after the last turn; ``ttl = 0``:
    no sessions). At most ``max_sessions`` are kept (the least recent go first)."""

    def __init__(self, ttl: float, max_sessions: int = 100_000) -> None:
        self.ttl, self.max_sessions = float(ttl), int(max_sessions)
        self._items: OrderedDict[tuple, Session] = OrderedDict()
        self._by_request: dict[str, tuple] = {}
        self._lock = threading.Lock()

    def get(self, scope: tuple) -> Session | None:
        """The live session of ``scope`` (its lapse time pushed back), or ``None``."""
        if self.ttl <= 0:
            return None
        now = time.monotonic()
        with self._lock:
            session = self._items.get(scope)
            if session is None:
                return None
            if session.expires < now:
                self._remove(scope)
                return None
            session.expires = now + self.ttl
            self._items.move_to_end(scope)
            return session

    def put(self, scope: tuple, request_id: str, model: str) -> None:
        """Start the session of ``scope`` on a routed request."""
        if self.ttl <= 0:
            return
        with self._lock:
            if scope in self._items:
                self._remove(scope)
            self._items[scope] = Session(request_id, model, time.monotonic() + self.ttl)
            self._by_request[request_id] = scope
            while len(self._items) > self.max_sessions:
                self._remove(next(iter(self._items)))

    def end(self, request_id: str) -> None:
        """End the session of a request (feedback came, or a turn fell back)."""
        with self._lock:
            scope = self._by_request.get(request_id)
            if scope is not None:
                self._remove(scope)

    def _remove(self, scope: tuple) -> None:
        session = self._items.pop(scope)
        self._by_request.pop(session.request_id, None)
