"""The decisions of a simulation waiting for their feedback (late, or for some requests).

:func:`torchroute.loop.simulate` hands each round's batch to :class:`PendingFeedback`,
which updates the learner in the round the feedback arrives (``env.feedback_delay``
rounds later) and only for the trials whose decision is rated (``env.feedback_arrives``);
with neither it calls ``learner.update`` on the round's batch, as the loop always did.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

import torch
from torch import Tensor

from torchroute.envs.base import Env
from torchroute.learners.base import Learner
from torchroute.types import Context, Decision, Feedback

#: one round's ``(context, decision, feedback)``, batched over the trials
Batch = tuple[Context, Decision, Feedback]


class PendingFeedback:
    """The decisions of :func:`simulate` waiting for their feedback, as ``serve`` keeps
    requests pending: each round's batch (over the ``R`` trials) is handed to
    ``learner.update`` in the round its feedback arrives, ``env.feedback_delay`` rounds
    later (a ring buffer of that many rounds), and only for the trials whose decision is
    rated (``env.feedback_arrives``).

    In a round where some trials' decisions are rated and others' are not, a learner that
    :attr:`~torchroute.learners.Learner.learns_only_observed` is updated with the unrated
    trials' ``observed`` masked out; any other learner is
    updated on the batch and every per-trial entry of its state (a leading ``R``
    dimension, an optimizer's moments included) is put back for the trials not rated, so
    that a learner that reads the played arm's reward without ``observed`` learns nothing
    from an unrated decision either. Which rounds those are is read on the host from the
    ``[R, T]`` CPU mask: no device sync.

    Args:
        env: the env whose ``feedback_delay`` and ``feedback_arrives`` are followed.
    """

    def __init__(self, env: Env) -> None:
        self.delay = int(env.feedback_delay)
        self.arrives = env.feedback_arrives  # [R, T] bool, CPU, or None
        self.num_trials = env.num_trials
        self.slots: list[Batch | None] = [None] * self.delay

    def update(
        self, learner: Learner, t: int, batch: Batch, generator: Any
    ) -> dict[str, Tensor] | None:
        """Keep round ``t``'s ``batch`` and update ``learner`` on what arrives at ``t``.

        Returns the learner's update metrics, or ``None`` when nothing arrived.
        """
        arrived: Batch | None = batch
        if self.delay:
            slot = t % self.delay
            arrived, self.slots[slot] = self.slots[slot], batch
        if arrived is None:
            return None
        if self.arrives is None:
            return learner.update(*arrived, generator)
        rated = self.arrives[:, t - self.delay]  # [R] bool, CPU
        if not bool(rated.any()):
            return None
        if bool(rated.all()):
            return learner.update(*arrived, generator)
        if learner.learns_only_observed:  # the unrated trials observe nothing
            context, decision, feedback = arrived
            keep = rated.to(feedback.observed.device)[:, None, None]
            masked = replace(feedback, observed=feedback.observed & keep)
            return learner.update(context, decision, masked, generator)
        return _update_rated(learner, arrived, rated, generator)

    def checkpoint_entry(self) -> dict[str, Any]:
        """``{"pending": ...}`` for a checkpoint (nothing without a delay)."""
        if not self.delay:
            return {}
        return {"pending": [None if b is None else _batch_state(b) for b in self.slots]}

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`checkpoint_entry`'s ``pending`` (``None``: nothing pending)."""
        if state is None and not self.delay:
            return
        if not isinstance(state, list) or len(state) != self.delay:
            raise ValueError(f"expected {self.delay} pending rounds of feedback")
        self.slots = [None if b is None else _batch_from_state(b) for b in state]


def _update_rated(learner: Learner, batch: Batch, rated: Tensor, generator: Any):
    """``learner.update`` on ``batch``, its per-trial state kept for the trials not rated."""
    before = _map_state(learner.state_dict(), lambda v: v.clone())
    stats = learner.update(*batch, generator)
    size = rated.numel()

    def blend(new: Tensor, old: Tensor) -> Tensor:
        if new.ndim == 0 or new.shape[0] != size or new.shape != old.shape:
            return new
        keep = rated.to(new.device).reshape(size, *[1] * (new.ndim - 1))
        return torch.where(keep, new, old)

    learner.load_state_dict(_zip_state(learner.state_dict(), before, blend))
    return stats


def _map_state(state: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    if isinstance(state, Tensor):
        return fn(state)
    if isinstance(state, dict):
        return type(state)((k, _map_state(v, fn)) for k, v in state.items())
    if isinstance(state, (list, tuple)):
        return type(state)(_map_state(v, fn) for v in state)
    return state


def _zip_state(new: Any, old: Any, fn: Callable[[Tensor, Tensor], Tensor]) -> Any:
    if isinstance(new, Tensor) and isinstance(old, Tensor):
        return fn(new, old)
    if isinstance(new, dict) and isinstance(old, dict):
        return type(new)((k, _zip_state(v, old.get(k), fn)) for k, v in new.items())
    if isinstance(new, (list, tuple)) and isinstance(old, (list, tuple)) and len(new) == len(old):
        return type(new)(_zip_state(a, b, fn) for a, b in zip(new, old))
    return new


def _batch_state(batch: Batch) -> dict[str, dict[str, Any]]:
    return {
        name: {f.name: getattr(part, f.name) for f in fields(part)}
        for name, part in zip(("context", "decision", "feedback"), batch)
    }


def _batch_from_state(state: dict[str, dict[str, Any]]) -> Batch:
    return (
        Context(**state["context"]),
        Decision(**state["decision"]),
        Feedback(**state["feedback"]),
    )


__all__ = ["Batch", "PendingFeedback"]
