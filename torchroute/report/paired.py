"""Paired differences between two learners of one run, with standard errors.

Every learner of a run plays the same trials, the ``(seed, rho)`` pairs of the run's grid,
so two learners are compared trial by trial: ``d_i = metric_a(i) - metric_b(i)`` for each
trial ``i`` both ran, and per cost regime the mean of ``d_i`` and its standard error
``sd(d) / sqrt(n)`` (sample standard deviation, ``ddof = 1``). Pairing removes the
variation that the trials share (an easy stream, a cheap rho), so the standard error of a
difference is much smaller than the two learners' own spreads would suggest.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from torchroute.errors import InputError
from torchroute.report.regimes import REGIMES, with_regimes

#: the columns that name a trial of a run (shared by every learner of the run)
TRIAL_KEYS = ("seed", "rho")
#: the rows of :func:`paired_differences`: the cost regimes, then every trial
REGIME_ROWS = (*REGIMES, "all")


def _by_trial(results: pd.DataFrame, learner: str, metric: str) -> pd.Series:
    rows = results[results["learner"] == learner]
    if rows.empty:
        raise InputError(f"results have no rows of learner {learner!r}")
    if rows.duplicated(list(TRIAL_KEYS)).any():
        raise InputError(
            f"learner {learner!r} has several rows for one (seed, rho) trial: pass the "
            "results of one run (split several runs by their 'run' column)"
        )
    return rows.set_index(list(TRIAL_KEYS))[metric].astype(float)


def paired_differences(
    results: pd.DataFrame, a: str, b: str, metric: str = "avg_utility"
) -> pd.DataFrame:
    """Mean and standard error of ``metric_a - metric_b`` over the trials both learners ran.

    Args:
        results: ``results.csv`` rows of one run (columns ``learner, seed, rho, <metric>``).
        a: the first learner (the difference is ``a - b``).
        b: the second learner.
        metric: the result column differenced.

    Returns:
        one row per regime of :data:`REGIME_ROWS` that has trials (the results'
        ``regime`` column, else the run's rule, :func:`~torchroute.report.regimes.
        regime_rule`; and ``all``), columns ``mean``,
        ``se`` (``sd / sqrt(n)``, NaN for a single trial) and ``n`` (trials).

    Raises:
        ValueError: a learner without rows, a trial with several rows, or no shared trial.
    """
    diff = (_by_trial(results, a, metric) - _by_trial(results, b, metric)).dropna()
    if diff.empty:
        raise InputError(f"learners {a!r} and {b!r} share no (seed, rho) trial")
    frame = with_regimes(results)
    regime_of = dict(zip(frame["rho"], frame["regime"], strict=True))
    regime = diff.index.get_level_values("rho").map(regime_of)
    out = {}
    for name in REGIME_ROWS:
        part = diff if name == "all" else diff[regime == name]
        n = len(part)
        if n == 0:
            continue
        se = float(part.std(ddof=1)) / math.sqrt(n) if n > 1 else float("nan")
        out[name] = {"mean": float(part.mean()), "se": se, "n": n}
    frame = pd.DataFrame.from_dict(out, orient="index")
    frame.index.name = "regime"
    return frame


def trial_values(
    results: pd.DataFrame, learners: list[str], column: str, regime: str
) -> pd.DataFrame:
    """``column`` of each of ``learners`` per trial in ``regime`` (``"all"``: every trial),
    one column per learner, one row per trial all of them ran (matched on ``rho``, ``seed``
    and ``run`` when present; rows with a NaN dropped)."""
    frame = with_regimes(results)
    if regime != "all":
        frame = frame[frame["regime"] == regime]
    keys = ["rho", "seed", *(["run"] if "run" in frame else [])]
    columns = {name: frame[frame["learner"] == name].set_index(keys)[column] for name in learners}
    return pd.concat(columns, axis=1, join="inner").dropna()


def paired_gap(
    results: pd.DataFrame, a: str, b: str, column: str, regime: str
) -> tuple[float, float]:
    """Mean and standard error of ``a - b`` over the trials both ran, in ``regime``
    (``"all"``: every trial), matched on ``rho``, ``seed`` (and ``run`` when present);
    ``(nan, nan)`` without a shared trial, SE ``0.0`` for a single one."""
    both = trial_values(results, [a, b], column, regime)
    return mean_and_se(both[a] - both[b])


def mean_and_se(values: pd.Series) -> tuple[float, float]:
    """``(mean, sd / sqrt(n))`` of ``values [n]`` (sample sd, ``ddof = 1``); ``(nan, nan)``
    when empty, SE ``0.0`` for a single value."""
    if values.empty:
        return float("nan"), float("nan")
    se = float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0
    return float(values.mean()), se


__all__ = [
    "REGIME_ROWS",
    "TRIAL_KEYS",
    "mean_and_se",
    "paired_differences",
    "paired_gap",
    "trial_values",
]
