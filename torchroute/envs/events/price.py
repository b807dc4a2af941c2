"""``{kind: price, arm, at, factor}``: the arm's costs are multiplied by ``factor`` (``>= 0``)
from round ``floor(at T)`` on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from torchroute.envs.events.base import Event, ScenarioError, number


@dataclass(frozen=True)
class Price(Event):
    """A model whose price changes; ``value`` is the cost factor."""

    kind: ClassVar[str] = "price"
    keys: ClassVar[tuple[str, ...]] = ("factor",)
    moves_costs: ClassVar[bool] = True

    @classmethod
    def parse_value(cls, where: str, item: Mapping[str, Any]) -> float:
        """``factor``, a finite number ``>= 0``."""
        value = number(where, "factor", item["factor"])
        if not value >= 0.0:
            raise ScenarioError(f"{where}.factor must be >= 0, got {value}")
        return value

    def apply(self, on: Tensor, scores: Tensor, costs: Tensor) -> tuple[Tensor, Tensor]:
        """The costs ``[R, B, K]`` of the arms ``on`` ``[R, 1, K]`` times the factor."""
        return scores, torch.where(on, costs * self.value, costs)


EVENT = Price
