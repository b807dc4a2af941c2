"""The keys of ``torchroute evaluate`` with their defaults and one line each (no torch
import: ``torchroute evaluate --help`` lists them)."""

from __future__ import annotations

from typing import Any

#: every key of ``torchroute evaluate`` and its default
DEFAULTS: dict[str, Any] = {
    "logs": None,
    "targets": [],
    "replay": [],
    "rhos": None,
    "checkpoint": None,
    "estimators": ["ips", "snips", "dm", "dr", "switch_dr", "clipped_dr"],
    "interval": "bootstrap",
    "bootstrap": 200,
    "alpha": 0.05,
    "switch_tau": 10.0,
    "clip": 10.0,
    "lam": 1.0,
    "folds": 2,
    "crossfit": "random",
    "seed": 0,
    "device": "cpu",
    "out_dir": "outputs/evaluate",
}

#: one line per key (``torchroute evaluate --help``)
KEY_HELP: dict[str, str] = {
    "logs": "the decision log, .parquet or .csv (required)",
    "targets": "routers evaluated frozen: learner config names or arm:<model>",
    "replay": "learner config names evaluated learning through the log (replay)",
    "rhos": "cost sensitivities; null = the log's rho when it has one, else 0",
    "checkpoint": "a simulate out_dir: a target it trained is that run's learner",
    "estimators": "any of ips, snips, dm, dr, switch_dr, clipped_dr",
    "interval": "bootstrap | bernstein | normal",
    "bootstrap": "bootstrap replicates",
    "alpha": "1 - the intervals' level",
    "switch_tau": "importance-weight threshold of switch_dr",
    "clip": "weight clip of clipped_dr",
    "lam": "ridge penalty of the reward model (dm, dr)",
    "folds": "cross-fitting folds of the reward model",
    "crossfit": "random | forward (blocks in log order, for a logger that learned)",
    "seed": "seed of the folds, bootstrap and replay draws",
    "device": "cpu | cuda | cuda:N",
    "out_dir": "where ope.csv, report.md and ope.png go",
}


def keys_help() -> str:
    """The ``keys`` section of ``torchroute evaluate --help``: key, default, meaning."""
    width = max(map(len, DEFAULTS))
    lines = ["keys (key=value; lists in brackets, e.g. targets=[lints,arm:atlas-max]):"]
    for key, default in DEFAULTS.items():
        shown = "null" if default is None else str(default).replace("'", "")
        lines.append(f"  {key:<{width}}  {KEY_HELP[key]} (default: {shown})")
    return "\n".join(lines)


__all__ = ["DEFAULTS", "KEY_HELP", "keys_help"]
