"""The gateway's ledger: every backend call of a routed request and what it was charged to
its key, as rows of the router's decision log.

Table ``attempts`` (in the router's SQLite log, written in the log's own transactions through
:meth:`~torchroute.serve.router.Router.store`, so a row and the withdrawal of its request
are one): ``request_id``, ``pos`` (0, 1, ... in call order), ``model``, ``propensity`` (the
router's probability of that model for the request), ``reason`` (``routed``, ``fallback``
after a failure, ``session`` for a later turn of a conversation), ``outcome`` (``running``
while the call runs, then ``ok``, ``429``, ``500``, ``timeout``, ``connect``,
``malformed``, ``truncated``, ``client closed``, ``interrupted``, ...),
``input_tokens`` / ``output_tokens`` (``NULL`` when the backend gave no usage), ``cost``
(what the key was charged: :func:`~torchroute.gateway.spend.charge`; ``NULL``: nothing),
``key`` (the gateway key's name), ``timestamp``.

A try is logged as it starts, ``running`` and charged its reservation; its end sets the
outcome, the usage and the charge. A row still ``running`` at the next start is a call the
gateway's stop cut short (kill -9): it becomes ``interrupted``, charged its reservation, so
a key's spend never forgets a call the backend may have billed. The table is the one serve
wrote before the ledger moved here; logs written then are read as they are.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from torchroute.serve.pacer import write_pacer
from torchroute.serve.router import Router

RUNNING, INTERRUPTED = "running", "interrupted"

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS attempts ("
    "request_id TEXT NOT NULL REFERENCES routes(request_id), pos INTEGER NOT NULL, "
    "model TEXT NOT NULL, propensity REAL NOT NULL, reason TEXT NOT NULL, outcome TEXT NOT NULL, "
    "input_tokens INTEGER, output_tokens INTEGER, cost REAL, key TEXT, timestamp REAL NOT NULL, "
    "PRIMARY KEY (request_id, pos))",
)
_COLUMNS = (
    "request_id, model, propensity, reason, outcome, input_tokens, output_tokens, cost, key, "
    "timestamp"
)


@dataclass
class Attempt:
    """One backend call of a routed request (a row of the ``attempts`` table)."""

    request_id: str
    model: str
    propensity: float
    reason: str
    outcome: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None
    key: str | None = None
    timestamp: float = 0.0


def _insert(db: sqlite3.Connection, a: Attempt) -> int:
    (pos,) = db.execute(
        "SELECT coalesce(max(pos), -1) + 1 FROM attempts WHERE request_id = ?", (a.request_id,)
    ).fetchone()
    db.execute(
        "INSERT INTO attempts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            a.request_id,
            pos,
            a.model,
            a.propensity,
            a.reason,
            a.outcome,
            a.input_tokens,
            a.output_tokens,
            a.cost,
            a.key,
            a.timestamp,
        ),
    )
    return int(pos)


def read_attempts(db: sqlite3.Connection, request_id: str) -> list[Attempt]:
    """The backend calls logged for ``request_id`` in a decision log's database, in order."""
    cursor = db.execute(
        f"SELECT {_COLUMNS} FROM attempts WHERE request_id = ? ORDER BY pos", (request_id,)
    )
    return [Attempt(*row) for row in cursor]


def read_spend(db: sqlite3.Connection) -> dict[str, float]:
    """``{key: cost}``: what the calls made under each key were charged (running and
    interrupted calls their reservation)."""
    return {
        key: float(cost)
        for key, cost in db.execute(
            "SELECT key, sum(cost) FROM attempts WHERE key IS NOT NULL AND cost IS NOT NULL "
            "GROUP BY key"
        )
    }


