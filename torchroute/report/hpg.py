"""Report section of the HPG presets (docs/papers/hpg.md; paper 000).

For results with ``linearized_regret`` and ``dim`` columns (the low-rank experts
simulator): per learner and dimension ``d``, the mean ± sd over trials of the final
(cumulative, eq. 9) linearized regret, of the average reward and of the mean rank per round
(learners that report one); the paper's relations as PASS / FAIL lines; and, when the
curves carry ``stat_rank``, the rank trajectory (mean rank per logging interval) of the
learners that report a rank, drawn to ``hpg_rank.png``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from torchroute.report.figures import save_figure

#: the learner (config name) whose relations are checked, and its baselines
HPG_NAME = "hpg"
BASELINES = ("euclidean_quad_pg", "loglinear_pg")
LOW_DIM, HIGH_DIM = 64, 256
METRICS = (("linearized_regret", "linearized regret"), ("avg_reward", "avg reward"))


def _cell(mean: float, sd: float, digits: int) -> str:
    if mean != mean:  # NaN: the learner does not report it
        return ""
    return f"{mean:.{digits}f}" if sd != sd else f"{mean:.{digits}f} ± {sd:.{digits}f}"


def hpg_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per ``(learner, dim)``: ``trials`` and ``<metric>_mean`` / ``<metric>_sd`` (sample sd
    over trials) of ``linearized_regret``, ``avg_reward`` and ``rank`` (when present)."""
    metrics = [m for m, _ in METRICS if m in results]
    if "rank" in results:
        metrics.append("rank")
    grouped = results.groupby(["learner", "dim"])[metrics]
    table = grouped.mean().add_suffix("_mean").join(grouped.std().add_suffix("_sd"))
    table.insert(0, "trials", results.groupby(["learner", "dim"]).size())
    return table


def hpg_relations(results: pd.DataFrame) -> list[str]:
    """The paper's relations on the mean linearized regret, one PASS / FAIL / n/a line each:
    HPG below each baseline at ``d = 256``, and HPG's at ``d = 256`` below twice its own at
    ``d = 64``."""
    means = results.groupby(["learner", "dim"])["linearized_regret"].mean()

    def get(learner: str, dim: int) -> float | None:
        return float(means[(learner, dim)]) if (learner, dim) in means.index else None

    lines = []
    hpg_high = get(HPG_NAME, HIGH_DIM)
    for base in BASELINES:
        what = f"`{HPG_NAME}` linearized regret < `{base}`'s at d = {HIGH_DIM}"
        other = get(base, HIGH_DIM)
        if hpg_high is None or other is None:
            lines.append(f"- n/a: {what} (no results for both)")
        else:
            verdict = "PASS" if hpg_high < other else "FAIL"
            lines.append(f"- {verdict}: {what} ({hpg_high:.2f} vs {other:.2f})")
    what = f"`{HPG_NAME}` linearized regret at d = {HIGH_DIM} < 2 x its regret at d = {LOW_DIM}"
    hpg_low = get(HPG_NAME, LOW_DIM)
    if hpg_high is None or hpg_low is None:
        lines.append(f"- n/a: {what} (no results for both)")
    else:
        verdict = "PASS" if hpg_high < 2 * hpg_low else "FAIL"
        lines.append(f"- {verdict}: {what} ({hpg_high:.2f} vs 2 x {hpg_low:.2f})")
    return lines


def rank_trajectory(curves: pd.DataFrame) -> pd.DataFrame:
    """The mean rank per logging interval (the loop's ``stat_rank`` curve: what HPG's
    ``update`` returned, averaged over the interval), averaged over trials: columns
    ``learner, dim, round, rank``; only learners that report a rank."""
    if curves.empty or "stat_rank" not in curves:
        return pd.DataFrame(columns=["learner", "dim", "round", "rank"])
    frame = curves.dropna(subset=["stat_rank"]).rename(columns={"stat_rank": "rank"})
    return frame.groupby(["learner", "dim", "round"], as_index=False)["rank"].mean()


def _plot_rank(trajectory: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for (learner, dim), group in trajectory.groupby(["learner", "dim"]):
        ax.plot(group["round"], group["rank"], label=f"{learner} d={dim}")
    ax.set_xlabel("round")
    ax.set_ylabel("mean rank of W_m per round")
    ax.legend(fontsize=7)
    save_figure(fig, path, dpi=110)


def hpg_section(results: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[str]:
    """Markdown lines (and ``hpg_rank.png``) for low-rank-experts results, else ``[]``."""
    if not {"linearized_regret", "dim", "learner"} <= set(results.columns):
        return []
    table = hpg_table(results)
    names = [(m, label) for m, label in METRICS if m in results]
    if "rank" in results:
        names.append(("rank", "rank per round"))
    lines = ["", "## HPG: low-rank experts (mean ± sd over trials)", ""]
    lines.append("| learner | d | trials | " + " | ".join(label for _, label in names) + " |")
    lines.append("|" + "---|" * (len(names) + 3))
    for (learner, dim), row in table.iterrows():
        cells = [
            _cell(row[f"{m}_mean"], row[f"{m}_sd"], 2 if m == "linearized_regret" else 4)
            for m, _ in names
        ]
        trials = int(row["trials"])
        lines.append(f"| {learner} | {dim} | {trials} | " + " | ".join(cells) + " |")
    lines += ["", "Paper relations (mean final linearized regret):", "", *hpg_relations(results)]
    trajectory = rank_trajectory(curves)
    if not trajectory.empty:
        path = Path(out_dir) / "hpg_rank.png"
        _plot_rank(trajectory, path)
        rounds = sorted(trajectory["round"].unique())
        shown = [rounds[round(i * (len(rounds) - 1) / 4)] for i in range(5)]
        shown = sorted(set(shown))
        wide = trajectory[trajectory["round"].isin(shown)].pivot_table(
            index=["learner", "dim"], columns="round", values="rank"
        )
        lines += ["", "Rank trajectory (mean rank per logging interval ending at round):", ""]
        lines.append("| learner | d | " + " | ".join(str(r) for r in wide.columns) + " |")
        lines.append("|" + "---|" * (len(wide.columns) + 2))
        for (learner, dim), row in wide.iterrows():
            cells = " | ".join(f"{v:.2f}" for v in row)
            lines.append(f"| {learner} | {dim} | {cells} |")
        lines += ["", f"![HPG rank trajectory]({path.name})"]
    return lines
