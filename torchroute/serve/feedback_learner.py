"""The learner of a live router and what it learns from: feedback joined to pending requests
by id, the update (undone when it cannot be logged), the periodic checkpoint, a model added."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from torchroute.checkpoint import CheckpointError
from torchroute.errors import InputError
from torchroute.learners.base import Learner
from torchroute.serve.arms import add_arm
from torchroute.serve.fingerprint import mix_seed
from torchroute.serve.log import ANSWERED
from torchroute.serve.pacer import Pacer
from torchroute.serve.pending import feedback_batch
from torchroute.serve.pending_requests import PendingRequests
from torchroute.serve.router_store import RouterStore, StoreError
from torchroute.types import Problem

#: the router's logger (its warnings keep one name whichever file they come from)
log = logging.getLogger("torchroute.serve.router")


class FeedbackLearner:
    """Owns the served learner, its one-trial problem and the count of feedbacks applied.

    :meth:`join` matches feedback to ``pending``'s requests by id; :meth:`learn` updates
    the learner, logs the update as the next event of ``store`` and only then forgets the
    requests (the learner's state is restored when the log cannot be written), and
    checkpoints every ``checkpoint_every`` feedbacks. Event ``n``'s update draws from a
    generator seeded by ``(seed, n)``, so a replay of the log gives the same state. A
    model added grows the learner and the problem (``factory`` builds the new state). Not
    thread-safe: its owner calls it under one lock.

    Args:
        learner: a learner built for ``problem`` (one trial).
        factory: builds a fresh learner for a problem.
        problem: ``R = 1``, the served models and their prices.
        rho: the cost sensitivity of the utility ``clip(score - rho cost, 0, 1)``.
        seed: seed of the updates' draws.
        store: where the events and checkpoints are written.
        pending: the requests feedback is joined to.
        checkpoint_every: feedbacks between two checkpoints to ``store.state_path``.
    """

    def __init__(
        self,
        learner: Learner,
        factory: Callable[[Problem], Learner],
        problem: Problem,
        *,
        rho: float,
        seed: int,
        store: RouterStore,
        pending: PendingRequests,
        checkpoint_every: int,
    ) -> None:
        self.learner, self.factory, self.problem = learner, factory, problem
        self.rho, self.seed = rho, seed
        self.store, self.pending = store, pending
        self.checkpoint_every = checkpoint_every
        self.feedback_count = 0
        self.feedback_at_checkpoint = 0
        #: the spend pacer stepped with the costs learnt (``None``: no ``--budget``)
        self.pacer: Pacer | None = None

    def join(
        self, ids: Sequence[str], models: Sequence[str] | None
    ) -> tuple[list[int], dict[str, list[str]]]:
        """The positions in ``ids`` to learn from, and the report ``{applied, unknown,
        duplicate}`` of every id (ids repeated or already answered are duplicates).

        Raises:
            InputError: a model in ``models`` is not the one its request was routed to.
        """
        rows, seen, pending = [], set(), self.pending.requests
        report: dict[str, list[str]] = {"applied": [], "unknown": [], "duplicate": []}
        missing = [rid for rid in ids if rid not in pending]
        statuses = self.store.log.statuses(missing)
        answered = {rid for rid, status in statuses.items() if status == ANSWERED}
        for i, rid in enumerate(ids):
            if rid in seen or rid in answered:
                report["duplicate"].append(rid)
            elif rid not in pending:
                report["unknown"].append(rid)
            else:
                routed = self.problem.arm_names[pending[rid]["arm"]]
                if models is not None and models[i] != routed:
                    raise InputError(
                        f"request {rid!r} was routed to {routed!r}, not {models[i]!r}; no "
                        "feedback applied"
                    )
                seen.add(rid)
                rows.append(i)
                report["applied"].append(rid)
        return rows, report

    def learn(self, ids: list[str], score: Tensor, cost: Tensor) -> None:
        """Update the learner with pending ``ids`` (scores ``[n]``, costs ``[n]``), log the
        update (with the pacer's state after the costs), then forget the requests (or undo
        it all)."""
        items = [self.pending.requests[rid] for rid in ids]
        snapshot = copy.deepcopy(self.learner.state_dict())
        paced = None if self.pacer is None else self.pacer.stepped(cost)
        try:
            utility = self.update(items, score, cost)
            self.store.write(
                self.store.log.add_feedback,
                self.store.events + 1,
                ids,
                score.tolist(),
                cost.tolist(),
                utility.tolist(),
                time.time(),
                () if paced is None else [self.pacer.row(paced)],
            )
        except BaseException:
            self.learner.load_state_dict(snapshot)
            raise
        if paced is not None:
            self.pacer.take(paced)
        self.store.events += 1
        self.pending.remove(ids)
        self.feedback_count += len(ids)
        if self.feedback_count - self.feedback_at_checkpoint >= self.checkpoint_every:
            try:
                self.checkpoint(self.store.state_path)
            except OSError as exc:  # the log holds the update: the next restart replays it
                log.warning("checkpoint failed (%s); the log keeps every feedback", exc)

    def update(self, items: list[dict[str, Any]], score: Tensor, cost: Tensor) -> Tensor:
        """One learner update with the ``n`` requests as a batch ``[1, n, ...]`` (no undo).

        Event ``store.events + 1`` draws from a generator seeded by it; returns the
        utilities ``[n]``.
        """
        context, decision, feedback = feedback_batch(
            items, score, cost, self.rho, self.learner.num_arms, self.problem.dtype
        )
        seed = mix_seed(self.seed, "update", self.store.events + 1)
        self.learner.update(context, decision, feedback, torch.Generator().manual_seed(seed))
        check_finite_state(self.learner)
        return feedback.reward[0].sum(-1).double()  # [n]: the routed arm's utility

    def add_model(self, name: str, price: float) -> None:
        """Serve one more model, logged as the next event, then checkpointed.

        Raises:
            StoreError: the log cannot be written; the model was not added.
        """
        old = self.learner, self.problem
        self.add_arm(name, price)
        try:
            self.store.write(
                self.store.log.add_model, self.store.events + 1, name, price, time.time()
            )
        except StoreError:
            self.learner, self.problem = old
            raise
        self.store.events += 1
        self.checkpoint(self.store.state_path)

    def add_arm(self, name: str, price: float | None) -> None:
        """Grow the learner and the problem by one model (not logged)."""
        self.learner, self.problem = add_arm(self.learner, self.factory, self.problem, name, price)

    def checkpoint(self, path: Path | None) -> Path | None:
        """Save the learner's state to ``path`` (``None``: nothing written)."""
        saved = self.store.save(path, self.learner, self.problem, self.rho)
        if path is not None and path == self.store.state_path:
            self.feedback_at_checkpoint = self.feedback_count
        return saved

    def load(self, payload: dict[str, Any], where: str) -> int:
        """Take the models and the state of a checked checkpoint; returns its event."""
        names, k = list(payload["arm_names"]), self.learner.num_arms
        prices = payload.get("prices")
        for i in range(k, len(names)):
            self.add_arm(names[i], None if prices is None else prices[i])
        try:
            self.learner.load_state_dict(payload["learner"])
        except (RuntimeError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{where} does not fit this learner: {exc}") from exc
        return payload["event"]


def check_finite_state(learner: Learner) -> None:
    """Raise ``FloatingPointError`` when a tensor of the learner's state is NaN or infinite."""
    state = learner.state_dict().values()
    if not all(torch.isfinite(v).all() for v in state if isinstance(v, Tensor)):
        raise FloatingPointError("the learner's state became NaN or infinite")


__all__ = ["FeedbackLearner", "check_finite_state"]
