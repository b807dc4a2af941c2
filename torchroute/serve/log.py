"""The router's decision log: every route and every feedback as a row of an SQLite database.

The log is the router's source of truth. A route is written (in one transaction with the
expiry of older pending requests) before its ids are returned; a feedback batch is written
in one transaction with the status change of its requests before it is acknowledged, and
the database's primary key on ``feedback.request_id`` makes a second count impossible. The
learner's state is rebuilt from a checkpoint and the feedback events written after it
(:meth:`RouterLog.events`), in the order they were applied.

Tables (``WAL`` journal, standard library ``sqlite3``):

- ``meta(key, value)``: the configuration the log belongs to (JSON values).
- ``info(key, value)``: notes that are not part of it (``origin``: ``fresh`` or ``run``).
- ``routes``: one row per routed request: ``request_id``, ``timestamp``, ``arm`` (index),
  ``model``, ``propensity``, ``num_arms`` (models served at decision time),
  ``probabilities`` / ``x`` / ``embedding`` (float64 bytes), ``text_sha256``, ``status``
  (0 pending, 1 answered, 2 expired, 3 dropped over ``max_pending``, 4 withdrawn),
  ``rho`` (the request's own trade-off; ``NULL``: the router's, as in logs written before
  the column existed, which gain it when a router opens them).
- ``events``: ``seq``, ``kind`` (``feedback``: one learner update; ``model``: a model
  added, with ``name`` and ``price``), ``timestamp``.
- ``feedback``: ``request_id``, ``event``, ``pos`` (place in the update's batch),
  ``timestamp``, ``score``, ``cost``, ``utility``.
- ``subsets``: ``request_id``, ``draws`` (JSON list of arm indices): the ``M`` draws of a
  subset router's decision. Its route row has ``arm = -1``, ``model`` the JSON list of the
  models called (distinct draws, in draw order) and ``propensity`` the probability of that
  set; ``probabilities`` is the learner's per-draw distribution.
- ``pacers``: ``name``, ``budget``, ``eta``, ``rho``, ``spent``, ``requests``, ``rounds``:
  the state of each spend pacer (:mod:`~torchroute.serve.pacer`), written with the costs
  it has seen.

Status 4 (``withdrawn``): a request taken out without learning (set by the layer above,
the gateway, when the routed model gave no answer to learn from). That layer keeps its own
tables in the same database (:meth:`RouterLog.write`, :meth:`RouterLog.select`), so that
its rows and a status change are one transaction.

(Over 400 lines: one store class, :class:`RouterLog`, whose methods are each one transaction
over the schema above; the schema and the queries are kept together.)
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from torchroute.errors import LogError as LogError

PENDING, ANSWERED, EXPIRED, DROPPED, WITHDRAWN = 0, 1, 2, 3, 4
STATUS_NAMES = {
    PENDING: "pending",
    ANSWERED: "answered",
    EXPIRED: "expired",
    DROPPED: "dropped",
    WITHDRAWN: "withdrawn",
}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS routes (
    request_id TEXT PRIMARY KEY, timestamp REAL NOT NULL, arm INTEGER NOT NULL,
    model TEXT NOT NULL, propensity REAL NOT NULL, num_arms INTEGER NOT NULL,
    probabilities BLOB NOT NULL, x BLOB NOT NULL, embedding BLOB NOT NULL,
    text_sha256 TEXT, status INTEGER NOT NULL, rho REAL);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, timestamp REAL NOT NULL,
    name TEXT, price REAL);
CREATE TABLE IF NOT EXISTS feedback (
    request_id TEXT PRIMARY KEY REFERENCES routes(request_id), event INTEGER NOT NULL,
    pos INTEGER NOT NULL, timestamp REAL NOT NULL, score REAL NOT NULL, cost REAL NOT NULL,
    utility REAL NOT NULL);
CREATE TABLE IF NOT EXISTS subsets (
    request_id TEXT PRIMARY KEY REFERENCES routes(request_id), draws TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pacers (
    name TEXT PRIMARY KEY, budget REAL NOT NULL, eta REAL NOT NULL, rho REAL NOT NULL,
    spent REAL NOT NULL, requests INTEGER NOT NULL, rounds INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS feedback_event ON feedback(event, pos);
CREATE INDEX IF NOT EXISTS routes_pending ON routes(status) WHERE status = 0;
"""

#: writes a pacer's row (:meth:`torchroute.serve.pacer.Pacer.row`)
PACER_ROW = "INSERT OR REPLACE INTO pacers VALUES (?, ?, ?, ?, ?, ?, ?)"


