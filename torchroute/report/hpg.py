"""Report section of the HPG presets (docs/papers/hpg.md; paper 000).

For results with ``linearized_regret`` and ``dim`` columns (the low-rank experts
simulator): per learner, rank ``s`` (when the results carry it) and dimension ``d``, the
mean ± sd over trials of the regret against the best comparator in the nuclear ball
(``sup_regret``, the supremum of the paper's eq. 9), against the simulator's fixed ``W*``
(``linearized_regret``), the average regret against the per-query best expert, the average
reward and the mean rank per round; then the paper's claims as the paper states them
(Theorem 3: ``O(s sqrt(M T log d))``, with the bound's shape beside the measured regret and
the fitted log-log slopes against ``s`` and ``d``, mean ± sd over seeds), and apart from
them, labelled as hypotheses, comparisons the paper does not make. Learners named
``<name>_tuned`` are compared with each other, theory rows with theory rows. When the curves
carry ``stat_rank``, the rank trajectory is drawn to ``hpg_rank.png``.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from torchroute.report.figures import save_figure

#: the learner (config name) whose claims are checked, and its baselines
HPG_NAME = "hpg"
BASELINES = ("euclidean_quad_pg", "flattened_npg", "loglinear_pg", "exp3")
TUNED = "_tuned"
METRICS = (
    ("sup_regret", "sup regret (ball)"),
    ("linearized_regret", "regret vs W*"),
    ("avg_regret", "avg regret"),
    ("avg_reward", "avg reward"),
)
#: Theorem 3 does not state its constant: a slope in d at most this is "no poly(d)"
D_SLOPE_MAX = 0.25
#: ... and a slope in s at most this is "at most linear in s"
S_SLOPE_MAX = 1.25


def _cell(mean: float, sd: float, digits: int) -> str:
    if mean != mean:  # NaN: the learner does not report it
        return ""
    return f"{mean:.{digits}f}" if sd != sd else f"{mean:.{digits}f} ± {sd:.{digits}f}"


def _keys(results: pd.DataFrame) -> list[str]:
    return ["learner", "s", "dim"] if "s" in results else ["learner", "dim"]


def hpg_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per ``(learner, [s,] dim)``: ``trials`` and ``<metric>_mean`` / ``<metric>_sd``
    (sample sd over trials) of the regret columns present, ``avg_reward`` and ``rank``."""
    metrics = [m for m, _ in METRICS if m in results]
    if "rank" in results:
        metrics.append("rank")
    keys = _keys(results)
    grouped = results.groupby(keys)[metrics]
    table = grouped.mean().add_suffix("_mean").join(grouped.std().add_suffix("_sd"))
    table.insert(0, "trials", results.groupby(keys).size())
    return table


def _value(results: pd.DataFrame) -> str:
    return "sup_regret" if "sup_regret" in results else "linearized_regret"


def loglog_slope(results: pd.DataFrame, learner: str, x: str) -> tuple[float, float, int]:
    """The slope of ``log(regret)`` against ``log(x)`` (``x`` = ``dim`` or ``s``), fitted by
    least squares per seed (and per value of the other key) over the ``x`` values present:
    ``(mean, sample sd, fits)`` over the fits; NaN when fewer than two ``x`` values or a
    regret ``<= 0``."""
    value = _value(results)
    frame = results[results["learner"] == learner]
    other = [k for k in ("s", "dim") if k in frame and k != x]
    slopes = []
    for _, group in frame.groupby(["seed", *other]):
        if group[x].nunique() < 2 or (group[value] <= 0).any():
            continue
        lx, ly = np.log(group[x].to_numpy(float)), np.log(group[value].to_numpy(float))
        slopes.append(float(np.polyfit(lx, ly, 1)[0]))
    if not slopes:
        return float("nan"), float("nan"), 0
    sd = float(np.std(slopes, ddof=1)) if len(slopes) > 1 else float("nan")
    return float(np.mean(slopes)), sd, len(slopes)


def theorem3_rows(results: pd.DataFrame) -> pd.DataFrame:
    """Per ``(s, dim)`` of HPG (theory constants; needs columns ``s, M, rounds``): the
    bound's shape ``s sqrt(M T log d)`` (constant 1: the theorem states none), the measured regret
    (mean over trials) and their ratio."""
    frame = results[results["learner"] == HPG_NAME]
    if frame.empty:
        return pd.DataFrame(columns=["s", "dim", "bound", "regret", "ratio"])
    if "s" not in frame:
        return pd.DataFrame(columns=["s", "dim", "bound", "regret", "ratio"])
    grouped = frame.groupby(["s", "dim"])
    means = grouped[_value(results)].mean().reset_index()
    means.columns = ["s", "dim", "regret"]
    arms = grouped["M"].first().to_numpy(float)
    horizon = grouped["rounds"].first().to_numpy(float)
    means["bound"] = [
        s * math.sqrt(m * t * math.log(d))
        for s, d, m, t in zip(means["s"], means["dim"], arms, horizon, strict=True)
    ]
    means["ratio"] = means["regret"] / means["bound"]
    return means[["s", "dim", "bound", "regret", "ratio"]]


def _slope_text(mean: float, sd: float, n: int) -> str:
    return f"{mean:.2f}" + ("" if sd != sd else f" ± {sd:.2f}") + f" over {n} fits"


