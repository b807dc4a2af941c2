"""A live router: one trial of a learner answering queries, learning from delayed feedback.

:class:`Router` routes and composes three parts it owns, each built with what it needs:
:class:`~torchroute.serve.router_store.RouterStore` (the decision log, the checkpoint),
:class:`~torchroute.serve.pending_requests.PendingRequests` (requests waiting for feedback:
admission, expiry, drops, withdrawal) and :class:`~torchroute.serve.feedback_learner.
FeedbackLearner` (the learner: feedback joined by id, the update, a model added).
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.errors import InputError
from torchroute.learners.base import Learner
from torchroute.serve.arms import pad_arms
from torchroute.serve.checks import check_embeddings, check_feedback, check_texts
from torchroute.serve.exploration import check_epsilon
from torchroute.serve.exploration import explore as explore_floor
from torchroute.serve.feedback_learner import FeedbackLearner
from torchroute.serve.fingerprint import learner_settings, mix_seed, state_fingerprint
from torchroute.serve.log import STATUS_NAMES, RouteRow
from torchroute.serve.pacer import DEFAULT_ETA, Pacer
from torchroute.serve.pending_requests import PendingRequests
from torchroute.serve.propensity import routing_probs
from torchroute.serve.request_rho import check_learner_takes, check_pacable, request_rhos
from torchroute.serve.router_store import RouterStore, StoreError
from torchroute.serve.security import check_model_name
from torchroute.types import Context, Problem

log = logging.getLogger(__name__)


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

    Attributes:
        storage: the :class:`~torchroute.serve.router_store.RouterStore` (``log``, the
            checkpoint at ``state_path``).
        requests: the :class:`~torchroute.serve.pending_requests.PendingRequests`
            (``pending``: request id -> its item, oldest first).
        learning: the :class:`~torchroute.serve.feedback_learner.FeedbackLearner` (the
            ``learner`` and its ``problem``).
    """

    #: the part that learns (a subclass may serve its learners with another)
    learner_part: type[FeedbackLearner] = FeedbackLearner

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
        self.features, self.encode = features, encode
        self.embed_dim = self._embed_dim(problem, features)
        self.rho = float(problem.rho[0])
        self.seed = int(seed)
        self.propensity_draws = propensity_draws
        self.explore = check_epsilon(explore)
        self.full_feedback = learner.feedback == "full"
        if self.full_feedback:
            log.warning(
                "%s learns from every model's reward but a router only sees the routed "
                "model's: it is served on bandit feedback, which it was not designed for",
                type(learner).__name__,
            )
        self.fingerprint = {
            "learner": type(learner).__name__,
            "settings": learner_settings(learner),
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
        self._lock = threading.Lock()
        self._encode_lock = threading.Lock()
        self.storage = RouterStore(
            None if state_path is None else Path(state_path), self.fingerprint
        )
        self.requests = PendingRequests(
            self.storage, self._item, max_pending=int(max_pending), pending_ttl=pending_ttl
        )
        self.state_path, self.log = self.storage.state_path, self.storage.log
        self.pending = self.requests.requests  # request id -> its item, oldest first
        self.learning = self.learner_part(
            learner.cpu(),
            factory,
            problem,
            rho=self.rho,
            seed=self.seed,
            store=self.storage,
            pending=self.requests,
            checkpoint_every=checkpoint_every,
        )
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
            self.requests.max_pending = int(max_pending)
        if checkpoint_every is not None:
            check_number("Router", "checkpoint_every", checkpoint_every, ge=1, integer=True)
            self.learning.checkpoint_every = int(checkpoint_every)
        if propensity_draws is not None:
            check_number("Router", "propensity_draws", propensity_draws, ge=1, integer=True)
            self.propensity_draws = int(propensity_draws)
        if pending_ttl is not None:
            check_number("Router", "pending_ttl", pending_ttl, gt=0)
        self.requests.pending_ttl = pending_ttl

    @property
    def arm_names(self) -> tuple[str, ...]:
        """The ``K`` models served, in the learner's order."""
        return self.problem.arm_names

    @property
    def learner(self) -> Learner:
        """The served learner (one trial)."""
        return self.learning.learner

    @property
    def problem(self) -> Problem:
        """The one-trial problem served (grown by :meth:`add_model`)."""
        return self.learning.problem

    def route(
        self,
        texts: Sequence[str] | None = None,
        embeddings: Tensor | Sequence[Sequence[float]] | None = None,
        rho: float | Sequence[float] | None = None,
    ) -> list[dict[str, Any]]:
        """Choose a model for each of ``B`` queries (texts, or embeddings ``[B, e]``).

        ``rho``: the trade-off of every query (a number) or of each (``B`` numbers), each
        finite in ``[0, MAX_RHO]`` (:mod:`~torchroute.serve.request_rho`); a learner that
        does not take a request's rho serves only its own. ``None``: the router's rho.

        Returns:
            ``B`` dicts ``{request_id, model, propensity}`` (the probability the routing
            rule gave the chosen model).

        Raises:
            InputError: a rho out of range, or one the learner cannot take; nothing logged.
            StoreError: the log cannot be written; no request was added.
        """
        batch = len(texts) if texts is not None else 0 if embeddings is None else len(embeddings)
        rhos = request_rhos(rho, batch)
        check_learner_takes(self.learner, rhos, self.rho)
        pacer = self.learning.pacer
        if pacer is not None and rhos is not None:
            raise InputError(
                f"rho: this router sets each request's rho from its budget ({pacer.budget:g} "
                "per request, --budget); send no rho"
            )
        emb = self._embed(texts, embeddings)  # [B, e]
        x = emb if self.features is None else self.features(emb)  # [B, d]
        dtype = self.problem.dtype
        hashes = None if texts is None else [_sha256(t) for t in texts]
        with self._lock:
            if pacer is not None:  # the pacer's rho now, under the lock that steps it
                rhos = [pacer.rho] * batch
            own = None if rhos is None else torch.tensor(rhos, dtype=dtype)[None]  # [1, B]
            context = Context(x=x[None].to(dtype), embedding=emb[None], rho=own)
            now = time.time()
            self.generator.manual_seed(mix_seed(self.seed, "route", self.requests.routes))
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
                    rho=None if rhos is None else rhos[b],
                )
                for b, a in enumerate(action)
            ]
            self.requests.admit(rows, now)
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
            self.requests.expire(time.time())
            rows, report = self.learning.join(request_ids, models)
            if rows:
                self.learning.learn([request_ids[i] for i in rows], score[rows], cost[rows])
        return report

    def add_model(self, name: str, price: float) -> None:
        """Serve one more model; its state is a fresh learner's (an uninformed prior).

        ``name`` is checked by :func:`~torchroute.serve.security.check_model_name`.
        """
        check_number("add_model", "price", price, ge=0)
        with self._lock:
            check_model_name(name, self.arm_names)
            self.learning.add_model(name, float(price))

    def pace(self, budget: float, eta: float = DEFAULT_ETA) -> None:
        """Set each request's rho from the spend so far to hold a mean cost of ``budget``
        per request (:mod:`~torchroute.serve.pacer`: step ``eta``, starting at the router's
        rho, or where the log's pacer stopped); requests then carry no rho of their own.

        Raises:
            InputError: the learner does not take each request's rho, or a bad value.
        """
        check_pacable(self.learner, self.rho)
        with self._lock:
            self.learning.pacer = Pacer.open(self.log.db, "router", budget, eta, self.rho)

    def status(self) -> dict[str, Any]:
        """Models, rho, the learner, the counts of pending, answered, dropped requests and
        the pacer's state (``pacer``, only with a budget)."""
        with self._lock:
            prices = self.problem.prices
            pacer = self.learning.pacer
            return {
                "learner": type(self.learner).__name__,
                "rho": self.rho,
                "models": list(self.arm_names),
                "prices": None if prices is None else prices.tolist(),
                "pending": len(self.requests.requests),
                "feedback": self.learning.feedback_count,
                "expired": self.requests.expired_count,
                "dropped": self.requests.dropped_count,
                "withdrawn": self.requests.withdrawn_count,
                **({} if pacer is None else {"pacer": pacer.status()}),
            }

    def ranked(self, request_id: str) -> list[tuple[str, float]]:
        """Every served model with its probability for a pending request, most probable
        first (ties in the order of the models); ``[]`` when ``request_id`` is not pending.

        The probabilities are those logged at decision time (``probabilities [K']``, zero
        for models added since).
        """
        with self._lock:
            item = self.requests.requests.get(request_id)
            if item is None:
                return []
            probs = pad_arms(item["probs"], len(self.arm_names)).tolist()  # [K]
            order = sorted(range(len(probs)), key=lambda a: (-probs[a], a))
            return [(self.arm_names[a], float(probs[a])) for a in order]

    def routed_model(self, request_id: str) -> str | None:
        """The model a pending request was routed to (``None``: not pending)."""
        with self._lock:
            item = self.requests.requests.get(request_id)
            return None if item is None else self.arm_names[item["arm"]]

    def request_status(self, request_id: str) -> str | None:
        """``pending``, ``answered``, ``expired``, ``dropped`` or ``withdrawn`` (``None``:
        never routed here)."""
        with self._lock:
            code = self.storage.log.statuses([request_id]).get(request_id)
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
            return self.requests.withdraw(statements, withdraw)

    def query(self, query: Callable[[sqlite3.Connection], Any]) -> Any:
        """``query(db)`` on the decision log under the router's lock (a layer above reads
        its own tables so)."""
        with self._lock:
            return self.storage.log.select(query)

    def save(self, path: str | Path | None = None) -> Path:
        """Checkpoint the learner's state atomically to ``path`` (default: ``state_path``)."""
        target = path or self.state_path
        if target is None:
            raise ValueError("save needs a path: this router has no state_path")
        with self._lock:
            return self.learning.checkpoint(Path(target))

    def close(self) -> None:
        """Checkpoint the state and close the log."""
        with self._lock:
            if self.state_path is not None and self.storage.events > self.storage.checkpointed:
                self.learning.checkpoint(self.state_path)
            self.storage.close()

    # -- internals (called with the lock held where they touch state) --------------------

    @property
    def _events(self) -> int:
        """The last state event the learner's state holds."""
        return self.storage.events

    def _open(self) -> None:
        """Load the last checkpoint, replay the events logged after it, take back the
        pending requests and the counts."""
        store, learning = self.storage, self.learning
        payload = store.read_checkpoint()
        start = 0 if payload is None else learning.load(payload, f"router state {self.state_path}")
        store.events = start
        for event in store.log.events(after=start):
            if event.kind == "model":
                learning.add_arm(event.name, event.price)
            else:
                items = [self._item(row) for row in event.rows]
                learning.update(items, torch.from_numpy(event.score), torch.from_numpy(event.cost))
            store.events = event.seq
        store.checkpointed = start
        counts = store.log.counts()
        self.requests.restore(store.log.pending(), counts, store.log.num_routes())
        learning.feedback_count = learning.feedback_at_checkpoint = counts["answered"]
        if store.events > start and self.state_path is not None:
            learning.checkpoint(self.state_path)

    def _item(self, row: RouteRow) -> dict[str, Any]:
        """The pending item of a routed row: ``x [d]``, ``embedding [e]``, ``arm``,
        ``probs [K']`` (the problem's dtype), ``t`` and the request's ``rho`` (``None``:
        the router's)."""
        dtype = self.problem.dtype
        return {
            "x": torch.from_numpy(row.x).to(dtype),
            "embedding": torch.from_numpy(row.embedding).to(dtype),
            "arm": row.arm,
            "probs": torch.from_numpy(row.probabilities).to(dtype),
            "t": row.timestamp,
            "rho": row.rho,
        }

    def _embed_dim(self, problem: Problem, features: Callable | None) -> int | None:
        """The width ``e`` of the embeddings :meth:`route` takes."""
        return problem.dim if features is None else problem.embed_dim

    def _check_feedback(self, ids, scores, costs, models) -> tuple[Tensor, Tensor]:
        """Scores ``[n]`` and costs ``[n]`` (float64) of a feedback call, checked."""
        return check_feedback(ids, scores, costs, models, self.arm_names)

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


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


__all__ = ["Router", "StoreError"]
