"""A run with its companion presets.

A preset may name ``companions``: other experiment presets run after it into
``<out_dir>/<preset>`` with the same grid and data overrides (:data:`COMPANION_KEYS`), whose
results join its report. :func:`companion_presets` reads the list and
:func:`companion_overrides` derives each companion's overrides; the lines ``simulate``
prints at the end (the report included) are :func:`torchroute.cli.finish.finish`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchroute.configs_path import config_dirs
from torchroute.errors import ConfigError

log = logging.getLogger("torchroute")

#: command-line overrides a companion run shares with its main run: the grid, the data,
#: the encoder, the device and the run-time switches (not learners, env or out_dir)
COMPANION_KEYS = (
    "rounds",
    "seeds",
    "split",
    "data",
    "encoder",
    "cache_dir",
    "device",
    "loop_seed",
    "rng",
    "logger",
    "~logger",
    "progress",
    "overwrite",
)


def companion_presets(cfg: Any, extra: Sequence[str] = ()) -> list[str]:
    """The ``companions`` of a composed config, each an experiment preset that exists in
    torchroute's configs or the ``extra`` config folders (none run when ``run_learners``
    picks some of its learners).

    Raises:
        ConfigError: an entry that is not the name of an experiment preset.
    """
    presets = cfg.get("companions") or []
    if not isinstance(presets, Sequence) or isinstance(presets, str):
        presets = [presets]
    bad = [p for p in presets if not isinstance(p, str) or not p or "/" in p]
    if bad:
        raise ConfigError(f"companions must be a list of experiment preset names, got {bad}")
    known = {p.stem for d in config_dirs(extra) for p in (d / "experiment").glob("*.yaml")}
    unknown = [p for p in presets if p not in known]
    if unknown:
        raise ConfigError(
            f"companions: no experiment preset {unknown}; the presets: {sorted(known)}"
        )
    if cfg.get("run_learners"):
        return []
    return list(presets)


def companion_overrides(overrides: Sequence[str], preset: str, out_dir: Path) -> list[str]:
    """The overrides of companion ``preset`` of a run into ``out_dir``: the command's own
    grid and data overrides (:data:`COMPANION_KEYS`), the preset, ``out_dir/<preset>``."""
    shared = []
    for item in overrides:
        key = item.split("=", 1)[0].lstrip("+")
        if key in COMPANION_KEYS or key.split(".", 1)[0] in COMPANION_KEYS:
            shared.append(item)
    return [*shared, f"experiment={preset}", f"out_dir={out_dir / preset}", "companions=[]"]
