"""Report section of the CABS presets: the paper's numbers beside the measured ones.

For results with CABS learners (``cabs_c``, ``cabs_d``, ...) and a ``rho`` column: the
measured utility (and regret) per cost regime next to the CABS paper's Table 1 and Table 8
(RouterBench, all-MiniLM) values of :mod:`torchroute.paper_results` (``cabs.csv``), the
relations the paper reports, the same relations as paired differences with standard
errors and PASS/FAIL over the runs given (several runs: one per oracle seed, see
:mod:`torchroute.report.verdicts`), and the relative cumulative regret w.r.t. LinUCB per
cost regime (the paper's Figure 3), drawn to ``cabs_relative_regret.png``. The paper's
numbers and relations are shown only for a run on the paper's table (its models, read from
the run folder); on another table the section keeps the relative regret alone.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from torchroute.paper_results import paper_table
from torchroute.report.arms import ATTR as ARM_NAMES
from torchroute.report.figures import save_figure
from torchroute.report.regimes import REGIMES, cost_regime, relative_regret
from torchroute.report.verdicts import PAPER_RELATIONS, verdict_lines


def _measured(results: pd.DataFrame, metric: str) -> pd.DataFrame:
    frame = results.assign(regime=results["rho"].map(cost_regime))
    return frame.pivot_table(index="learner", columns="regime", values=metric, aggfunc="mean")


def _markdown(frame: pd.DataFrame) -> list[str]:
    return frame.to_markdown(floatfmt=".4f", missingval="").splitlines()


def paper_comparison(results: pd.DataFrame, metric: str = "avg_utility") -> pd.DataFrame:
    """Measured vs paper per learner and regime: columns ``<regime>`` and ``<regime>_paper``."""
    paper = paper_table("cabs")
    paper = paper[paper["metric"] == metric]
    # Table 8 (all-MiniLM) first; Table 1 adds the CABS-C rows.
    paper = paper.sort_values("table", ascending=False).drop_duplicates(["learner", "regime"])
    ref = paper.pivot_table(index="learner", columns="regime", values="value")
    measured = _measured(results, metric)
    out = pd.DataFrame(index=measured.index)
    for regime in REGIMES:
        if regime in measured:
            out[regime] = measured[regime]
            out[f"{regime}_paper"] = ref[regime].reindex(out.index) if regime in ref else None
    return out


def relations(results: pd.DataFrame) -> list[str]:
    """The paper's relations per regime (:data:`~torchroute.report.verdicts.PAPER_RELATIONS`,
    the table the verdicts judge too): which hold in the measured mean utilities."""
    util = _measured(results, "avg_utility")
    lines = []
    for rel in PAPER_RELATIONS:
        if rel.a not in util.index or rel.b not in util.index:
            continue
        cells = []
        for regime in REGIMES:
            if regime not in util:
                continue
            x, y = util.loc[rel.a, regime], util.loc[rel.b, regime]
            ok = x > y if rel.op == ">" else x >= y
            cells.append(f"{regime}: {'holds' if ok else 'FAILS'} ({x:.4f} vs {y:.4f})")
        lines.append(f"- {rel.text}: " + "; ".join(cells))
    return lines


def split_runs(results: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """``{run label: its rows}`` by the ``run`` column (one run ``"run"`` without it)."""
    if "run" not in results:
        return {"run": results}
    return {str(name): part for name, part in results.groupby("run", sort=False)}


#: the models of the table the paper measured (RouterBench: its Table 1 and Table 8): its
#: numbers and relations are compared only with a run on exactly these models
PAPER_MODELS = frozenset(
    {
        "WizardLM/WizardLM-13B-V1.2",
        "claude-instant-v1",
        "claude-v1",
        "claude-v2",
        "gpt-3.5-turbo-1106",
        "gpt-4-1106-preview",
        "meta/code-llama-instruct-34b-chat",
        "meta/llama-2-70b-chat",
        "mistralai/mistral-7b-chat",
        "mistralai/mixtral-8x7b-chat",
        "zero-one-ai/Yi-34B-Chat",
    }
)


def measured_on_paper_table(results: pd.DataFrame) -> bool:
    """Whether ``results`` come from the paper's table: the models of the run folders'
    ``problem.pt`` (``results.attrs["arm_names"]``, :mod:`torchroute.report.arms`) are
    :data:`PAPER_MODELS`; results with no recorded models are not."""
    names = results.attrs.get(ARM_NAMES)
    return isinstance(names, list) and set(names) == PAPER_MODELS


def cabs_section(results: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[str]:
    """Markdown lines (and ``cabs_relative_regret.png``) for CABS results, else ``[]``.

    The paper's numbers and relations appear only for results measured on its table
    (:func:`measured_on_paper_table`); on another table the section has the relative
    regret alone, with a line saying why. Its regimes are the paper's (``rho <= 300``,
    ``rho >= 800``), not the run's ``report_regimes``.
    """
    if "rho" not in results or not results["learner"].astype(str).str.startswith("cabs").any():
        return []
    # the paper's regimes (its fixed cuts), whatever rule the rest of the report follows
    results = results.assign(regime=results["rho"].map(cost_regime))
    if "rho" in curves:
        curves = curves.assign(regime=curves["rho"].map(cost_regime))
    if measured_on_paper_table(results):
        lines = ["", "## CABS: measured vs paper (RouterBench; Table 1 and Table 8, all-MiniLM)"]
        lines += ["", *_markdown(paper_comparison(results, "avg_utility"))]
        if "avg_regret" in results:
            lines += ["", "Average regret (paper: Table 1):", ""]
            lines += _markdown(paper_comparison(results, "avg_regret"))
        rel = relations(results)
        if rel:
            lines += ["", "Paper relations (average utility per regime):", "", *rel]
        verdicts = verdict_lines(split_runs(results))
        if verdicts:
            lines += ["", *verdicts]
    else:
        lines = [
            "",
            "## CABS",
            "",
            "The CABS paper's numbers were measured on RouterBench's 11 models; this run's "
            "table has other models (or none recorded in problem.pt), so they are not "
            "compared here.",
        ]
    if not curves.empty and "cum_regret" in curves and (curves["learner"] == "linucb").any():
        mean = relative_regret(curves, "linucb", by=("regime",))
        fig, axes = plt.subplots(1, 3, figsize=(15, 4), sharey=False)
        for ax, regime in zip(axes, REGIMES, strict=True):
            part = mean[mean["regime"] == regime]
            for name, group in part.groupby("learner"):
                ax.plot(group["round"], group["relative"], label=str(name))
            ax.set_title(f"{regime} cost sensitivity")
            ax.set_xlabel("round")
            ax.axhline(0.0, color="grey", lw=0.5)
        axes[0].set_ylabel("cumulative regret - LinUCB's")
        axes[-1].legend(fontsize=7)
        path = Path(out_dir) / "cabs_relative_regret.png"
        save_figure(fig, path, dpi=110)
        last = mean[mean["round"] == mean["round"].max()]
        table = last.pivot_table(index="learner", columns="regime", values="relative")
        table = table.reindex(columns=[r for r in REGIMES if r in table.columns])
        lines += ["", "Relative cumulative regret vs LinUCB at the last round (Figure 3):", ""]
        lines += _markdown(table)
        lines += ["", f"![relative regret per regime]({path.name})"]
    return lines
