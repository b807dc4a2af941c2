"""Report section of subset routing (paper 002): feasibility, reward, R1/R2 curves, spend.

Registered in :data:`torchroute.report.SECTIONS`; it returns ``[]`` for results without the
subset columns (``avg_reward, r2, feasible``).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from torchroute.report.figures import save_figure

LEVEL_ORDER = ("tight", "medium", "loose", "none")


def _keys(frame: pd.DataFrame) -> list[str]:
    return [k for k in ("env", "constraint") if k in frame]


def _order(columns) -> list:
    rank = {c: i for i, c in enumerate(LEVEL_ORDER)}
    return sorted(
        columns,
        key=lambda c: tuple(
            rank.get(x, 99) if isinstance(x, str) else 0
            for x in (c if isinstance(c, tuple) else (c,))
        ),
    )


def per_level(results: pd.DataFrame, value: str, scale: float = 1.0) -> pd.DataFrame:
    """Mean of ``value`` per learner (rows) and (env, constraint) (columns)."""
    keys = _keys(results)
    if not keys:
        return results.groupby("learner")[[value]].mean() * scale
    table = results.pivot_table(index="learner", columns=keys, values=value, aggfunc="mean")
    return table.reindex(columns=_order(table.columns)) * scale


def risk_curves(curves: pd.DataFrame) -> pd.DataFrame:
    """``R1(t)`` (against OPT) and ``R2(t)`` (distance of the average cost to the box)."""
    frame = curves.copy()
    frame["R1"] = frame["cum_r1_opt"] / frame["round"]
    j, gaps = 0, []
    while f"cum_cost_{j}" in frame and f"upper_{j}" in frame:
        avg = frame[f"cum_cost_{j}"] / frame["round"]
        above = (avg - frame[f"upper_{j}"].astype(float)).clip(lower=0)
        below = (frame[f"lower_{j}"].astype(float) - avg).clip(lower=0)
        gaps.append(above.fillna(0) ** 2 + below.fillna(0) ** 2)
        j += 1
    frame["R2"] = np.sqrt(sum(gaps)) if gaps else np.nan
    return frame


def subset_section(results: pd.DataFrame, curves: pd.DataFrame, out: Path) -> list[str]:
    """Markdown lines and plots for subset-routing results (else ``[]``)."""
    if not {"avg_reward", "r2", "feasible"} <= set(results):
        return []
    seeds = results["seed"].nunique() if "seed" in results else 1
    feasible = per_level(results, "feasible", 100.0)
    reward = per_level(results, "avg_reward")
    lines = [
        "## Subset routing: feasibility and reward per constraint level",
        "",
        f"% of runs feasible (R2 <= 1e-9), {seeds} seeds per cell:",
        "",
        feasible.to_markdown(floatfmt=".0f"),
        "",
        "Average reward per round:",
        "",
        reward.to_markdown(floatfmt=".4f"),
        "",
    ]
    images = [_plot_levels(results, out)]
    if not curves.empty and "cum_r1_opt" in curves:
        images.append(_plot_risks(risk_curves(curves), out))
    if "avg_cost_0" in results:
        images.append(_plot_spend(results, out))
    return lines + [f"![{name}]({name}.png)" for name in images] + [""]


def _plot_levels(results: pd.DataFrame, out: Path) -> str:
    envs = sorted(results["env"].unique()) if "env" in results else [None]
    fig, axes = plt.subplots(2, len(envs), figsize=(6 * len(envs), 7), squeeze=False)
    for col, env in enumerate(envs):
        part = results if env is None else results[results["env"] == env]
        for row, (value, label) in enumerate(
            (("avg_reward", "avg reward"), ("feasible", "% feasible"))
        ):
            table = (
                part.pivot_table(index="constraint", columns="learner", values=value)
                if ("constraint" in part)
                else part.groupby("learner")[[value]].mean().T
            )
            table = table.reindex(_order(table.index))
            if value == "feasible":
                table = table * 100
            table.plot.bar(ax=axes[row][col], legend=False)
            axes[row][col].set_ylabel(label)
            axes[row][col].set_title(f"{env or 'all'}")
            if value == "avg_reward":
                lo, hi = float(table.min().min()), float(table.max().max())
                axes[row][col].set_ylim(lo - 0.05 * (hi - lo + 1e-9), hi + 0.05 * (hi - lo))
    fig.tight_layout()
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    save_figure(fig, out / "subset_levels.png")
    return "subset_levels"


def _plot_risks(frame: pd.DataFrame, out: Path) -> str:
    level = next(
        (c for c in LEVEL_ORDER if "constraint" in frame and c in set(frame["constraint"])), None
    )
    part = frame if level is None else frame[frame["constraint"] == level]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, value in zip(axes, ("R1", "R2")):
        mean = part.groupby(["learner", "round"], as_index=False)[value].mean()
        for name, group in mean.groupby("learner"):
            ax.plot(group["round"], group[value], label=name)
        ax.set_xscale("log")
        ax.set_xlabel("round t")
        ax.set_title(f"{value}(t), constraint {level or 'all'}")
    axes[0].set_ylabel("R1 vs OPT (cvxpy)")
    axes[1].set_ylabel("distance of the average cost to S_ori")
    axes[1].legend(fontsize=8)
    save_figure(fig, out / "subset_risks.png")
    return "subset_risks"


def _plot_spend(results: pd.DataFrame, out: Path) -> str:
    keys = ["learner", *(["constraint"] if "constraint" in results else [])]
    points = results.groupby(keys, as_index=False)[["avg_cost_0", "avg_reward"]].mean()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for name, group in points.groupby("learner"):
        ax.scatter(group["avg_cost_0"], group["avg_reward"], label=name)
    if "upper_0" in results:
        for budget in sorted(set(results["upper_0"].astype(float))):
            if np.isfinite(budget):
                ax.axvline(budget, color="grey", ls="--", lw=0.8)
        ax.plot([], [], color="grey", ls="--", lw=0.8, label="budget (upper_0)")
    ax.set_xlabel("average spend per round (cost coordinate 0)")
    ax.set_ylabel("average reward")
    ax.legend(fontsize=7)
    save_figure(fig, out / "subset_spend.png")
    return "subset_spend"
