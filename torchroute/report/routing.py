"""Report section: the field's routing metrics (RouterBench AIQ, RouteLLM APGR and CPT).

For single-choice results with a ``rho`` sweep (at least two values), every learner's
operating points are ``(avg_cost, accuracy, share of calls to each arm)`` per ``rho``,
averaged over seeds. The metrics are those of :mod:`torchroute.functional.routing_metrics`:

- **AIQ** (RouterBench, Hu et al. 2024): the mean quality under the learner's
  non-decreasing convex hull over one cost range common to every learner of the report,
  ``[c_min, c_max]`` = the cheapest and the most expensive operating point of any learner.
- **APGR**, **CPT(50%)**, **CPT(80%)** (RouteLLM, Ong et al. 2024): with ``K`` arms, the
  *weak* model is the cheapest arm (lowest mean ``arm_cost_<k>``) and the *strong* model
  the most accurate arm (highest mean ``arm_accuracy_<k>``); the x-axis is the share of
  calls to the strong arm (``share_<strong>``). These need the per-arm result columns of
  :class:`~torchroute.envs.single_choice.SingleChoiceEnv`; results without them get AIQ
  only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from torchroute.errors import InputError
from torchroute.functional.routing_metrics import aiq, apgr, cpt, pgr
from torchroute.report.arms import arm_label

TITLE = "## Routing metrics (AIQ, APGR, CPT)"


def _arm_columns(results: pd.DataFrame, name: str) -> list[str]:
    """``<name>_0 .. <name>_{K-1}`` when the results hold all of them, else ``[]``."""
    k = 0
    while f"{name}_{k}" in results:
        k += 1
    return [f"{name}_{j}" for j in range(k)]


def weak_and_strong(results: pd.DataFrame) -> tuple[int, int, pd.DataFrame]:
    """The weak (cheapest) and strong (most accurate) arm and every arm's means.

    Args:
        results: trial rows with ``arm_accuracy_<k>`` and ``arm_cost_<k>`` columns.

    Returns:
        ``(weak, strong, arms)``: arm indices and a frame ``[K, 2]`` of the mean
        ``accuracy`` and ``cost`` of always playing each arm (over all trials). Ties go to
        the more accurate arm (weak) and the cheaper arm (strong), then the lower index.
    """
    acc, cost = _arm_columns(results, "arm_accuracy"), _arm_columns(results, "arm_cost")
    if not acc or len(acc) != len(cost):
        raise InputError("results need the columns arm_accuracy_<k> and arm_cost_<k>")
    arms = pd.DataFrame(
        {"accuracy": results[acc].mean().to_numpy(), "cost": results[cost].mean().to_numpy()}
    )
    weak = int(np.lexsort((-arms["accuracy"], arms["cost"]))[0])
    strong = int(np.lexsort((arms["cost"], -arms["accuracy"]))[0])
    return weak, strong, arms


def routing_metrics(results: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float]]:
    """AIQ, APGR, CPT(50%) and CPT(80%) per learner (rows sorted by AIQ).

    Args:
        results: single-choice trial rows (``learner``, ``rho``, ``accuracy``,
            ``avg_cost``; optional ``share_<k>``, ``arm_accuracy_<k>``, ``arm_cost_<k>``).

    Returns:
        ``(table, info)``: the table ``[learners, 4]`` (CPT as a share in ``[0, 1]``, NaN
        when not reached or not available) and the cost range and weak/strong arms used.
    """
    shares = _arm_columns(results, "share")
    points = results.groupby(["learner", "rho"])[["avg_cost", "accuracy", *shares]].mean()
    info: dict[str, float] = {
        "c_min": float(points["avg_cost"].min()),
        "c_max": float(points["avg_cost"].max()),
    }
    has_arms = bool(shares) and len(_arm_columns(results, "arm_accuracy")) == len(shares)
    if has_arms:
        weak, strong, arms = weak_and_strong(results)
        info |= {
            "weak": weak,
            "strong": strong,
            "q_weak": float(arms["accuracy"][weak]),
            "q_strong": float(arms["accuracy"][strong]),
            "c_weak": float(arms["cost"][weak]),
            "c_strong": float(arms["cost"][strong]),
        }
    rows = {}
    for learner, part in points.groupby(level="learner"):
        row = {"AIQ": aiq(part["avg_cost"], part["accuracy"], info["c_min"], info["c_max"])}
        row |= {"APGR": np.nan, "CPT(50%)": np.nan, "CPT(80%)": np.nan}
        if has_arms:
            gap = pgr(part["accuracy"], info["q_weak"], info["q_strong"])
            share = part[f"share_{info['strong']}"]
            row["APGR"] = apgr(share, gap)
            row["CPT(50%)"] = cpt(share, gap, 0.5)
            row["CPT(80%)"] = cpt(share, gap, 0.8)
        rows[learner] = row
    table = pd.DataFrame.from_dict(rows, orient="index").sort_values("AIQ", ascending=False)
    table.index.name = "learner"
    return table, info


def _cell(value: float, percent: bool = False) -> str:
    if np.isnan(value):
        return "not reached" if percent else "n/a"
    return f"{100 * value:.1f}%" if percent else f"{value:.4f}"


def routing_section(results: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[str]:
    """Markdown lines of the AIQ/APGR/CPT table for single-choice results, else ``[]``.

    With one rho each learner is one point: its hull is flat from its cost on (said in a
    note)."""
    if not {"rho", "accuracy", "avg_cost"} <= set(results):
        return []
    table, info = routing_metrics(results)
    lines = [
        "",
        TITLE,
        "",
        "AIQ (RouterBench): mean accuracy under each learner's non-decreasing convex hull "
        "of (average cost, accuracy) over rho, on the common cost range "
        f"[{info['c_min']:.4g}, {info['c_max']:.4g}] (0 below a learner's cheapest point).",
    ]
    if results["rho"].nunique() < 2:
        lines[-1] += (
            " One rho only: each learner is one point, so its AIQ is its accuracy times the "
            "share of the cost range at or above its cost."
        )
    if "strong" in info:
        if info["weak"] == info["strong"]:
            note = "the cheapest arm is also the most accurate: no gap, APGR and CPT are n/a."
        else:
            note = (
                "APGR and CPT(x%) (RouteLLM) use PGR = (accuracy - q_w) / (q_s - q_w) against "
                f"the share of calls to the strong model {arm_label(results, info['strong'])} "
                "(most accurate: "
                f"q_s = {info['q_strong']:.4f}, cost {info['c_strong']:.4g}); weak model "
                f"{arm_label(results, info['weak'])} (cheapest: q_w = {info['q_weak']:.4f}, "
                f"cost {info['c_weak']:.4g}). APGR runs from all-weak (0, 0) to all-strong "
                "(1, 1); CPT is the least share of strong calls at which the learner's own "
                "points reach that PGR. APGR above 1 means the learner beats the strong "
                "model's accuracy with fewer strong calls (it routes each query to a model "
                "better for it than the single most accurate one); below 0, it is less "
                "accurate than the weak model alone. PGR itself runs past [0, 1] likewise."
            )
        lines.append(note)
    else:
        lines.append(
            "APGR and CPT need the per-arm columns share_<k>, arm_accuracy_<k> and "
            "arm_cost_<k>, which these results lack (n/a)."
        )
    shown = table.copy().astype(object)
    for column in table:
        percent = column.startswith("CPT")
        shown[column] = [_cell(v, percent) for v in table[column]]
    lines += ["", *shown.to_markdown(disable_numparse=True).splitlines(), ""]
    return lines
