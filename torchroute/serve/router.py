"""A live router: one trial of a learner answering queries, learning from delayed feedback."""

from __future__ import annotations

import copy
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from torchroute.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from torchroute.checks import check_number
from torchroute.learners.base import Learner
from torchroute.serve.arms import add_arm
from torchroute.serve.checks import (
    DuplicateModelError,
    check_embeddings,
    check_feedback,
    check_texts,
)
from torchroute.serve.pending import feedback_batch, pack_pending, unpack_pending
from torchroute.types import Context, Problem

log = logging.getLogger(__name__)


class Router:
    """Routes live queries with one trial (``R = 1``) of a learner; learns from feedback.

    ``route`` embeds a batch of ``B`` queries (or takes their embeddings), turns them into
    bandit features, lets the learner act on ``Context(x [1, B, d])`` and remembers each
    request under a fresh id. ``feedback`` joins later scores and costs to those requests
    by id, in any order and in any grouping, and updates the learner with the utility
    ``clip(score - rho cost, 0, 1)`` of the routed model (bandit feedback). Unknown ids
    and ids already answered are reported, never applied twice. All state changes happen
    under one lock; with ``state_path`` the learner, the generator and the pending
    requests are written atomically after every change and read back on restart.

    Args:
        learner: a learner built for ``problem`` (one trial).
        factory: builds a fresh learner for a problem (``add_model`` uses it).
        problem: ``R = 1`` with the trial's ``rho``, the arm names and prices, ``d``.
        features: embeddings ``[B, e]`` -> features ``[B, d]``; ``None``: the embeddings
            are the features (``e = d``).
        encode: texts -> embeddings ``[B, e]``; ``None``: only embeddings are accepted.
        state_path: where the router's state is saved; read at start when it exists.
        seed: seed of the generator of the learner's draws (when no state is restored).
        max_pending: requests kept waiting for feedback; the oldest are dropped beyond it.
        max_done: answered ids remembered to report repeated feedback as duplicate.
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
        max_done: int = 100_000,
    ) -> None:
        if problem.num_trials != 1:
            raise ValueError(
                f"a Router serves one trial, got problem.num_trials={problem.num_trials}"
            )
        learner.check_problem(problem, who="the router's problem")
        self.learner, self.factory, self.problem = learner.cpu(), factory, problem
        self.features, self.encode = features, encode
        self.embed_dim = problem.dim if features is None else problem.embed_dim
        self.rho = float(problem.rho[0])
        self.state_path = None if state_path is None else Path(state_path)
        self.max_pending, self.max_done = max_pending, max_done
        self.generator = torch.Generator().manual_seed(seed)
        self.pending: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.done: OrderedDict[str, None] = OrderedDict()
        self.feedback_count = 0
        self._lock = threading.Lock()
        self._encode_lock = threading.Lock()
        if self.state_path is not None and self.state_path.exists():
            self._restore(load_checkpoint(self.state_path))

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
            ``B`` dicts ``{request_id, model, propensity}`` (the probability the learner
            gave the chosen model).
        """
        if rho is not None and float(rho) != self.rho:
            raise ValueError(
                f"rho={rho} but this router serves the trial with rho={self.rho}; start a "
                "router for that rho"
            )
        emb = self._embed(texts, embeddings)  # [B, e]
        x = emb if self.features is None else self.features(emb)  # [B, d]
        context = Context(x=x[None].to(self.problem.dtype), embedding=emb[None])
        with self._lock:
            decision = self.learner.act(context, self.generator)
            if decision.is_subset:
                raise ValueError(f"{type(self.learner).__name__} routes subsets; not served")
            probs, action = decision.probs[0], decision.action[0]  # [B, K], [B]
            ids = [uuid.uuid4().hex for _ in range(len(action))]
            for b, rid in enumerate(ids):
                self.pending[rid] = {
                    "x": context.x[0, b],
                    "embedding": emb[b],
                    "arm": int(action[b]),
                    "probs": probs[b],
                }
            while len(self.pending) > self.max_pending:
                dropped, _ = self.pending.popitem(last=False)
                log.warning("dropped request %s: over max_pending=%d", dropped, self.max_pending)
            self._autosave()
        chosen = probs.gather(1, action[:, None])[:, 0].tolist()
        return [
            {"request_id": rid, "model": self.arm_names[int(a)], "propensity": p}
            for rid, a, p in zip(ids, action.tolist(), chosen)
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
            ids never routed (or dropped), and ids already answered or repeated in the call.
        """
        score, cost = check_feedback(request_ids, scores, costs, models, self.arm_names)
        with self._lock:
            rows, report = self._join(request_ids, models)
            if rows:
                self._update(request_ids, rows, score[rows], cost[rows])
                self._autosave()
        return report

    def add_model(self, name: str, price: float) -> None:
        """Serve one more model; its state is a fresh learner's (an uninformed prior)."""
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"model name must be a non-empty string, got {name!r}")
        check_number("add_model", "price", price, ge=0)
        with self._lock:
            self._add_arm(name, float(price))
            self._autosave()

    def status(self) -> dict[str, Any]:
        """Models, rho, the learner, and the counts of pending and answered requests."""
        with self._lock:
            prices = self.problem.prices
            return {
                "learner": type(self.learner).__name__,
                "rho": self.rho,
                "models": list(self.arm_names),
                "prices": None if prices is None else prices.tolist(),
                "pending": len(self.pending),
                "feedback": self.feedback_count,
            }

    def save(self, path: str | Path | None = None) -> Path:
        """Write the router's state atomically to ``path`` (default: ``state_path``)."""
        target = path or self.state_path
        if target is None:
            raise ValueError("save needs a path: this router has no state_path")
        with self._lock:
            return self._save(Path(target))

    # -- internals (called with the lock held where they touch state) --------------------

    def _embed(self, texts, embeddings) -> Tensor:
        if (texts is None) == (embeddings is None):
            raise ValueError("give either texts or embeddings (one of the two)")
        if texts is not None:
            if self.encode is None:
                raise ValueError("this router has no encoder: send embeddings instead of texts")
            texts = check_texts(texts)
            with self._encode_lock:
                embeddings = self.encode(texts)
        return check_embeddings(embeddings, self.embed_dim, self.problem.dtype)

    def _join(self, ids, models) -> tuple[list[int], dict[str, list[str]]]:
        rows, seen = [], set()
        report: dict[str, list[str]] = {"applied": [], "unknown": [], "duplicate": []}
        for i, rid in enumerate(ids):
            if rid in seen or rid in self.done:
                report["duplicate"].append(rid)
            elif rid not in self.pending:
                report["unknown"].append(rid)
            else:
                routed = self.arm_names[self.pending[rid]["arm"]]
                if models is not None and models[i] != routed:
                    raise ValueError(
                        f"request {rid!r} was routed to {routed!r}, not {models[i]!r}; no "
                        "feedback applied"
                    )
                seen.add(rid)
                rows.append(i)
                report["applied"].append(rid)
        return rows, report

    def _update(self, ids, rows: list[int], score: Tensor, cost: Tensor) -> None:
        """One learner update with the ``n`` joined requests as a batch ``[1, n, ...]``."""
        items = [self.pending[ids[i]] for i in rows]
        context, decision, feedback = feedback_batch(
            items, score, cost, self.rho, self.learner.num_arms, self.problem.dtype
        )
        # deep copy: a learner's extra state (an optimizer's moments) is a nested dict
        snapshot = copy.deepcopy(self.learner.state_dict())
        generator = self.generator.get_state()
        try:
            self.learner.update(context, decision, feedback, self.generator)
            state = self.learner.state_dict().values()
            if not all(torch.isfinite(v).all() for v in state if isinstance(v, Tensor)):
                raise FloatingPointError("the learner's state became NaN or infinite")
        except Exception:
            self.learner.load_state_dict(snapshot)
            self.generator.set_state(generator)
            raise
        for i in rows:
            self.pending.pop(ids[i])
            self.done[ids[i]] = None
        while len(self.done) > self.max_done:
            self.done.popitem(last=False)
        self.feedback_count += len(rows)

    def _add_arm(self, name: str, price: float | None) -> None:
        if name in self.arm_names:
            raise DuplicateModelError(f"model {name!r} is already served")
        self.learner, self.problem = add_arm(self.learner, self.factory, self.problem, name, price)

    def _autosave(self) -> None:
        if self.state_path is not None:
            self._save(self.state_path)

    def _save(self, path: Path) -> Path:
        prices = self.problem.prices
        return save_checkpoint(
            path,
            {
                "kind": "router",
                "learner_class": type(self.learner).__name__,
                "learner": self.learner.state_dict(),
                "arm_names": list(self.arm_names),
                "prices": None if prices is None else prices.tolist(),
                "rho": self.rho,
                "generator": self.generator.get_state(),
                "pending": pack_pending(self.pending, self.learner.num_arms),
                "done": list(self.done),
                "feedback_count": self.feedback_count,
            },
        )

    def _restore(self, payload: dict[str, Any]) -> None:
        where = f"router state {self.state_path}"
        if payload.get("kind") != "router":
            raise CheckpointError(f"{where} is not a router state (a simulate checkpoint?)")
        if payload.get("learner_class") != type(self.learner).__name__:
            raise CheckpointError(
                f"{where} holds a {payload.get('learner_class')}, not a "
                f"{type(self.learner).__name__}"
            )
        if payload.get("rho") != self.rho:
            raise CheckpointError(f"{where} serves rho={payload.get('rho')}, not rho={self.rho}")
        names, k = list(payload["arm_names"]), self.learner.num_arms
        if names[:k] != list(self.arm_names):
            raise CheckpointError(f"{where} serves models {names}, not {list(self.arm_names)}")
        prices = payload.get("prices")
        for i in range(k, len(names)):
            self._add_arm(names[i], None if prices is None else prices[i])
        try:
            self.learner.load_state_dict(payload["learner"])
            self.generator.set_state(payload["generator"])
        except (RuntimeError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{where} does not fit this learner: {exc}") from exc
        self.pending = unpack_pending(payload["pending"])
        self.done = OrderedDict.fromkeys(payload["done"])
        self.feedback_count = int(payload["feedback_count"])
