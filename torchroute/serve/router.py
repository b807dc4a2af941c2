"""A live router: one trial of a learner answering queries, learning from delayed feedback.

:class:`Router` is the façade; its jobs live beside it: :mod:`~torchroute.serve.admission`
(pending requests), :mod:`~torchroute.serve.learning` (feedback joined by id, the update) and
:mod:`~torchroute.serve.router_state` (the checkpoint, the store's writes, the restore).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.errors import InputError
from torchroute.learners.base import Learner
from torchroute.serve.admission import Admission
from torchroute.serve.checks import check_embeddings, check_feedback, check_texts
from torchroute.serve.exploration import check_epsilon
from torchroute.serve.exploration import explore as explore_floor
from torchroute.serve.learning import Learning
from torchroute.serve.log import (
    RouteRow,
)
from torchroute.serve.propensity import routing_probs
from torchroute.serve.router_state import (
    RouterState,
    StoreError,
    learner_settings,
    mix_seed,
    state_fingerprint,
)
from torchroute.serve.security import check_model_name
from torchroute.types import Context, Problem

log = logging.getLogger(__name__)


class Router(RouterState, Admission, Learning):
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
            self.generator.manual_seed(mix_seed(self.seed, "route", self._routes))
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

    # -- internals (called with the lock held where they touch state) --------------------

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
