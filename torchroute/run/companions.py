"""A run with its companion presets, and the report printed at its end.

A preset may name ``companions``: other experiment presets run after it into
``<out_dir>/<preset>`` with the same grid and data overrides (:data:`COMPANION_KEYS`), whose
results join its report. :func:`companion_presets` reads the list, :func:`companion_overrides`
derives each companion's overrides, and :func:`finish` writes the lines the command prints.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from torchroute.configs_path import config_dirs
from torchroute.errors import ConfigError
from torchroute.run.options import RunOptions

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


def finish(opts: RunOptions, results: pd.DataFrame, companions: Sequence[RunOptions]) -> str:
    """What ``simulate`` prints at the end of a run: the files written, then (``report``)
    the report of the run and its companions.

    A ``reference`` learner that did not run is dropped from the report with a warning.
    """
    from torchroute.report import write_report

    lines = [f"wrote {opts.out_dir / 'results.csv'} ({len(results)} rows)"]
    lines += [f"wrote {c.out_dir / 'results.csv'}" for c in companions]
    if opts.report:
        reference = opts.reference
        if reference is not None and reference not in set(results["learner"]):
            log.warning("reference=%s did not run; the report has no relative regret", reference)
            reference = None
        lines.append(
            write_report(
                [opts.out_dir],
                reference=reference,
                sections=opts.report_sections,
                companions=[c.out_dir for c in companions],
            )
        )
    return "\n".join(lines)
