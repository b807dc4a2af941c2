"""Report section of subset routing (paper 002): feasibility, reward, R1/R2 curves, spend.

One of :data:`torchroute.run.report_sections.DEFAULT_SECTIONS`; it returns ``[]`` for results
without the subset columns (``avg_reward, r2, feasible``).
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


def add_final_policy_r1(frame: pd.DataFrame, results: pd.DataFrame) -> pd.DataFrame:
    """``R1_qT(t)``: R1 against the final policy ``q_T`` at every logged round (as the paper
    plots it): ``mean_{s<t} value[block(s)] - cum_reward(t) / t`` with ``value`` the
    ``qT_value_<p>`` result columns (the final policy's expected reward per round in block
    ``p`` of ``P`` equal blocks of the ``rounds``-round run). NaN without those columns."""
    cols = sorted(
        (c for c in results.columns if c.startswith("qT_value_")), key=lambda c: int(c[9:])
    )
    frame = frame.copy()
    if not cols or "cum_reward" not in frame or "rounds" not in results:
        frame["R1_qT"] = np.nan
        return frame
    keys = [k for k in ("learner", "seed", "env", "constraint", "trial") if k in frame]
    keys = [k for k in keys if k in results]
    right = results[[*keys, "rounds", *cols]].drop_duplicates(keys)
    merged = frame.merge(right, on=keys, how="left", validate="many_to_one")
    p = len(cols)
    t = merged["round"].to_numpy(float)[:, None]
    horizon = merged["rounds"].to_numpy(float)[:, None]
    blocks = np.arange(p)[None]
    begin = np.ceil(blocks * horizon / p)
    end = np.where(blocks == p - 1, np.inf, np.ceil((blocks + 1) * horizon / p))
    counts = np.clip(np.minimum(t, end) - begin, 0, None)  # rounds s < t in block p
    values = merged[cols].to_numpy(float)
    frame["R1_qT"] = (counts * values).sum(1) / t[:, 0] - merged["cum_reward"].to_numpy() / t[:, 0]
    return frame


#: rounds shown in the early-rounds table (those logged)
EARLY_ROUNDS = (10, 20, 30, 50, 100, 1000)


def early_rounds_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean over trials of ``R2``, ``R1`` (vs OPT) and ``R1_qT`` per learner, constraint
    and round, at the logged rounds of :data:`EARLY_ROUNDS` and the last round."""
    last = int(frame["round"].max())
    rounds = sorted({r for r in (*EARLY_ROUNDS, last) if r in set(frame["round"])})
    keys = [
        "learner",
        *(["env"] if "env" in frame else []),
        *(["constraint"] if "constraint" in frame else []),
    ]
    part = frame[frame["round"].isin(rounds)]
    return part.groupby([*keys, "round"])[["R2", "R1", "R1_qT"]].mean()


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
        "The paper states no rule for judging a run feasible; a run counts as feasible when "
        "the distance R2 of its average cost to the target box is at most the tolerance, "
        "reported at 1e-9 (exact) and at 1e-3.",
        "",
        f"% of runs feasible (R2 <= 1e-9), {seeds} seeds per cell:",
        "",
        feasible.to_markdown(floatfmt=".0f"),
        "",
    ]
    if "feasible_1e3" in results:
        loose = per_level(results, "feasible_1e3", 100.0)
        lines += [f"% of runs feasible (R2 <= 1e-3), {seeds} seeds per cell:", "",
                  loose.to_markdown(floatfmt=".0f"), ""]  # fmt: skip
    lines += ["Average reward per round:", "", reward.to_markdown(floatfmt=".4f"), ""]
    lines += fig2_verdicts(results)
    images = [_plot_levels(results, out)]
    if not curves.empty and "cum_r1_opt" in curves:
        frame = add_final_policy_r1(risk_curves(curves), results)
        images.append(_plot_risks(frame, out))
        early = early_rounds_table(frame)
        if not early.empty:
            lines += ["R1 (vs OPT), R1 vs the final policy q_T and R2 at early rounds "
                      "(mean over trials):", "", early.to_markdown(floatfmt=".4f"), ""]  # fmt: skip
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
    fig, axes = plt.subplots(1, 3, figsize=(16, 4))
    for ax, value in zip(axes, ("R1", "R1_qT", "R2")):
        mean = part.groupby(["learner", "round"], as_index=False)[value].mean()
        for name, group in mean.groupby("learner"):
            ax.plot(group["round"], group[value], label=name)
        ax.set_xscale("log")
        ax.set_xlabel("round t")
        ax.set_title(f"{value}(t), constraint {level or 'all'}")
    axes[0].set_ylabel("R1 vs OPT (cvxpy)")
    axes[1].set_ylabel("R1 vs the final policy q_T (the paper's)")
    axes[2].set_ylabel("distance of the average cost to S_ori")
    axes[2].legend(fontsize=8)
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


