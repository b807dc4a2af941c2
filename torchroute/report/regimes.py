"""The cost regimes of a run and the regret relative to a reference learner (every section).

A run's trials fall into three cost regimes, ``low``, ``medium`` and ``high``, by their
``rho``: ``rho <= low_max`` is low, ``rho >= high_min`` high, the rest medium. Where the
cuts come from is the run's rule (:func:`regime_rule`, the ``report_regimes`` key or
``torchroute report --regimes``):

- ``cabs``: the fixed cuts of the CABS paper's tables, ``rho <= 300`` and ``rho >= 800``
  (a table whose costs are in its unit: RouterBench, the Open LLM table);
- ``tertiles``: the run's distinct rhos sorted and split into three groups as equal as
  they can be (the first group the largest), whatever the unit of the table's costs;
- ``[low_max, high_min]``: the user's own cuts;
- ``auto`` (the default): ``cabs``, unless ``tertiles`` puts the run's rhos into more
  regimes than ``cabs`` does (rhos 0..300 on a table of dollar costs: one regime by the
  CABS cuts, three by tertiles). Every preset's rho grid keeps the CABS cuts.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from torchroute.run.report_regimes import (
    CABS_CUTS,
    RegimeRule,
    RuleSpec,
    regime_rule,
)

#: the cost regimes, in order
REGIMES = ("low", "medium", "high")


def cost_regime(rho: float) -> str:
    """CABS cost regimes: low ``rho <= 300``, medium ``300 < rho < 800``, high ``rho >= 800``."""
    return RegimeRule("cabs", *CABS_CUTS).of(rho)


def with_regimes(frame: pd.DataFrame, rule: RuleSpec | None = None) -> pd.DataFrame:
    """``frame`` with a ``regime`` column: the one it has (the report sets it once for the
    run's rule), else from its ``rho`` by :func:`regime_rule` over its own rhos."""
    if "regime" in frame:
        return frame
    cuts = regime_rule(frame["rho"], rule)
    return frame.assign(regime=frame["rho"].map(cuts.of))


def regimes_present(frame: pd.DataFrame) -> list[str]:
    """The regimes of :data:`REGIMES` that some row of ``frame`` (with ``regime``) has."""
    present = set(with_regimes(frame)["regime"])
    return [r for r in REGIMES if r in present]


def regime_table(results: pd.DataFrame, value: str = "avg_utility") -> pd.DataFrame:
    """Mean of ``value`` per learner (rows) and cost regime (columns), plus ``all``."""
    frame = with_regimes(results)
    table = frame.pivot_table(index="learner", columns="regime", values=value, aggfunc="mean")
    table = table.reindex(columns=[r for r in REGIMES if r in table.columns])
    table["all"] = frame.groupby("learner")[value].mean()
    return table.sort_values("all", ascending=False)


def relative_regret(curves: pd.DataFrame, reference: str, by: Sequence[str] = ()) -> pd.DataFrame:
    """``R_alg(t) - R_ref(t)`` per learner and round, matched on (rho, seed), then averaged.

    Args:
        curves: ``curves.csv`` rows with ``learner, rho, seed, round, cum_regret`` (and
            ``run`` when they gather several runs: trials are matched within a run).
        reference: the learner subtracted.
        by: more grouping columns (``"regime"``: the cost regime of each rho, the curves'
            ``regime`` column when they have one).

    Returns:
        one row per ``(*by, learner, round)`` with the mean ``relative``.
    """
    keys = ["rho", "seed", "round", *(["run"] if "run" in curves else [])]
    ref = curves[curves["learner"] == reference][[*keys, "cum_regret"]]
    merged = curves.merge(ref, on=keys, suffixes=("", "_ref"))
    merged["relative"] = merged["cum_regret"] - merged["cum_regret_ref"]
    if "regime" in by:
        merged = with_regimes(merged)
    return merged.groupby([*by, "learner", "round"], as_index=False)["relative"].mean()


__all__ = [
    "CABS_CUTS",
    "REGIMES",
    "RegimeRule",
    "cost_regime",
    "regime_rule",
    "regime_table",
    "regimes_present",
    "relative_regret",
    "with_regimes",
]
