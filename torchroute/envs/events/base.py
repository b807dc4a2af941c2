"""The scenario event: one change to one arm from round ``floor(at T)`` on.

A kind is a subclass of :class:`Event` in a file of this package named after it
(``drift.py`` for ``kind: drift``) that binds it to ``EVENT``: adding a kind is adding a
file (:func:`torchroute.envs.events.event_class` finds it by the name the config gives).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from torchroute.errors import ScenarioError as ScenarioError

#: where ``arm: best`` is chosen: each trial's train split at its rho, or the validation
#: split at the run's middle rho (one arm for every trial)
BEST_AT = ("train", "validation")


@dataclass(frozen=True)
class Event:
    """One change: the arm (a model name, or ``best``), its start as a fraction of the rounds
    and its size; for ``arm: best``, where the best arm is chosen (``best_at``: ``train``,
    each trial's own at its rho, or ``validation``, one for every trial at the run's middle
    rho).

    Subclasses set :attr:`kind`, their own config keys (:attr:`keys`, read into ``value`` by
    :meth:`parse_value`) and what the change does: :attr:`hides` (the arm does not exist
    before the start) and :meth:`apply` (scores and costs from the start on).
    """

    #: the name the config gives (``kind: drift``)
    kind: ClassVar[str] = ""
    #: the event's own config keys besides ``arm`` and ``at``
    keys: ClassVar[tuple[str, ...]] = ()
    #: whether the arm is unavailable before the start (and hidden from offline fitting)
    hides: ClassVar[bool] = False
    #: whether :meth:`apply` moves scores (clipped to ``[0, 1]`` once, after all events)
    moves_scores: ClassVar[bool] = False
    #: whether :meth:`apply` moves costs: a known price change, which the env publishes in
    #: ``Context.prices`` (every learner that reads prices sees it at once)
    moves_costs: ClassVar[bool] = False

    arm: str
    at: float
    value: float = 0.0
    best_at: str = "train"

    @classmethod
    def from_config(cls, where: str, item: Mapping[str, Any]) -> Event:
        """The event of one ``scenario:`` entry (``where``: ``scenario[i]``, for errors).

        Raises:
            ScenarioError: one line naming ``<where>.<key>`` and what was expected.
        """
        keys = ("arm", "at", *cls.keys)
        unknown = sorted(set(item) - {"kind", "best_at", *keys})
        if unknown:
            raise ScenarioError(
                f"{where}.{unknown[0]} is not a key of a {cls.kind} event (keys: {', '.join(keys)})"
            )
        missing = [key for key in keys if key not in item]
        if missing:
            raise ScenarioError(f"{where}.{missing[0]} is missing (a {cls.kind} event needs it)")
        arm = item["arm"]
        if not isinstance(arm, str) or not arm:
            raise ScenarioError(
                f"{where}.arm must be a model name, 'best' or 'priciest', got {arm!r}"
            )
        at = number(where, "at", item["at"])
        if not 0.0 < at < 1.0:
            raise ScenarioError(f"{where}.at must be a fraction of the rounds in (0, 1), got {at}")
        best_at = item.get("best_at", "train")
        if best_at not in BEST_AT:
            raise ScenarioError(
                f"{where}.best_at must be one of {', '.join(BEST_AT)}, got {best_at!r}"
            )
        if "best_at" in item and arm != "best":
            raise ScenarioError(
                f"{where}.best_at chooses the arm of 'arm: best'; this event names {arm!r}"
            )
        return cls(arm, at, cls.parse_value(where, item), best_at)

    @classmethod
    def parse_value(cls, where: str, item: Mapping[str, Any]) -> float:
        """The event's size from its own keys (``0.0`` for a kind without one)."""
        return 0.0

    def apply(self, on: Tensor, scores: Tensor, costs: Tensor) -> tuple[Tensor, Tensor]:
        """Scores and costs ``[R, B, K]`` changed on the arms ``on`` ``[R, 1, K]`` (bool), for a
        round at or after the start; unchanged by default."""
        return scores, costs

    def fingerprint(self) -> dict[str, Any]:
        """The event as plain values (resume compares them)."""
        out = {"kind": self.kind, "arm": self.arm, "at": self.at, "value": self.value}
        return out if self.best_at == "train" else out | {"best_at": self.best_at}


def number(where: str, key: str, value: Any) -> float:
    """``value`` as a finite float, or a :class:`ScenarioError` naming ``<where>.<key>``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ScenarioError(f"{where}.{key} must be a finite number, got {value!r}")
    return float(value)


__all__ = ["BEST_AT", "Event", "ScenarioError", "number"]