class Ledger:
    """The ``attempts`` table of one router's decision log (created if missing).

    Args:
        router: the router whose log holds the table; every write is one of its
            transactions (under its lock).

    Raises:
        StoreError: the table cannot be created.
    """

    def __init__(self, router: Router) -> None:
        self.router = router
        router.store(lambda db: [db.execute(statement) for statement in _SCHEMA])

    def begin(self, attempt: Attempt) -> int:
        """Log a try as it starts (``outcome`` ``running``, ``cost`` its reservation);
        returns its ``pos``. :class:`StoreError` when the log cannot be written."""
        return self.router.store(lambda db: _insert(db, attempt))

    def end(
        self,
        request_id: str,
        pos: int,
        outcome: str,
        tokens: tuple[int, int] | None,
        cost: float | None,
        withdraw: bool = False,
        pacers: Sequence[tuple] = (),
    ) -> None:
        """Set how try ``pos`` of ``request_id`` ended: ``outcome``, the usage ``tokens``
        ``(input, output)`` (``None``: none given), the ``cost`` charged; ``withdraw``
        takes the request out of the pending ones and ``pacers`` (rows of
        :meth:`~torchroute.serve.pacer.Pacer.row`: the states after the charge) are written,
        in the same transaction."""
        tokens_in, tokens_out = tokens or (None, None)

        def update(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE attempts SET outcome = ?, input_tokens = ?, output_tokens = ?, cost = ? "
                "WHERE request_id = ? AND pos = ?",
                (outcome, tokens_in, tokens_out, cost, request_id, pos),
            )
            for row in pacers:
                write_pacer(db, row)

        self.router.store(update, [request_id] if withdraw else ())

    def add(self, attempt: Attempt, withdraw: bool = False) -> int:
        """Log a try that is over (its outcome known); ``withdraw`` as in :meth:`end`."""
        return self.router.store(
            lambda db: _insert(db, attempt), [attempt.request_id] if withdraw else ()
        )

    def withdraw(self, request_ids: Sequence[str]) -> None:
        """Take pending requests out without learning (no answer to learn from)."""
        self.router.withdraw(request_ids)

    def attempts(self, request_id: str) -> list[Attempt]:
        """The backend calls logged for a request, in call order."""
        return self.router.query(lambda db: read_attempts(db, request_id))

    def known_cost(self, request_id: str) -> float | None:
        """The summed cost of the routed model's answers with usage to a pending request
        (every turn of a conversation); ``None``: none, or not pending."""

        def total(db: sqlite3.Connection) -> float | None:
            (cost,) = db.execute(
                "SELECT sum(a.cost) FROM attempts a JOIN routes r ON r.request_id = "
                "a.request_id WHERE a.request_id = ? AND r.status = 0 AND a.outcome = 'ok' AND "
                "a.model = r.model AND a.input_tokens IS NOT NULL",
                (request_id,),
            ).fetchone()
            return None if cost is None else float(cost)

        return self.router.query(total)

    def spend(self) -> dict[str, float]:
        """``{key: cost}`` charged under each key (:func:`read_spend`)."""
        return self.router.query(read_spend)

    def recover(self) -> tuple[list[str], list[str]]:
        """After a stop: mark the ``running`` tries ``interrupted`` (charged their
        reservation). Returns ``(cut, unanswered)``: the pending requests with a try cut
        so, and those with no try and no answer of their routed model (the stop came
        between the route and the call); both are withdrawn by the caller."""

        def mark(db: sqlite3.Connection) -> tuple[list[str], list[str]]:
            cut = [
                rid
                for (rid,) in db.execute(
                    "SELECT DISTINCT a.request_id FROM attempts a JOIN routes r ON "
                    "r.request_id = a.request_id WHERE r.status = 0 AND a.outcome = ? "
                    "ORDER BY r.rowid",
                    (RUNNING,),
                )
            ]
            db.execute("UPDATE attempts SET outcome = ? WHERE outcome = ?", (INTERRUPTED, RUNNING))
            unanswered = [
                rid
                for (rid,) in db.execute(
                    "SELECT r.request_id FROM routes r WHERE r.status = 0 AND NOT EXISTS "
                    "(SELECT 1 FROM attempts a WHERE a.request_id = r.request_id AND "
                    "(a.outcome = ? OR (a.outcome = 'ok' AND a.model = r.model))) "
                    "ORDER BY r.rowid",
                    (INTERRUPTED,),
                )
            ]
            return cut, unanswered

        return self.router.store(mark)


__all__ = ["INTERRUPTED", "RUNNING", "Attempt", "Ledger", "read_attempts", "read_spend"]
