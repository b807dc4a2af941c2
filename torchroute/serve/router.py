"""A live router: one trial of a learner answering queries, learning from delayed feedback.

(Over 400 lines: admission, pending requests, learning and restore share the router's lock
and state; splitting them by job waits for the serve package's reorganisation.)
"""

from __future__ import annotations

import copy
import hashlib
import logging
import sqlite3
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from torchroute.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from torchroute.checks import check_number
from torchroute.errors import InputError
from torchroute.learners.base import Learner
from torchroute.serve.arms import add_arm, pad_arms
from torchroute.serve.checks import check_embeddings, check_feedback, check_texts
from torchroute.serve.exploration import check_epsilon
from torchroute.serve.exploration import explore as explore_floor
from torchroute.serve.log import (
    ANSWERED,
    STATUS_NAMES,
    Attempt,
    RouterLog,
    RouteRow,
    clean_temp_files,
    log_path,
)
from torchroute.serve.pending import feedback_batch
from torchroute.serve.propensity import routing_probs
from torchroute.serve.security import check_model_name
from torchroute.types import Context, Problem

log = logging.getLogger(__name__)


class StoreError(RuntimeError):
    """The decision log cannot be written (read-only folder, full disk): nothing changed."""


def _mix(*parts: object) -> int:
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


def _settings(learner: Learner) -> dict[str, Any]:
    """The learner's plain hyper-parameters (numbers, strings, booleans)."""
    return {
        key: value
        for key, value in sorted(vars(learner).items())
        if not key.startswith("_") and isinstance(value, (bool, int, float, str))
    }


