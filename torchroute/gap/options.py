"""The ``gap`` section of a ``torchroute gap`` config, validated once into :class:`GapOptions`.

Every key is checked before a table is loaded or a file written: an unknown key (``+gap.bogus=1``)
is refused with the known ones, ``steps`` and ``rank`` must be integers >= 1, ``lr`` a finite
number > 0, ``rhos`` a non-empty list of numbers >= 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from torchroute.errors import GapConfigError


def gap_presets(*config_dirs: str | Path) -> list[str]:
    """The experiment presets in ``<folder>/experiment`` of each of ``config_dirs`` that have
    a ``gap:`` section."""
    return sorted(
        {
            p.stem
            for folder in config_dirs
            for p in (Path(folder) / "experiment").glob("*.yaml")
            if any(line.startswith("gap:") for line in p.read_text().splitlines())
        }
    )


def _integer(key: str, value: Any, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise GapConfigError(f"gap.{key} must be an integer >= {lo}, got {value!r}")
    return value


def _optional_count(key: str, value: Any) -> int | None:
    return None if value is None else _integer(key, value, 1)


@dataclass(frozen=True)
class GapOptions:
    """What ``run_gap`` reads from ``cfg.gap``.

    Attributes:
        rhos: the cost weights, one gap table block each (non-empty, each >= 0).
        table_name: the ``table`` column of ``gap.csv`` (default: the run's name).
        held_out: the split the held-out gap is measured on (``val`` or ``test``).
        max_train, max_held_out: optional caps on the queries used (seeded subsets).
        steps: full-batch Adam steps per policy class (>= 1).
        lr: Adam's learning rate (> 0).
        rank: rank of the quadratic part of each ``W_m`` (>= 1).
        seed: seed of the subsets and of the initial weights (>= 0).
    """

    rhos: tuple[float, ...]
    table_name: str | None = None
    held_out: str = "test"
    max_train: int | None = None
    max_held_out: int | None = None
    steps: int = 300
    lr: float = 0.05
    rank: int = 8
    seed: int = 0

    @classmethod
    def from_config(cls, node: Mapping[str, Any] | None, presets: Sequence[str] = ()) -> GapOptions:
        """Validate ``node`` (the ``gap`` section, or ``None`` when the config has none).

        Args:
            node: the section as a mapping.
            presets: the presets that have a ``gap`` section, named when ``node`` is None.

        Raises:
            GapConfigError: no section, an unknown key, or a bad value, naming ``gap.<key>``.
        """
        if node is None:
            names = ", ".join(f"experiment={p}" for p in presets) or "a preset with a gap section"
            raise GapConfigError(f"this config has no gap section; torchroute gap takes {names}")
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(map(str, node)) - set(known))
        if unknown:
            raise GapConfigError(f"unknown gap option(s) {unknown}; gap takes {known}")
        rhos = node.get("rhos")
        if isinstance(rhos, (str, bytes)) or not isinstance(rhos, Sequence) or len(rhos) == 0:
            raise GapConfigError(f"gap.rhos must be a non-empty list of numbers >= 0, got {rhos!r}")
        for rho in rhos:
            if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not rho >= 0:
                raise GapConfigError(f"gap.rhos must hold numbers >= 0, got {rho!r}")
        lr = node.get("lr", cls.lr)
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr):
            raise GapConfigError(f"gap.lr must be a finite number > 0, got {lr!r}")
        if lr <= 0:
            raise GapConfigError(f"gap.lr must be a finite number > 0, got {lr!r}")
        held_out = node.get("held_out", cls.held_out)
        if held_out not in ("val", "test"):
            raise GapConfigError(f"gap.held_out must be 'val' or 'test', got {held_out!r}")
        name = node.get("table_name")
        if name is not None and not (isinstance(name, str) and name.strip()):
            raise GapConfigError(f"gap.table_name must be a non-empty string, got {name!r}")
        return cls(
            rhos=tuple(float(r) for r in rhos),
            table_name=name,
            held_out=held_out,
            max_train=_optional_count("max_train", node.get("max_train")),
            max_held_out=_optional_count("max_held_out", node.get("max_held_out")),
            steps=_integer("steps", node.get("steps", cls.steps), 1),
            lr=float(lr),
            rank=_integer("rank", node.get("rank", cls.rank), 1),
            seed=_integer("seed", node.get("seed", cls.seed), 0),
        )
