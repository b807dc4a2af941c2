"""Typed containers passed between environments, learners and the loop.

Dimension letters (see the README): ``R`` trials, ``B`` contexts per round, ``K`` arms,
``d`` features, ``m`` subset size.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor


def _check(name: str, tensor: Tensor, ndim: int, what: str) -> None:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {what}, got {type(tensor).__name__}")
    if tensor.ndim != ndim:
        raise ValueError(f"{name} must have shape {what}, got {tuple(tensor.shape)}")


class _TensorContainer:
    """Moves every tensor field with ``.to()``; ``None`` fields stay ``None``."""

    def to(self, *args, **kwargs):
        changes = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                changes[f.name] = value.to(*args, **kwargs)
        return replace(self, **changes)  # type: ignore[type-var]


@dataclass(frozen=True)
class Context(_TensorContainer):
    """What a learner sees before it decides.

    Attributes:
        x: features, shape ``[R, B, d]``.
        index: row of each context in the routing table, shape ``[R, B]`` (long), or
            ``None`` when the contexts come from outside a table (serving).
    """

    x: Tensor
    index: Tensor | None = None

    def __post_init__(self) -> None:
        _check("Context.x", self.x, 3, "[R, B, d]")
        if self.index is not None:
            _check("Context.index", self.index, 2, "[R, B]")
            if self.index.shape != self.x.shape[:2]:
                raise ValueError(
                    f"Context.index has shape {tuple(self.index.shape)}, expected "
                    f"{tuple(self.x.shape[:2])} to match Context.x [R, B, d]"
                )

    @property
    def num_trials(self) -> int:
        return self.x.shape[0]

    @property
    def batch_size(self) -> int:
        return self.x.shape[1]


@dataclass(frozen=True)
class Decision(_TensorContainer):
    """A learner's decision for one round.

    Attributes:
        probs: sampling distribution over arms, ``[R, B, K]`` (one-hot for deterministic
            rules); rows sum to one.
        action: the drawn arm, ``[R, B]`` (long), or the drawn multiset ``[R, B, m]`` for
            subset routing.
    """

    probs: Tensor
    action: Tensor

    def __post_init__(self) -> None:
        _check("Decision.probs", self.probs, 3, "[R, B, K]")
        if self.action.ndim not in (2, 3) or self.action.shape[:2] != self.probs.shape[:2]:
            raise ValueError(
                f"Decision.action must have shape [R, B] or [R, B, m] matching probs "
                f"{tuple(self.probs.shape)}, got {tuple(self.action.shape)}"
            )


@dataclass(frozen=True)
class Feedback(_TensorContainer):
    """What the world reveals after a decision.

    Attributes:
        reward: utilities ``u(t, k) = clip(y - rho * c, 0, 1)``, ``[R, B, K]``; entries
            that are not observed are zero.
        observed: which entries of ``reward`` were revealed, ``[R, B, K]`` bool (one-hot
            rows for bandit feedback, all ``True`` for full information).
        score: quality ``y`` of the observed arms, ``[R, B, K]`` (zero where unobserved).
        cost: cost ``c`` of the observed arms, ``[R, B, K]`` (zero where unobserved).
    """

    reward: Tensor
    observed: Tensor
    score: Tensor | None = None
    cost: Tensor | None = None

    def __post_init__(self) -> None:
        _check("Feedback.reward", self.reward, 3, "[R, B, K]")
        _check("Feedback.observed", self.observed, 3, "[R, B, K]")
        if self.observed.dtype != torch.bool:
            raise TypeError(f"Feedback.observed must be bool, got {self.observed.dtype}")
        for name in ("observed", "score", "cost"):
            value = getattr(self, name)
            if value is not None and value.shape != self.reward.shape:
                raise ValueError(
                    f"Feedback.{name} has shape {tuple(value.shape)}, expected "
                    f"{tuple(self.reward.shape)} (the shape of Feedback.reward)"
                )


@dataclass(frozen=True)
class Outcome(_TensorContainer):
    """Per-round quantities the loop turns into metrics (never shown to the learner).

    Attributes:
        utility: utility of the chosen arm, ``[R, B]``.
        best_utility: ``max_k u(t, k)``, ``[R, B]``.
        score: quality of the chosen arm, ``[R, B]``.
        cost: cost of the chosen arm, ``[R, B]``.
    """

    utility: Tensor
    best_utility: Tensor
    score: Tensor
    cost: Tensor