def log_path(state_path: str | Path) -> Path:
    """The decision log next to a router's state file: ``router.pt -> router.sqlite``."""
    return Path(state_path).with_suffix(".sqlite")


def clean_temp_files(state_path: str | Path) -> list[Path]:
    """Remove temporary files an interrupted checkpoint write left next to ``state_path``."""
    path = Path(state_path)
    if not path.parent.is_dir():
        return []
    stale = list(path.parent.glob(f".{path.name}.*.tmp"))
    for tmp in stale:
        tmp.unlink(missing_ok=True)
    return stale


@dataclass
class RouteRow:
    """One routed request: features ``x [d]``, embedding ``[e]``, probabilities ``[K]``.

    ``draws``: the ``M`` arm indices of a subset decision (``arm`` is then ``-1``).
    ``rho``: the request's own trade-off (``None``: the router's).
    """

    request_id: str
    timestamp: float
    arm: int
    model: str
    propensity: float
    probabilities: np.ndarray
    x: np.ndarray
    embedding: np.ndarray
    text_sha256: str | None = None
    draws: list[int] | None = None
    rho: float | None = None


@dataclass
class Event:
    """A logged state change: a feedback batch (``rows``, ``score``, ``cost``) or a model."""

    seq: int
    kind: str
    name: str | None = None
    price: float | None = None
    rows: list[RouteRow] | None = None
    score: np.ndarray | None = None
    cost: np.ndarray | None = None


def _blob(values: Any) -> bytes:
    return np.ascontiguousarray(values, dtype=np.float64).tobytes()


def _array(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float64).copy()


