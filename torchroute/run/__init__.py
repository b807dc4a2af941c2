"""From a composed config to a finished run: options, build, run folder, shards, the run.

``torchroute simulate`` in eight steps:

1. ``cli`` composes the config (Hydra) and builds :class:`RunOptions` once
   (:meth:`RunOptions.from_config`: every key validated; nothing below reads a DictConfig);
2. :func:`run` checks the run folder and ``resume`` (:mod:`torchroute.run.outdir`);
3. :func:`build` builds table -> features -> env as a :class:`Built`
   (:mod:`torchroute.run.build`, the only such path; ``sweep``, ``gap`` and ``serve`` use
   it too);
4. :func:`learner_for` (``Built.learner``) builds each learner from its config node and the
   env's Problem (change options given as lists are first chosen on the validation split
   with the scenario replayed, :mod:`torchroute.run.choose_on_validation`);
5. the inputs are saved: ``config.yaml``, ``fingerprint.json``, ``problem.pt``,
   ``features.pt``;
6. :func:`run_learner` runs each learner over the trial pieces of this rank
   (:mod:`torchroute.run.shards`, :mod:`torchroute.run.ranks`) with
   :func:`torchroute.loop.simulate`, ``jobs`` of them at once in worker processes
   (:mod:`torchroute.run.jobs`);
7. rank 0 merges the pieces and writes ``runs/<learner>/``, ``results.csv``, ``curves.csv``;
8. ``cli`` prints the report (:func:`torchroute.report.write_report`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from torchroute.errors import ConfigError
from torchroute.run.build import (
    Built,
    build,
    build_env,
    build_learner,
    env_takes_table,
    fit_feature_map,
    learner_for,
    load_features,
    load_table,
    trial_grid,
)
from torchroute.run.experiment import run
from torchroute.run.options import FeatureOptions, RunOptions


def run_config(cfg: Any) -> pd.DataFrame:
    """``run(RunOptions.from_config(cfg))``: a composed config (or mapping) run end to end."""
    return run(RunOptions.from_config(cfg))


__all__ = [
    "Built",
    "ConfigError",
    "FeatureOptions",
    "RunOptions",
    "build",
    "build_env",
    "build_learner",
    "env_takes_table",
    "fit_feature_map",
    "learner_for",
    "load_features",
    "load_table",
    "run",
    "run_config",
    "trial_grid",
]