def hpg_claims(results: pd.DataFrame) -> list[str]:
    """The paper's claims (Theorem 3 and Table 1) as PASS / FAIL / n/a lines, then our
    hypotheses (labelled so): HPG's regret below each baseline's at the largest ``d``."""
    value = _value(results)
    lines = ["Paper claims (Theorem 3: HPG's regret is O(s sqrt(M T log d)), no poly(d)):", ""]
    mean, sd, n = loglog_slope(results, HPG_NAME, "dim")
    what = f"`{HPG_NAME}` {value} against d grows slower than any power: slope <= {D_SLOPE_MAX}"
    if n == 0:
        lines.append(f"- n/a: {what} (fewer than two d)")
    else:
        verdict = "PASS" if mean <= D_SLOPE_MAX else "FAIL"
        lines.append(f"- {verdict}: {what} (slope {_slope_text(mean, sd, n)})")
    mean, sd, n = loglog_slope(results, HPG_NAME, "s") if "s" in results else (0, 0, 0)
    what = f"`{HPG_NAME}` {value} against s grows at most linearly: slope <= {S_SLOPE_MAX}"
    if n == 0:
        lines.append(f"- n/a: {what} (fewer than two s; run hpg_sweep_s)")
    else:
        verdict = "PASS" if mean <= S_SLOPE_MAX else "FAIL"
        lines.append(f"- {verdict}: {what} (slope {_slope_text(mean, sd, n)})")
    if {"s", "M", "rounds"} <= set(results.columns):
        bound = theorem3_rows(results)
        if not bound.empty:
            worst = float(bound["ratio"].max())
            verdict = "PASS" if worst <= 1 else "FAIL"
            lines.append(
                f"- {verdict}: `{HPG_NAME}` {value} <= s sqrt(M T log d) (the bound with constant "
                f"1) in every (s, d) cell (largest ratio {worst:.3f})"
            )
    lines += ["", "Our hypotheses (the paper reports no online experiment):", ""]
    for name, pairs in (("d", [("flattened_npg", "dim")]),):
        for base, x in pairs:
            hm, _, hn = loglog_slope(results, HPG_NAME, x)
            bm, bsd, bn = loglog_slope(results, base, x)
            what = (
                f"`{base}` (Table 1's d sqrt(M T log T) baseline) {value} grows faster in "
                f"{name} than `{HPG_NAME}`'s"
            )
            if hn == 0 or bn == 0:
                lines.append(f"- n/a: {what} (fewer than two {name})")
            else:
                verdict = "PASS" if bm > hm else "FAIL"
                lines.append(f"- {verdict}: {what} (slopes {_slope_text(bm, bsd, bn)} vs {hm:.2f})")
    if "dim" in results:
        top = int(results["dim"].max())
        keys = ["learner", "s"] if "s" in results else ["learner"]
        means = results[results["dim"] == top].groupby(keys)[value].mean()
        for suffix in ("", TUNED):
            hpg = HPG_NAME + suffix
            for base in BASELINES:
                other = base + suffix
                for key in means.index:
                    head = key[0] if isinstance(key, tuple) else key
                    if head != hpg:
                        continue
                    rest = key[1:] if isinstance(key, tuple) else ()
                    other_key = (other, *rest) if rest else other
                    tag = f"d = {top}" + (f", s = {rest[0]}" if rest else "")
                    what = f"`{hpg}` {value} < `{other}`'s at {tag}"
                    if other_key not in means.index:
                        continue
                    a, b = float(means[key]), float(means[other_key])
                    verdict = "PASS" if a < b else "FAIL"
                    lines.append(f"- {verdict}: {what} ({a:.2f} vs {b:.2f})")
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
    keys = _keys(results)
    head = " | ".join(k if k != "dim" else "d" for k in keys)
    lines = ["", "## HPG: low-rank experts (mean ± sd over trials)", ""]
    lines.append(f"| {head} | trials | " + " | ".join(label for _, label in names) + " |")
    lines.append("|" + "---|" * (len(names) + len(keys) + 1))
    for key, row in table.iterrows():
        cells = [
            _cell(
                row[f"{m}_mean"],
                row[f"{m}_sd"],
                2 if m.endswith("regret") and m != "avg_regret" else 4,
            )
            for m, _ in names
        ]
        trials = int(row["trials"])
        lines.append(
            "| " + " | ".join(str(k) for k in key) + f" | {trials} | " + " | ".join(cells) + " |"
        )
    if {"rounds", "s", "M"} <= set(results.columns):
        lines += _bound_lines(theorem3_rows(results))
    lines += ["", *hpg_claims(results)]
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


def _bound_lines(bound: pd.DataFrame) -> list[str]:
    if bound.empty:
        return []
    lines = [
        "",
        "Theorem 3 beside the measurement (`hpg`, theory constants; the bound's "
        "constant is not stated, shown as 1):",
        "",
    ]
    lines += ["| s | d | s sqrt(M T log d) | measured | ratio |", "|---|---|---|---|---|"]
    for row in bound.itertuples():
        lines.append(
            f"| {row.s} | {row.dim} | {row.bound:.1f} | {row.regret:.2f} | {row.ratio:.3f} |"
        )
    return lines
