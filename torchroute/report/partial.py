"""The results of a run that did not finish: its learners' ``runs/<learner>/`` files.

A run writes ``results.csv`` and ``curves.csv`` once every learner has finished, but each
learner's ``runs/<learner>/summary.csv`` and ``curve.csv`` as soon as it is done. When a run
is stopped (or a learner fails) the report is built from those and says which learners of
the run's ``config.yaml`` have no results.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from torchroute.results_file import ResultsFileError, read_run_csv


def configured_learners(run_dir: Path) -> list[str]:
    """The learners ``run_dir/config.yaml`` asked for (``run_learners`` when set, else every
    key of ``learners``); empty when the file is missing or unreadable."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        return []
    try:
        config = OmegaConf.to_container(OmegaConf.load(path))
    except Exception:  # an unreadable config only costs the list of absent learners
        return []
    if not isinstance(config, dict):
        return []
    chosen = config.get("run_learners")
    names = chosen if isinstance(chosen, list) else list((config.get("learners") or {}).keys())
    return [str(n) for n in names]


def finished_learners(run_dir: Path) -> list[str]:
    """The learners of ``run_dir/runs/`` that wrote their ``summary.csv``, sorted."""
    runs = run_dir / "runs"
    if not runs.is_dir():
        return []
    return sorted(p.parent.name for p in runs.glob("*/summary.csv") if p.is_file())


def partial_results(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """``(results, curves, absent)`` of an unfinished run from ``runs/*/summary.csv``.

    ``results`` has one row per finished learner x trial (as ``results.csv``), ``curves``
    one per logged round (empty when no ``curve.csv`` is there), ``absent`` the configured
    learners without a summary, in the config's order.

    Raises:
        FileNotFoundError: no learner of ``run_dir`` finished (nothing to report).
    """
    done = finished_learners(run_dir)
    if not done:
        raise FileNotFoundError(
            f"{run_dir / 'results.csv'} not found and no learner of {run_dir} finished "
            "(no runs/<learner>/summary.csv): is it the out_dir of a simulate run?"
        )
    order = configured_learners(run_dir)
    done.sort(key=lambda n: order.index(n) if n in order else len(order))
    summaries, curves = [], []
    for name in done:
        folder = run_dir / "runs" / name
        summary = read_run_csv(folder / "summary.csv")
        if set(summary["learner"].astype(str)) != {name}:
            raise ResultsFileError(
                f"{folder / 'summary.csv'}: column 'learner' must be {name!r} in every row"
            )
        summaries.append(summary)
        if (folder / "curve.csv").is_file():
            curves.append(read_run_csv(folder / "curve.csv"))
    absent = [n for n in order if n not in done]
    curve = pd.concat(curves, ignore_index=True) if curves else pd.DataFrame()
    return pd.concat(summaries, ignore_index=True), curve, absent


def partial_note(run_dir: Path, finished: list[str], absent: list[str]) -> list[str]:
    """The report's lines saying that ``run_dir`` did not finish and what is missing."""
    missing = ", ".join(absent) if absent else "none of its configured learners"
    return [
        "## An unfinished run",
        "",
        f"{run_dir} has no results.csv (the run was stopped or a learner failed): this report "
        f"covers the learners that finished ({', '.join(finished)}); "
        f"without results: {missing}.",
        "",
    ]


__all__ = ["configured_learners", "finished_learners", "partial_note", "partial_results"]