class Router:
    """Routes live queries with one trial (``R = 1``) of a learner; learns from feedback.

    ``route`` embeds a batch of ``B`` queries (or takes their embeddings), turns them into
    bandit features, lets the learner act on ``Context(x [1, B, d])`` and logs each
    request under a fresh id with the probability every model had
    (:func:`~torchroute.serve.propensity.routing_probs`). ``feedback`` joins later scores
    and costs to those requests by id, in any order and in any grouping, and updates the
    learner with the utility ``clip(score - rho cost, 0, 1)`` of the routed model (bandit
    feedback). Unknown ids and ids already answered are reported, never applied twice.

    Every state change is a row of the decision log (:class:`~torchroute.serve.log.
    RouterLog`, SQLite next to ``state_path``) written before it is acknowledged; the
    learner's state is checkpointed to ``state_path`` every ``checkpoint_every`` feedbacks
    (atomically) and on :meth:`close`. A restart loads the last checkpoint and replays the
    log after it; each update draws from a generator seeded by ``(seed, event)``, so the
    replay gives the state of the live router exactly. Requests older than
    ``pending_ttl`` seconds, or beyond ``max_pending``, are dropped and counted.

    Args:
        learner: a learner built for ``problem`` (one trial).
        factory: builds a fresh learner for a problem (``add_model`` uses it).
        problem: ``R = 1`` with the trial's ``rho``, the arm names and prices, ``d``.
        features: embeddings ``[B, e]`` -> features ``[B, d]``; ``None``: the embeddings
            are the features (``e = d``).
        encode: texts -> embeddings ``[B, e]``; ``None``: only embeddings are accepted.
        state_path: the checkpoint file; the log is ``state_path`` with suffix
            ``.sqlite``. ``None``: an in-memory log, nothing written.
        seed: seed of the learner's draws.
        max_pending: requests kept waiting for feedback; the oldest are dropped beyond it.
        pending_ttl: seconds a request waits for feedback before it is dropped (``None``:
            no expiry).
        checkpoint_every: feedbacks between two checkpoints of the learner's state.
        propensity_draws: Monte-Carlo draws of the routing probabilities of rules that do
            not give them in closed form (LinTS and the like).
        explore: exploration floor ``epsilon`` in ``[0, 1]``: each query goes, with
            probability ``epsilon``, to a model drawn uniformly instead of the learner's
            choice, and the logged propensity is ``(1 - epsilon) p + epsilon / K``
            (:mod:`~torchroute.serve.exploration`); 0: the learner's choice always.
    """

    def __init__(
        self,
        learner: Learner,
        factory: Callable[[Problem], Learner],
        problem: Problem,
        *,
        features: Callable[[Tensor], Tensor] | None = None,
        encode: Callable[[list[str]], Tensor] | None = None,
        state_path: str | Path | None = None,
        seed: int = 0,
        max_pending: int = 100_000,
        pending_ttl: float | None = None,
        checkpoint_every: int = 1000,
        propensity_draws: int = 200,
        explore: float = 0.0,
    ) -> None:
        if problem.num_trials != 1:
            raise InputError(
                f"a Router serves one trial, got problem.num_trials={problem.num_trials}"
            )
        learner.check_problem(problem, who="the router's problem")
        check_number("Router", "max_pending", max_pending, ge=1, integer=True)
        check_number("Router", "checkpoint_every", checkpoint_every, ge=1, integer=True)
        check_number("Router", "propensity_draws", propensity_draws, ge=1, integer=True)
        if pending_ttl is not None:
            check_number("Router", "pending_ttl", pending_ttl, gt=0)
        self.learner, self.factory, self.problem = learner.cpu(), factory, problem
        self.features, self.encode = features, encode
        self.embed_dim = self._embed_dim(problem, features)
        self.rho = float(problem.rho[0])
        self.seed = int(seed)
        self.max_pending, self.pending_ttl = int(max_pending), pending_ttl
        self.checkpoint_every, self.propensity_draws = checkpoint_every, propensity_draws
        self.explore = check_epsilon(explore)
        self.state_path = None if state_path is None else Path(state_path)
        self.full_feedback = learner.feedback == "full"
        if self.full_feedback:
            log.warning(
                "%s learns from every model's reward but a router only sees the routed "
                "model's: it is served on bandit feedback, which it was not designed for",
                type(learner).__name__,
            )
        self.fingerprint = {
            "learner": type(learner).__name__,
            "settings": _settings(learner),
            "rho": self.rho,
            "arm_names": list(problem.arm_names),
            "prices": None if problem.prices is None else problem.prices.tolist(),
            "dim": problem.dim,
            "embed_dim": self.embed_dim,
            "dtype": str(problem.dtype),
            "seed": self.seed,
            "initial_state": state_fingerprint(learner),
        }
        self.generator = torch.Generator()
        self.pending: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._encode_lock = threading.Lock()
        self._open()

    @classmethod
    def fresh(
        cls,
        factory: Callable[[Problem], Learner],
        arm_names: Sequence[str],
        rho: float,
        dim: int,
        prices: Sequence[float] | None = None,
        embed_dim: int | None = None,
        dtype: torch.dtype = torch.float32,
        **kwargs: Any,
    ) -> Router:
        """A router with a fresh learner for ``arm_names`` (``K`` models), ``d = dim``.

        ``factory`` is called with a one-trial :class:`~torchroute.types.Problem`;
        ``dtype`` is the dtype of the contexts and rewards; ``kwargs`` go to the router.
        """
        problem = Problem(
            num_trials=1,
            num_arms=len(arm_names),
            dim=dim,
            rho=torch.tensor([float(rho)]),
            arm_names=tuple(arm_names),
            prices=None if prices is None else torch.tensor(prices, dtype=torch.float64),
            embed_dim=embed_dim,
            dtype=dtype,
        )
        return cls(factory(problem), factory, problem, **kwargs)

    def configure(
        self,
        *,
        max_pending: int | None = None,
        pending_ttl: float | None = None,
        checkpoint_every: int | None = None,
        propensity_draws: int | None = None,
        explore: float | None = None,
    ) -> None:
        """Change the router's bounds (arguments as the constructor's; ``None``: unchanged,
        except ``pending_ttl``, where ``None`` means no expiry)."""
        if explore is not None:
            self.explore = check_epsilon(explore)
        if max_pending is not None:
            check_number("Router", "max_pending", max_pending, ge=1, integer=True)
            self.max_pending = int(max_pending)
        if checkpoint_every is not None:
            check_number("Router", "checkpoint_every", checkpoint_every, ge=1, integer=True)
            self.checkpoint_every = int(checkpoint_every)
        if propensity_draws is not None:
            check_number("Router", "propensity_draws", propensity_draws, ge=1, integer=True)
            self.propensity_draws = int(propensity_draws)
        if pending_ttl is not None:
            check_number("Router", "pending_ttl", pending_ttl, gt=0)
        self.pending_ttl = pending_ttl

    @property
    def arm_names(self) -> tuple[str, ...]:
        return self.problem.arm_names

    def route(
        self,
        texts: Sequence[str] | None = None,
        embeddings: Tensor | Sequence[Sequence[float]] | None = None,
        rho: float | None = None,
    ) -> list[dict[str, Any]]:
        """Choose a model for each of ``B`` queries (texts, or embeddings ``[B, e]``).

        Returns:
            ``B`` dicts ``{request_id, model, propensity}`` (the probability the routing
            rule gave the chosen model).

        Raises:
            StoreError: the log cannot be written; no request was added.
        """
        if rho is not None and float(rho) != self.rho:
            raise InputError(
                f"rho={rho} but this router serves the trial with rho={self.rho}; start a "
                "router for that rho"
            )
        emb = self._embed(texts, embeddings)  # [B, e]
        x = emb if self.features is None else self.features(emb)  # [B, d]
        context = Context(x=x[None].to(self.problem.dtype), embedding=emb[None])
        hashes = None if texts is None else [_sha256(t) for t in texts]
        with self._lock:
            now = time.time()
            self.generator.manual_seed(_mix(self.seed, "route", self._routes))
            decision = self.learner.act(context, self.generator)
            if decision.is_subset:
                raise InputError(f"{type(self.learner).__name__} routes subsets; not served")
            probs, _ = routing_probs(
                self.learner, context, decision, self.generator, self.propensity_draws
            )  # [B, K]
            served, probs = explore_floor(decision.action[0], probs, self.explore, self.generator)
            action = served.tolist()
            chosen = [float(probs[b, a]) for b, a in enumerate(action)]
            x64, e64, p64 = context.x[0].double().numpy(), emb.double().numpy(), probs.numpy()
            rows = [
                RouteRow(
                    uuid.uuid4().hex,
                    now,
                    a,
                    self.arm_names[a],
                    chosen[b],
                    p64[b],
                    x64[b],
                    e64[b],
                    None if hashes is None else hashes[b],
                )
                for b, a in enumerate(action)
            ]
            self._admit(rows, now)
        return [
            {"request_id": r.request_id, "model": r.model, "propensity": r.propensity} for r in rows
        ]

    def feedback(
        self,
        request_ids: Sequence[str],
        scores: Sequence[float],
        costs: Sequence[float],
        models: Sequence[str] | None = None,
    ) -> dict[str, list[str]]:
        """Learn from the score and cost of routed requests, joined by id.

        Args:
            request_ids: ``n`` ids returned by :meth:`route`.
            scores: ``n`` qualities in ``[0, 1]``.
            costs: ``n`` costs ``>= 0``.
            models: optionally the ``n`` models called; each must be the routed one.

        Returns:
            ``{"applied": ids, "unknown": ids, "duplicate": ids}``: ids learned from now,
            ids never routed (or dropped, or expired), and ids already answered or
            repeated in the call.

        Raises:
            StoreError: the log cannot be written; nothing was learned.
        """
        score, cost = self._check_feedback(request_ids, scores, costs, models)
        with self._lock:
            expired = self._expired(time.time())
            if expired:
                self._write(self.log.expire, expired)
                self._drop(expired, [])
            rows, report = self._join(request_ids, models)
            if rows:
                self._learn([request_ids[i] for i in rows], score[rows], cost[rows])
        return report

    def add_model(self, name: str, price: float) -> None:
        """Serve one more model; its state is a fresh learner's (an uninformed prior).

        ``name`` is checked by :func:`~torchroute.serve.security.check_model_name`.
        """
        check_number("add_model", "price", price, ge=0)
        with self._lock:
            check_model_name(name, self.arm_names)
            old = self.learner, self.problem
            self._add_arm(name, float(price))
            try:
                self._write(self.log.add_model, self._events + 1, name, float(price), time.time())
            except StoreError:
                self.learner, self.problem = old
                raise
            self._events += 1
            self._save(self.state_path)

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

    def record_attempt(self, attempt: Attempt, withdraw: bool = False) -> None:
        """Log a backend call made for a routed request (the ``attempts`` table).

        An ``ok`` answer of the routed model adds its cost to the request's known cost
        (:meth:`known_cost`); ``withdraw`` takes the request out of the pending ones in the
        same transaction (its routed model gave no answer to learn from).

        Raises:
            StoreError: the log cannot be written; nothing changed.
        """
        with self._lock:
            self._write(self.log.add_attempt, attempt, withdraw)
            item = self.pending.get(attempt.request_id)
            if item is None:
                return
            if withdraw:
                self.pending.pop(attempt.request_id)
                self.withdrawn_count += 1
            elif (
                attempt.outcome == "ok"
                and attempt.cost is not None
                and self.arm_names[item["arm"]] == attempt.model
            ):
                item["cost"] = item.get("cost", 0.0) + attempt.cost

    def known_cost(self, request_id: str) -> float | None:
        """The summed cost of the routed model's answers to a pending request (``None``:
        none recorded, or not pending)."""
        with self._lock:
            item = self.pending.get(request_id)
            return None if item is None else item.get("cost")

    def attempts(self, request_id: str) -> list[Attempt]:
        """The backend calls logged for a request, in call order."""
        with self._lock:
            return self.log.attempts(request_id)

    def request_status(self, request_id: str) -> str | None:
        """``pending``, ``answered``, ``expired``, ``dropped`` or ``withdrawn`` (``None``:
        never routed here)."""
        with self._lock:
            code = self.log.statuses([request_id]).get(request_id)
        return None if code is None else STATUS_NAMES[code]

    def withdraw(self, request_ids: Sequence[str]) -> None:
        """Take pending requests out without learning (their routed model never answered)."""
        with self._lock:
            ids = [rid for rid in request_ids if rid in self.pending]
            self._write(self.log.withdraw, ids)
            for rid in ids:
                self.pending.pop(rid)
            self.withdrawn_count += len(ids)

    def status(self) -> dict[str, Any]:
        """Models, rho, the learner, and the counts of pending, answered, dropped requests."""
        with self._lock:
            prices = self.problem.prices
            return {
                "learner": type(self.learner).__name__,
                "rho": self.rho,
                "models": list(self.arm_names),
                "prices": None if prices is None else prices.tolist(),
                "pending": len(self.pending),
                "feedback": self.feedback_count,
                "expired": self.expired_count,
                "dropped": self.dropped_count,
                "withdrawn": self.withdrawn_count,
            }

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

    # -- internals (called with the lock held where they touch state) --------------------

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
        for rid, cost in self.log.known_costs().items():
            self.pending[rid]["cost"] = float(cost)
        counts = self.log.counts()
        self.withdrawn_count = counts["withdrawn"]
        self.feedback_count = counts["answered"]
        self.expired_count, self.dropped_count = counts["expired"], counts["dropped"]
        self._routes = self.log.num_routes()
        self._checkpoint_feedback = self.feedback_count
        if self._events > start and self.state_path is not None:
            self._save(self.state_path)

    def _embed_dim(self, problem: Problem, features: Callable | None) -> int | None:
        """The width ``e`` of the embeddings :meth:`route` takes."""
        return problem.dim if features is None else problem.embed_dim

    def _check_feedback(self, ids, scores, costs, models) -> tuple[Tensor, Tensor]:
        """Scores ``[n]`` and costs ``[n]`` (float64) of a feedback call, checked."""
        return check_feedback(ids, scores, costs, models, self.arm_names)

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

    def _embed(self, texts, embeddings) -> Tensor:
        if (texts is None) == (embeddings is None):
            raise InputError("give either texts or embeddings (one of the two)")
        if texts is not None:
            if self.encode is None:
                raise InputError("this router has no encoder: send embeddings instead of texts")
            texts = check_texts(texts)
            with self._encode_lock:
                embeddings = self.encode(texts)
        return check_embeddings(embeddings, self.embed_dim, self.problem.dtype)

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

    def _write(self, method: Callable[..., Any], *args: Any) -> Any:
        try:
            return method(*args)
        except sqlite3.Error as exc:
            raise StoreError(f"the decision log cannot be written: {exc}") from exc

    def _join(self, ids, models) -> tuple[list[int], dict[str, list[str]]]:
        rows, seen = [], set()
        report: dict[str, list[str]] = {"applied": [], "unknown": [], "duplicate": []}
        missing = [rid for rid in ids if rid not in self.pending]
        answered = {rid for rid, status in self.log.statuses(missing).items() if status == ANSWERED}
        for i, rid in enumerate(ids):
            if rid in seen or rid in answered:
                report["duplicate"].append(rid)
            elif rid not in self.pending:
                report["unknown"].append(rid)
            else:
                routed = self.arm_names[self.pending[rid]["arm"]]
                if models is not None and models[i] != routed:
                    raise InputError(
                        f"request {rid!r} was routed to {routed!r}, not {models[i]!r}; no "
                        "feedback applied"
                    )
                seen.add(rid)
                rows.append(i)
                report["applied"].append(rid)
        return rows, report

    def _learn(self, ids: list[str], score: Tensor, cost: Tensor) -> None:
        """Update the learner, log the update, then forget the requests (or undo it all)."""
        items = [self.pending[rid] for rid in ids]
        snapshot = copy.deepcopy(self.learner.state_dict())
        try:
            utility = self._update(items, score, cost)
            self._write(
                self.log.add_feedback,
                self._events + 1,
                ids,
                score.tolist(),
                cost.tolist(),
                utility.tolist(),
                time.time(),
            )
        except BaseException:
            self.learner.load_state_dict(snapshot)
            raise
        self._events += 1
        for rid in ids:
            self.pending.pop(rid)
        self.feedback_count += len(ids)
        if self.feedback_count - self._checkpoint_feedback >= self.checkpoint_every:
            try:
                self._save(self.state_path)
            except OSError as exc:  # the log holds the update: the next restart replays it
                log.warning("checkpoint failed (%s); the log keeps every feedback", exc)

    def _update(self, items: list[dict[str, Any]], score: Tensor, cost: Tensor) -> Tensor:
        """One learner update with the ``n`` requests as a batch ``[1, n, ...]`` (no undo).

        Event ``self._events + 1`` draws from a generator seeded by it; returns the
        utilities ``[n]``.
        """
        context, decision, feedback = feedback_batch(
            items, score, cost, self.rho, self.learner.num_arms, self.problem.dtype
        )
        generator = torch.Generator().manual_seed(_mix(self.seed, "update", self._events + 1))
        self.learner.update(context, decision, feedback, generator)
        state = self.learner.state_dict().values()
        if not all(torch.isfinite(v).all() for v in state if isinstance(v, Tensor)):
            raise FloatingPointError("the learner's state became NaN or infinite")
        return feedback.reward[0].sum(-1).double()  # [n]: the routed arm's utility

    def _add_arm(self, name: str, price: float | None) -> None:
        self.learner, self.problem = add_arm(self.learner, self.factory, self.problem, name, price)

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


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
