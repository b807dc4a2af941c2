"""``{kind: new_model, arm, at}``: the model exists from round ``floor(at T)`` on; before, it
is unavailable (and hidden from anything fitted offline)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torchroute.envs.events.base import Event


@dataclass(frozen=True)
class NewModel(Event):
    """A model that arrives mid-stream."""

    kind: ClassVar[str] = "new_model"
    hides: ClassVar[bool] = True


EVENT = NewModel
