"""Report section of a run with ``budgets``: compliance per learner and budget, and each
learner's cost-quality curve over the budgets.

It returns ``[]`` for results without a ``budget`` column (every run without ``budgets``),
and :func:`~torchroute.report.write_report` adds it to any report whose results have one.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from torchroute.report.figures import save_figure

#: a trial complies when its mean cost after the warm-up is at most the budget x this
TOLERANCE = 1.01
FIGURE = "budget_curves.png"


def compliance_table(results: pd.DataFrame) -> pd.DataFrame:
    """One row per learner and budget (means over its trials): ``cost_after_warmup``,
    ``overrun_after_warmup`` (mean and ``max``), ``accuracy``, ``rho_start`` (the starting
    rho), ``rho_final`` and ``within`` (trials whose cost after the warm-up is at most
    ``budget x TOLERANCE``, as ``k/n``)."""
    frame = results.assign(
        ok=results["avg_cost_after_warmup"] <= results["budget"] * TOLERANCE,
    )
    grouped = frame.groupby(["learner", "budget"])
    table = pd.DataFrame(
        {
            "cost_after_warmup": grouped["avg_cost_after_warmup"].mean(),
            "overrun_after_warmup": grouped["budget_overrun_after_warmup"].mean(),
            "max_overrun": grouped["budget_overrun_after_warmup"].max(),
            "accuracy": grouped["accuracy"].mean(),
            "rho_start": grouped["rho"].mean(),
            "rho_final": grouped["rho_final"].mean(),
        }
    )
    counts = grouped["ok"].agg(["sum", "size"])
    table["within"] = [f"{int(k)}/{int(n)}" for k, n in counts.to_numpy()]
    return table


def curve_gap(
    results: pd.DataFrame, fixed: pd.DataFrame, tolerance: float = TOLERANCE
) -> pd.DataFrame:
    """Each learner's quality under each budget against its own fixed-rho curve.

    ``results`` are the per-trial results of a run with ``budgets`` (``learner, budget,
    avg_cost, avg_cost_after_warmup, accuracy``), ``fixed`` those of the same learners at
    fixed ``rhos`` (``learner, rho, avg_cost, accuracy``) on the same stream. A learner's
    curve is its mean ``accuracy`` over the seeds at each rho against its mean ``avg_cost``,
    sorted by cost and interpolated linearly (constant beyond its ends).

    Returns one row per learner and budget (means over the seeds): ``cost_after_warmup``,
    ``max_overrun`` (the largest ``avg_cost_after_warmup / budget - 1``), ``within`` (trials
    whose cost after the warm-up is at most ``budget x tolerance``, as ``k/n``),
    ``avg_cost``, ``accuracy``, ``curve`` (the curve at ``avg_cost``: the realised cost,
    the quality's own rounds) and ``gap`` (``accuracy - curve``). A learner missing from
    ``fixed`` has NaN ``curve`` and ``gap``.
    """
    frame = results.assign(
        late_ratio=results["avg_cost_after_warmup"] / results["budget"],
        ok=results["avg_cost_after_warmup"] <= results["budget"] * tolerance,
    )
    rows = []
    for (learner, budget), group in frame.groupby(["learner", "budget"]):
        own = fixed[fixed["learner"] == learner]
        points = own.groupby("rho")[["avg_cost", "accuracy"]].mean().sort_values("avg_cost")
        cost = float(group["avg_cost"].mean())
        curve = float("nan")
        if len(points):
            curve = float(np.interp(cost, points["avg_cost"], points["accuracy"]))
        quality = float(group["accuracy"].mean())
        rows.append(
            {
                "learner": learner,
                "budget": budget,
                "cost_after_warmup": float(group["avg_cost_after_warmup"].mean()),
                "max_overrun": float(group["late_ratio"].max() - 1),
                "within": f"{int(group['ok'].sum())}/{len(group)}",
                "avg_cost": cost,
                "accuracy": quality,
                "curve": curve,
                "gap": quality - curve,
            }
        )
    return pd.DataFrame(rows).set_index(["learner", "budget"])


def budget_section(results: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[str]:
    """Markdown lines of the budgets section (``[]`` without a ``budget`` column); writes
    :data:`FIGURE` into ``out_dir``."""
    del curves  # the section reads the per-trial results only
    if "budget" not in results or results["budget"].isna().all():
        return []
    results = results.dropna(subset=["budget"])
    table = compliance_table(results)
    ok = sum(int(w.split("/")[0]) for w in table["within"])
    total = sum(int(w.split("/")[1]) for w in table["within"])
    _plot(table, out_dir / FIGURE)
    return [
        "## Budgets",
        "",
        f"Each trial is paced to its budget (mean cost per request); {ok} of {total} trials "
        f"spent at most the budget x {TOLERANCE:g} after the first 5% of their rounds. "
        "Cost: mean cost per request after the warm-up; overrun: that cost / budget - 1 "
        "(mean and largest over the seeds); rho: the starting rho chosen on the validation "
        "split and the last one.",
        "",
        table.reset_index().to_markdown(index=False, floatfmt=".4g"),
        "",
        f"![Cost-quality curve over the budgets]({FIGURE})",
        "",
    ]


def _plot(table: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name, group in table.reset_index().groupby("learner"):
        group = group.sort_values("budget")
        ax.plot(group["cost_after_warmup"], group["accuracy"], marker="o", ms=3, label=name)
    for budget in sorted(table.index.get_level_values("budget").unique()):
        ax.axvline(budget, color="0.85", lw=0.8, zorder=0)
    ax.set_xscale("log")
    ax.set_xlabel("mean cost per request after the warm-up (grey: the budgets)")
    ax.set_ylabel("mean quality")
    ax.set_title("Cost-quality curve over the budgets")
    ax.legend(fontsize=8)
    save_figure(fig, path)


__all__ = ["budget_section", "compliance_table", "curve_gap"]
