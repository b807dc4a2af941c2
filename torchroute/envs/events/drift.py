"""``{kind: drift, arm, at, score_shift}``: the arm's scores move by ``score_shift`` (in
``[-1, 1]``) from round ``floor(at T)`` on, clipped to ``[0, 1]``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from torchroute.envs.events.base import Event, ScenarioError, number


@dataclass(frozen=True)
class Drift(Event):
    """A model whose quality changes; ``value`` is the score shift."""

    kind: ClassVar[str] = "drift"
    keys: ClassVar[tuple[str, ...]] = ("score_shift",)
    moves_scores: ClassVar[bool] = True

    @classmethod
    def parse_value(cls, where: str, item: Mapping[str, Any]) -> float:
        """``score_shift``, a finite number in ``[-1, 1]``."""
        value = number(where, "score_shift", item["score_shift"])
        if not -1.0 <= value <= 1.0:
            raise ScenarioError(f"{where}.score_shift must be in [-1, 1], got {value}")
        return value

    def apply(self, on: Tensor, scores: Tensor, costs: Tensor) -> tuple[Tensor, Tensor]:
        """The shift added to the scores ``[R, B, K]`` of the arms ``on`` ``[R, 1, K]``."""
        return scores + on.to(scores.dtype) * self.value, costs


EVENT = Drift