#: constraint levels where a feasibility rate means something (``none`` has no box)
CONSTRAINED = ("tight", "medium", "loose")
#: the constraint-aware learners of the paper's Figure 2 (config names)
AWARE = ("omd_approachability", "cbwk", "tsbwk")
#: the paper's Figure-2 sentences: (learners, text, per-world range of the feasible %)
FIG2_FEASIBLE = (
    (("omd_approachability",), "OMD-Approachability is feasible in 100% of runs",
     {"stochastic": (100, 100), "regime": (100, 100)}),
    (("cbwk",), "CBwK is feasible in ~40% (stochastic) / ~65% (regime) of runs",
     {"stochastic": (25, 55), "regime": (50, 80)}),
    (("tsbwk",), "TS-BwK is feasible in 95-100% (stochastic) / ~85% (regime) of runs",
     {"stochastic": (90, 100), "regime": (75, 95)}),
    (("cucb", "ts", "greedy"), "CUCB, TS and Greedy are rarely feasible (at most 25%)",
     {"stochastic": (0, 25), "regime": (0, 25)}),
)  # fmt: skip


def _rate(part: pd.DataFrame, column: str) -> float:
    return float(part[column].mean() * 100) if len(part) else float("nan")


def fig2_verdicts(results: pd.DataFrame) -> list[str]:
    """The paper's Figure-2 sentences, each REPRODUCED / NOT REPRODUCED per world, with the
    feasible % over the constrained levels at both tolerances; and whether OMD has the
    highest reward among the constraint-aware learners in the regime world (mean ± sd over
    runs). ``[]`` without ``env`` / ``constraint`` labels."""
    if not {"env", "constraint", "learner"} <= set(results):
        return []
    loose = "feasible_1e3" if "feasible_1e3" in results else "feasible"
    frame = results[results["constraint"].isin(CONSTRAINED)]
    lines = [
        "Figure 2 of the paper, sentence by sentence (feasible % over the tight, medium "
        "and loose runs; the range is what we count as reproducing the sentence):",
        "",
        "| sentence | world | learner | feasible % (1e-9) | feasible % (1e-3) | range | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for learners, text, ranges in FIG2_FEASIBLE:
        for world, (lo, hi) in ranges.items():
            for learner in learners:
                part = frame[(frame["env"] == world) & (frame["learner"] == learner)]
                if part.empty:
                    continue
                exact, tol = _rate(part, "feasible"), _rate(part, loose)
                ok = lo <= exact <= hi or lo <= tol <= hi
                verdict = "REPRODUCED" if ok else "NOT REPRODUCED"
                lines.append(f"| {text} | {world} | {learner} | {exact:.0f} | {tol:.0f} | "
                             f"{lo}-{hi} | {verdict} |")  # fmt: skip
    regime = frame[(frame["env"] == "regime") & frame["learner"].isin(AWARE)]
    if not regime.empty and "omd_approachability" in set(regime["learner"]):
        stats = regime.groupby("learner")["avg_reward"].agg(["mean", "std"])
        best = stats["mean"].idxmax()
        verdict = "REPRODUCED" if best == "omd_approachability" else "NOT REPRODUCED"
        cells = ", ".join(f"{k} {v['mean']:.4f} ± {v['std']:.4f}" for k, v in stats.iterrows())
        lines += ["", f"- {verdict}: OMD-Approachability has the highest reward among the "
                  f"constraint-aware methods in the regime world ({cells})"]  # fmt: skip
    return [*lines, ""]
