"""The warm-start options of a learner config, read and checked in one place.

A learner config may hold (every packaged online one does, ``warm_start: null``)::

    warm_start: null | train | <decision log path>
    warm_weight: 1.0          # weight of each warm row; a list: chosen per trial on validation
    warm_epochs: 2            # neural models: passes over the rows; a list: chosen on validation
    warm_clip: 10.0           # decision log: importance weights capped at this value

:meth:`WarmStart.from_node` turns these keys into a :class:`WarmStart` and returns the node
without them (what the learner's factory is called with). This module holds only the
options: the warm start itself is :meth:`torchroute.learners.Learner.warm_start` and
:mod:`torchroute.learners.warm_start`, imported only by a run that warm-starts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the learner config keys of a warm start (never passed to the learner's factory)
WARM_KEYS = ("warm_start", "warm_weight", "warm_epochs", "warm_clip")


@dataclass(frozen=True)
class WarmStart:
    """The warm-start options of one learner config.

    Attributes:
        source: ``None`` (cold), ``"train"`` or the path of a decision log.
        weights: the candidate weights of a warm row (one: used as is); finite, ``> 0``.
        epochs: the candidate numbers of passes of a neural model over the rows; ``>= 1``.
        clip: the cap of the importance weights of a decision log's rows; finite, ``>= 1``.
    """

    source: str | None = None
    weights: tuple[float, ...] = (1.0,)
    epochs: tuple[int, ...] = (2,)
    clip: float = 10.0

    @classmethod
    def from_node(cls, node: Mapping[str, Any], key: str) -> tuple[WarmStart, dict[str, Any]]:
        """``(options, node without the warm keys)``, every key checked.

        ``key`` names the node in errors (``learners.linucb``); a bad value raises a
        ``ValueError`` of one line naming ``<key>.<warm key>`` and what it must be.
        """
        rest = {k: v for k, v in node.items() if k not in WARM_KEYS}
        source = node.get("warm_start")
        if source is not None and (not isinstance(source, (str, Path)) or not str(source)):
            raise ValueError(
                f"{key}.warm_start must be null, 'train' or a decision log path, got {source!r}"
            )
        weights = _numbers(node.get("warm_weight", 1.0), f"{key}.warm_weight", "> 0", integer=False)
        epochs = _numbers(node.get("warm_epochs", 2), f"{key}.warm_epochs", ">= 1", integer=True)
        clip = node.get("warm_clip", 10.0)
        if not _is_number(clip) or not math.isfinite(clip) or clip < 1:
            raise ValueError(f"{key}.warm_clip must be a finite number >= 1, got {clip!r}")
        src = None if source is None else str(source)
        weights_t, epochs_t = tuple(float(w) for w in weights), tuple(int(e) for e in epochs)
        return cls(src, weights_t, epochs_t, float(clip)), rest

    @property
    def chooses(self) -> bool:
        """Whether a value is chosen on the validation split (several candidates)."""
        return len(self.weights) > 1 or len(self.epochs) > 1


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numbers(value: Any, key: str, bound: str, integer: bool) -> list[Any]:
    """``value`` (a number or a non-empty list) as a list of finite numbers within
    ``bound`` (``"> 0"`` or ``">= 1"``), integers when ``integer``; else a one-line error."""
    kind = "an integer" if integer else "a finite number"
    expected = f"{key} must be {kind} {bound} or a non-empty list of them, got {value!r}"
    many = isinstance(value, Sequence) and not isinstance(value, str)
    values = list(value) if many else [value]
    if not values or not all(_is_number(v) and math.isfinite(v) for v in values):
        raise ValueError(expected)
    if integer and any(float(v) != int(v) for v in values):
        raise ValueError(expected)
    low_ok = (lambda v: v > 0) if bound == "> 0" else (lambda v: v >= 1)
    if not all(low_ok(v) for v in values):
        raise ValueError(expected)
    return values


__all__ = ["WARM_KEYS", "WarmStart"]
