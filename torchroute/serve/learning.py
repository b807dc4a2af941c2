"""Learning of a :class:`~torchroute.serve.router.Router` from feedback: the join of scores and
costs to pending requests by id, the learner's update (undone when it cannot be logged), the
periodic checkpoint, and a model added to the learner."""

from __future__ import annotations

import copy
import logging
import time
from typing import Any

import torch
from torch import Tensor

from torchroute.errors import InputError
from torchroute.serve.arms import add_arm
from torchroute.serve.log import ANSWERED
from torchroute.serve.pending import feedback_batch
from torchroute.serve.router_state import mix_seed

#: the router's logger (its warnings keep one name whichever file they come from)
log = logging.getLogger("torchroute.serve.router")


class Learning:
    """The learning half of :class:`~torchroute.serve.router.Router` (mixed into it; the
    attributes it reads are the router's). Called with the router's lock held."""

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
        generator = torch.Generator().manual_seed(mix_seed(self.seed, "update", self._events + 1))
        self.learner.update(context, decision, feedback, generator)
        state = self.learner.state_dict().values()
        if not all(torch.isfinite(v).all() for v in state if isinstance(v, Tensor)):
            raise FloatingPointError("the learner's state became NaN or infinite")
        return feedback.reward[0].sum(-1).double()  # [n]: the routed arm's utility

    def _add_arm(self, name: str, price: float | None) -> None:
        self.learner, self.problem = add_arm(self.learner, self.factory, self.problem, name, price)


__all__ = ["Learning"]