class RouterLog:
    """The router's SQLite store at ``path`` (``None``: in memory), bound to ``fingerprint``:
    its decisions, feedback and state events (exported to the off-policy evaluation table
    :class:`torchroute.ope.log.DecisionLog` by :mod:`torchroute.serve.export`).

    ``fingerprint`` (JSON-serialisable) names the configuration the log belongs to (the
    learner, its settings, rho, the models served at start, the initial state's hash);
    opening a log written under another fingerprint raises :class:`LogError` naming the
    first key that differs. Every method is a single transaction; the caller serialises
    calls (the router's lock).
    """

    def __init__(self, path: str | Path | None, fingerprint: dict[str, Any] | None) -> None:
        self.path = None if path is None else Path(path)
        where = ":memory:" if self.path is None else str(self.path)
        try:
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(where, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(_SCHEMA)
            columns = {row[1] for row in self.db.execute("PRAGMA table_info(routes)")}
            if "rho" not in columns and fingerprint is not None:  # a log of before the column
                self.db.execute("ALTER TABLE routes ADD COLUMN rho REAL")
                columns.add("rho")
            stored = dict(self.db.execute("SELECT key, value FROM meta"))
        except (sqlite3.Error, OSError) as exc:
            raise LogError(f"decision log {where} cannot be opened: {exc}") from exc
        #: the routes' rho column (``NULL`` when read from a log of before the column)
        self.rho_column = "r.rho" if "rho" in columns else "NULL"
        if fingerprint is None:  # reading an existing log
            if not stored:
                raise LogError(f"{where} is not a decision log (no configuration)")
            self.meta = {key: json.loads(value) for key, value in stored.items()}
            return
        wanted = {key: json.dumps(value, sort_keys=True) for key, value in fingerprint.items()}
        if stored:
            for key in [*wanted, *(k for k in stored if k not in wanted)]:
                if stored.get(key) != wanted.get(key):
                    raise LogError(
                        f"decision log {where} belongs to another configuration: {key} is "
                        f"{stored.get(key)} there, {wanted.get(key)} here; start with --fresh "
                        "--overwrite-state or another --state"
                    )
        else:
            with self._transaction():
                self.db.executemany("INSERT INTO meta VALUES (?, ?)", wanted.items())
        self.meta = {key: json.loads(value) for key, value in wanted.items()}

    @classmethod
    def read(cls, path: str | Path) -> RouterLog:
        """An existing log, whatever its configuration (to export or inspect it)."""
        if not Path(path).is_file():
            raise LogError(f"decision log {path} does not exist")
        return cls(path, None)

    def close(self) -> None:
        self.db.close()

    def info(self) -> dict[str, str]:
        """The notes of the ``info`` table."""
        return dict(self.db.execute("SELECT key, value FROM info"))

    def set_info(self, key: str, value: str) -> None:
        """Set a note of the ``info`` table."""
        with self._transaction():
            self.db.execute("INSERT OR REPLACE INTO info VALUES (?, ?)", (key, value))

    # -- writes ---------------------------------------------------------------------------

    def _transaction(self):
        return _Transaction(self.db)

    def add_routes(
        self, rows: Sequence[RouteRow], expired: Sequence[str] = (), dropped: Sequence[str] = ()
    ) -> None:
        """Log ``rows`` as pending and mark ``expired`` / ``dropped`` ids, in one transaction."""
        with self._transaction():
            self.db.executemany(
                "INSERT INTO routes (request_id, timestamp, arm, model, propensity, num_arms, "
                "probabilities, x, embedding, text_sha256, status, rho) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?)",
                [
                    (
                        r.request_id,
                        r.timestamp,
                        r.arm,
                        r.model,
                        r.propensity,
                        len(r.probabilities),
                        _blob(r.probabilities),
                        _blob(r.x),
                        _blob(r.embedding),
                        r.text_sha256,
                        r.rho,
                    )
                    for r in rows
                ],
            )
            self.db.executemany(
                "INSERT INTO subsets VALUES (?, ?)",
                [(r.request_id, json.dumps(r.draws)) for r in rows if r.draws is not None],
            )
            self._mark(expired, EXPIRED)
            self._mark(dropped, DROPPED)

    def expire(self, expired: Sequence[str], dropped: Sequence[str] = ()) -> None:
        """Mark pending ids as expired (older than the pending TTL) or dropped."""
        if expired or dropped:
            with self._transaction():
                self._mark(expired, EXPIRED)
                self._mark(dropped, DROPPED)

    def _mark(self, ids: Sequence[str], status: int) -> None:
        if ids:
            self.db.executemany(
                "UPDATE routes SET status = ? WHERE request_id = ? AND status = 0",
                [(status, rid) for rid in ids],
            )

    def add_feedback(
        self,
        seq: int,
        ids: Sequence[str],
        score: Sequence[float],
        cost: Sequence[float],
        utility: Sequence[float],
        timestamp: float,
        pacers: Sequence[tuple] = (),
    ) -> int:
        """Log learner update ``seq`` on ``n`` answered ids, and the ``pacers`` rows (the
        states after their costs), in one transaction.

        Raises ``sqlite3.IntegrityError`` (nothing written) when an id was answered before.
        """
        with self._transaction():
            self.db.execute(
                "INSERT INTO events (seq, kind, timestamp) VALUES (?, 'feedback', ?)",
                (seq, timestamp),
            )
            self.db.executemany(
                "INSERT INTO feedback VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (rid, seq, pos, timestamp, float(s), float(c), float(u))
                    for pos, (rid, s, c, u) in enumerate(zip(ids, score, cost, utility))
                ],
            )
            self._mark(ids, ANSWERED)
            self.db.executemany(PACER_ROW, pacers)

    def write(
        self, statements: Callable[[sqlite3.Connection], Any], withdraw: Sequence[str] = ()
    ) -> Any:
        """Run ``statements(db)`` and mark the pending ids ``withdraw`` withdrawn, in one
        transaction (the tables of the layer above: the gateway's ledger). Returns what
        ``statements`` returns; nothing is written when it raises."""
        with self._transaction():
            out = statements(self.db)
            self._mark(withdraw, WITHDRAWN)
        return out

    def add_model(self, seq: int, name: str, price: float | None, timestamp: float) -> None:
        """Log event ``seq``: a model added to the router."""
        with self._transaction():
            self.db.execute(
                "INSERT INTO events (seq, kind, timestamp, name, price) "
                "VALUES (?, 'model', ?, ?, ?)",
                (seq, timestamp, name, price),
            )

    # -- reads ----------------------------------------------------------------------------

    def statuses(self, ids: Sequence[str]) -> dict[str, int]:
        """``{id: status}`` of the logged ids among ``ids``."""
        out: dict[str, int] = {}
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            out.update(
                self.db.execute(
                    f"SELECT request_id, status FROM routes WHERE request_id IN ({marks})", chunk
                )
            )
        return out

    def pending(self) -> Iterator[RouteRow]:
        """The requests still waiting for feedback, oldest first."""
        cursor = self.db.execute(
            f"SELECT {self._columns} FROM routes r WHERE r.status = 0 ORDER BY r.rowid"
        )
        return (_route_row(row) for row in cursor)

    def events(self, after: int = 0) -> Iterator[Event]:
        """The events with ``seq > after`` in order, feedback rows joined to their routes."""
        for seq, kind, name, price in self.db.execute(
            "SELECT seq, kind, name, price FROM events WHERE seq > ? ORDER BY seq", (after,)
        ).fetchall():
            if kind == "model":
                yield Event(seq, kind, name=name, price=price)
                continue
            joined = self.db.execute(
                f"SELECT {self._columns}, f.score, f.cost FROM feedback f JOIN routes r "
                "ON r.request_id = f.request_id WHERE f.event = ? ORDER BY f.pos",
                (seq,),
            ).fetchall()
            rows = [_route_row(row[:-2]) for row in joined]
            score = np.array([row[-2] for row in joined], dtype=np.float64)
            cost = np.array([row[-1] for row in joined], dtype=np.float64)
            yield Event(seq, kind, rows=rows, score=score, cost=cost)

    def last_event(self) -> int:
        """The ``seq`` of the last event (0 when none)."""
        return int(self.db.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])

    def select(self, query: Callable[[sqlite3.Connection], Any]) -> Any:
        """``query(db)``: a read of the layer above's tables (no transaction)."""
        return query(self.db)

    def num_subsets(self) -> int:
        """The number of logged subset decisions."""
        return int(self.db.execute("SELECT count(*) FROM subsets").fetchone()[0])

    def num_routes(self) -> int:
        """The number of logged routes."""
        return int(self.db.execute("SELECT count(*) FROM routes").fetchone()[0])

    def counts(self) -> dict[str, int]:
        """Numbers of routes by status: ``pending``, ``answered``, ``expired``, ``dropped``,
        ``withdrawn``."""
        found = dict(self.db.execute("SELECT status, count(*) FROM routes GROUP BY status"))
        return {name: int(found.get(code, 0)) for code, name in STATUS_NAMES.items()}

    def table(self) -> dict[str, list]:
        """The log as columns of the decision-log format (one entry per routed request).

        ``request_id``, ``timestamp``, ``arm`` (model name), ``propensity``, ``arms`` (the
        models served at decision time), ``probabilities``, ``embedding``, ``features``,
        ``score`` / ``cost`` (``None`` without feedback), ``learner``, ``rho`` (the
        request's own, else the router's).
        """
        arms = list(self.meta["arm_names"])
        models = self.db.execute(
            "SELECT name FROM events WHERE kind = 'model' ORDER BY seq"
        ).fetchall()
        arms += [name for (name,) in models]
        columns: dict[str, list] = {
            key: []
            for key in (
                "request_id",
                "timestamp",
                "embedding",
                "features",
                "arm",
                "propensity",
                "arms",
                "probabilities",
                "score",
                "cost",
                "learner",
                "rho",
            )
        }
        cursor = self.db.execute(
            "SELECT r.request_id, r.timestamp, r.embedding, r.x, r.model, r.propensity, "
            f"r.num_arms, r.probabilities, f.score, f.cost, {self.rho_column} FROM routes r "
            "LEFT JOIN feedback f ON f.request_id = r.request_id ORDER BY r.rowid"
        )
        learner, rho = str(self.meta["learner"]), float(self.meta["rho"])
        for rid, ts, emb, x, model, prop, k, probs, score, cost, own in cursor:
            columns["request_id"].append(rid)
            columns["timestamp"].append(ts)
            columns["embedding"].append(_array(emb).tolist())
            columns["features"].append(_array(x).tolist())
            columns["arm"].append(model)
            columns["propensity"].append(prop)
            columns["arms"].append(arms[:k])
            columns["probabilities"].append(_array(probs).tolist())
            columns["score"].append(score)
            columns["cost"].append(cost)
            columns["learner"].append(learner)
            columns["rho"].append(rho if own is None else own)
        return columns

    @property
    def _columns(self) -> str:
        """The route columns :func:`_route_row` reads."""
        return f"{_ROUTE_COLUMNS}, {self.rho_column}"


_ROUTE_COLUMNS = (
    "r.request_id, r.timestamp, r.arm, r.model, r.propensity, r.probabilities, r.x, "
    "r.embedding, r.text_sha256, "
    "(SELECT s.draws FROM subsets s WHERE s.request_id = r.request_id)"
)


def _route_row(row: tuple) -> RouteRow:
    rid, ts, arm, model, prop, probs, x, emb, sha, draws, rho = row
    return RouteRow(
        rid,
        ts,
        arm,
        model,
        prop,
        _array(probs),
        _array(x),
        _array(emb),
        sha,
        None if draws is None else [int(i) for i in json.loads(draws)],
        rho,
    )


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on any exception)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.db.execute("COMMIT")
        else:
            self.db.execute("ROLLBACK")
