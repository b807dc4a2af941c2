"""The CABS cost regimes and the regret relative to a reference learner (every section)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

#: the cost regimes, in order
REGIMES = ("low", "medium", "high")


def cost_regime(rho: float) -> str:
    """CABS cost regimes: low ``rho <= 300``, medium ``300 < rho < 800``, high ``rho >= 800``."""
    if rho <= 300:
        return "low"
    return "medium" if rho < 800 else "high"


def regime_table(results: pd.DataFrame, value: str = "avg_utility") -> pd.DataFrame:
    """Mean of ``value`` per learner (rows) and cost regime (columns), plus ``all``."""
    frame = results.assign(regime=results["rho"].map(cost_regime))
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
        by: more grouping columns (``"regime"``: the cost regime of each rho).

    Returns:
        one row per ``(*by, learner, round)`` with the mean ``relative``.
    """
    keys = ["rho", "seed", "round", *(["run"] if "run" in curves else [])]
    ref = curves[curves["learner"] == reference][[*keys, "cum_regret"]]
    merged = curves.merge(ref, on=keys, suffixes=("", "_ref"))
    merged["relative"] = merged["cum_regret"] - merged["cum_regret_ref"]
    if "regime" in by:
        merged["regime"] = merged["rho"].map(cost_regime)
    return merged.groupby([*by, "learner", "round"], as_index=False)["relative"].mean()


__all__ = ["REGIMES", "cost_regime", "regime_table", "relative_regret"]
