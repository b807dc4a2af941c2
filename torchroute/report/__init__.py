"""Results tables and plots from ``simulate`` outputs, for any environment.

One module per family of results (:mod:`~torchroute.report.cabs`,
:mod:`~torchroute.report.hpg`, :mod:`~torchroute.report.routing`,
:mod:`~torchroute.report.subset`), the cost regimes and relative regret in
:mod:`~torchroute.report.regimes`, figures saved by :mod:`~torchroute.report.figures`.

Every numeric result column is averaged per learner; where the results carry the
single-choice columns (``rho``, ``avg_utility``, ``accuracy``, ``avg_cost``) the report adds
the CABS cost-regime table and the Pareto frontier, and every ``cum_<name>`` column of the
curves gets a plot (``cum_regret`` also the regret relative to a reference learner).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from omegaconf import OmegaConf

from torchroute.io import check_writable_folder, write_csv_atomic, write_text_atomic
from torchroute.report.arms import attach_arm_names, run_arm_names
from torchroute.report.budgets import budget_section
from torchroute.report.escape import escape_learners, markdown_name
from torchroute.report.figures import save_figure
from torchroute.report.headline import OPENING, headline, learner_classes
from torchroute.report.partial import partial_note, partial_results
from torchroute.report.regimes import (
    REGIMES,
    cost_regime,
    regime_rule,
    regime_table,
    relative_regret,
    with_regimes,
)
from torchroute.report.sections import Section, load_sections
from torchroute.results_file import check_reference, check_results_columns, read_run_csv
from torchroute.run.report_regimes import RuleSpec, check_regime_rule
from torchroute.run.report_sections import DEFAULT_SECTIONS

log = logging.getLogger(__name__)


def run_labels(dirs: Sequence[str | Path]) -> list[str]:
    """A distinct label per output folder: its name (its path where names repeat)."""
    names = [Path(d).name or str(d) for d in dirs]
    return names if len(set(names)) == len(names) else [str(d) for d in dirs]


def load_results(
    dirs: Sequence[str | Path], notes: list[str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Concatenate ``results.csv`` and ``curves.csv`` of several output folders.

    With more than one folder every row gets a ``run`` column (the folder's label, see
    :func:`run_labels`): the trials of different runs share their ``(seed, rho)`` labels.
    A folder without ``results.csv`` (a stopped run, a failed learner) is read from its
    learners' ``runs/<learner>/summary.csv`` (:mod:`~torchroute.report.partial`); the lines
    saying so are appended to ``notes`` when given.
    """
    results, curves = [], []
    labels = run_labels(dirs) if len(dirs) > 1 else [None] * len(dirs)
    for d, label in zip(map(Path, dirs), labels, strict=True):
        path = d / "results.csv"
        if d.is_file():
            raise NotADirectoryError(
                f"{d} is a file; report reads the out_dir (folder) of a simulate run"
            )
        if not path.is_file():
            frame, curve, absent = partial_results(d)
            check_results_columns(frame, d / "runs")
            results.append(frame if label is None else frame.assign(run=label))
            if not curve.empty:
                curves.append(curve if label is None else curve.assign(run=label))
            if notes is not None:
                notes += partial_note(d, list(dict.fromkeys(frame["learner"])), absent)
            continue
        frame = read_run_csv(path)
        check_results_columns(frame, path)
        results.append(frame if label is None else frame.assign(run=label))
        if (d / "curves.csv").is_file():
            curve = read_run_csv(d / "curves.csv")
            curves.append(curve if label is None else curve.assign(run=label))
    curve = pd.concat(curves, ignore_index=True) if curves else pd.DataFrame()
    frame = pd.concat(results, ignore_index=True)
    names = [run_arm_names(d) for d in dirs]  # one set of models, or none named
    if names and names[0] is not None and all(n == names[0] for n in names):
        attach_arm_names(frame, names[0])
    return frame, curve


#: result columns that label trials rather than measure them
LABELS = ("learner", "trial", "seed", "rounds", "run")
#: per-arm (and per-block) result columns (``share_k``, ``qT_value_p``, ...): kept in
#: results.csv, left out of the overall means table; the sections that need them read them
PER_ARM = ("share_", "arm_accuracy_", "arm_cost_", "qT_value_")

# A report section (:data:`~torchroute.report.sections.Section`) returns ``[]`` for
# results that are not its own (it looks at their columns) and may write plots into
# ``out_dir``. Protocols with their own tables (paper comparisons, feasibility, gap tables)
# name theirs by ``_target_`` in the ``report_sections`` key of their config; without it a
# report has :data:`~torchroute.run.report_sections.DEFAULT_SECTIONS`.


def write_report(
    dirs: Sequence[str | Path],
    out_dir: str | Path | None = None,
    reference: str | None = None,
    sections: Sequence[str] | None = None,
    companions: Sequence[str | Path] = (),
    regimes: RuleSpec | None = None,
) -> str:
    """Write ``report.md``, ``summary.csv`` and PNG plots; return the markdown text.

    The report opens with one sentence per learner family (:mod:`~torchroute.report.
    headline`) over these results and those of ``companions``.

    Args:
        dirs: output folders of ``torchroute simulate`` runs.
        out_dir: where to write (the first folder by default).
        reference: learner the relative regret is measured against; ``None``: ``linucb``
            when the results have it. A given learner the results lack is an error.
        sections: dotted paths of the report sections (``report_sections`` of the config);
            ``None``: :data:`~torchroute.run.report_sections.DEFAULT_SECTIONS`.
        companions: out_dirs of the companion runs of ``dirs`` (``companions`` key): each
            gets its own report, appended under its own heading.
        regimes: the rule of the cost regimes (:func:`~torchroute.report.regimes.
            regime_rule`: ``auto``, ``cabs``, ``tertiles`` or ``(low_max, high_min)``);
            ``None``: the first run's ``report_regimes`` key, else ``auto``. The report
            says which rule it used.

    Raises:
        ResultsFileError: a damaged results or curves file, or an unknown ``reference``.
        SectionError: a section path that does not name an importable function.
    """
    section_functions = load_sections(sections)
    notes: list[str] = []
    results, curves = map(escape_learners, load_results(dirs, notes))  # names as text
    results, curves = _assign_regimes(results, curves, regimes, dirs[0])
    out = check_writable_folder(out_dir or dirs[0], "--out" if out_dir else "the run folder")
    extra = [(Path(c), *map(escape_learners, load_results([c]))) for c in companions]
    classes = {markdown_name(k): v for d in dirs for k, v in learner_classes(d).items()}
    runs = [(results, classes)] + [
        (r, {markdown_name(k): v for k, v in learner_classes(c).items()}) for c, r, _ in extra
    ]
    reference = check_reference(
        markdown_name(reference or "linucb"),
        set(results["learner"]) | set(curves.get("learner", [])),
        given=reference is not None,
    )
    lines: list[str] = notes + headline(runs)
    no_curves = [str(d) for d in dirs if not (Path(d) / "curves.csv").is_file()]
    if no_curves:
        note = (
            f"No curves.csv in {', '.join(no_curves)}: the regret curves, the relative regret "
            "and the sections read from the curves are skipped."
        )
        log.warning("%s", note)
        lines += [f"*{note}*", ""]
    # The curves repeat each trial's labels (rho, seed, dim, constraint, ...): those columns
    # label trials and are not averaged as measurements.
    labels = {
        *LABELS,
        "rho",
        "budget",  # a run with budgets: a trial's label, as rho
        *(c for c in curves.columns if not c.startswith(("cum_", "stat_"))),
    }
    measured = [
        c
        for c in results.columns
        if c not in labels
        and not c.startswith(PER_ARM)
        and pd.api.types.is_numeric_dtype(results[c])
    ]
    summary = results.groupby("learner")[measured].mean()
    images: list[str] = []
    if {"rho", "avg_utility", "accuracy", "avg_cost"} <= set(results):  # single choice
        utility = regime_table(results)
        summary = summary.loc[utility.index]
        table = utility.add_prefix("utility_").join(summary)
        lines += [
            "## Average utility per cost regime",
            "",
            f"{results.attrs['regime_rule']} ({results['seed'].nunique()} seeds, "
            f"rho in {sorted(results['rho'].unique().tolist())})",
            "",
            utility.to_markdown(floatfmt=".4f"),
            "",
        ]
        _plot_pareto(results, out / "pareto.png")
        images.append("![Pareto frontier](pareto.png)")
    else:
        table = summary
    write_csv_atomic(out / "summary.csv", table.reset_index())
    lines += [
        "## Overall means over trials",
        "",
        summary.astype(object)
        .where(summary.notna(), None)
        .to_markdown(floatfmt=".4g", missingval="n/a"),
    ]
    if summary.isna().any().any():
        lines += [
            "",
            "n/a: no value for that learner: a statistic only some learners report (their "
            "own state, e.g. a CABS-D weight or an HPG rank), or a measure none of its trials "
            "reached (rounds_to_recover: the utility never settled within the tolerance).",
        ]
    lines += [""]
    for column in [c for c in curves.columns if c.startswith("cum_")]:
        name = column[len("cum_") :]
        path = "regret_curves.png" if name == "regret" else f"curves_{name}.png"
        _plot_curves(curves.dropna(subset=[column]), column, out / path)
        images.append(f"![Cumulative {name}]({path})")
        if name == "regret" and "rho" in curves and reference in set(curves["learner"]):
            _plot_relative(
                relative_regret(curves, reference), reference, out / "relative_regret.png"
            )
    for column in [c for c in curves.columns if c.startswith("stat_")]:
        name = column[len("stat_") :]
        _plot_curves(curves.dropna(subset=[column]), column, out / f"learner_{name}.png")
        images.append(f"![Learner metric {name} per logging interval](learner_{name}.png)")
    for section in section_functions:
        lines += section(results, curves, out)
    if budget_section not in section_functions:  # a run with budgets, whatever its sections
        lines += budget_section(results, curves, out)
    for folder, *_ in extra:
        text = write_report([folder], sections=sections, regimes=regimes)
        if text.startswith(OPENING):  # its sentences are in this report's opening already
            text = text[text.index("\n## ") + 1 :]
        lines += [f"## Companion run {folder.name} ({folder})", "", text.replace("## ", "### ")]
    text = "\n".join(lines + images) + "\n"
    write_text_atomic(out / "report.md", text)
    return text


def _assign_regimes(
    results: pd.DataFrame, curves: pd.DataFrame, given: RuleSpec | None, run_dir: str | Path
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The results and curves with the ``regime`` of each trial under the run's rule (the
    sentence naming it in ``results.attrs["regime_rule"]``); unchanged without ``rho``."""
    if "rho" not in results:
        return results, curves
    rule = regime_rule(results["rho"], given if given is not None else _configured(run_dir))
    results = results.assign(regime=results["rho"].map(rule.of))
    results.attrs["regime_rule"] = rule.describe()
    if "rho" in curves:
        curves = curves.assign(regime=curves["rho"].map(rule.of))
    return results, curves


def _configured(run_dir: str | Path) -> RuleSpec:
    """The ``report_regimes`` key of ``run_dir/config.yaml`` (``auto`` without one, or when
    the file cannot be read: the rest of the report does without it too)."""
    path = Path(run_dir) / "config.yaml"
    try:
        value = OmegaConf.to_container(OmegaConf.load(path)).get("report_regimes")
    except Exception:  # a missing or unreadable config only costs the run's own rule
        return "auto"
    return check_regime_rule(value, f"{path}: report_regimes")


def _plot_pareto(results: pd.DataFrame, path: Path) -> None:
    points = results.groupby(["learner", "rho"], as_index=False)[["avg_cost", "accuracy"]].mean()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name, group in points.groupby("learner"):
        group = group.sort_values("rho")
        ax.plot(group["avg_cost"], group["accuracy"], marker="o", ms=3, label=name)
    ax.set_xlabel("average cost per query")
    ax.set_ylabel("average accuracy")
    ax.set_title("Cost-accuracy trade-off over rho")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def _plot_curves(curves: pd.DataFrame, column: str, path: Path) -> None:
    """One panel per cost regime (when the curves carry ``rho``), else one panel."""
    if "rho" in curves:
        frame = with_regimes(curves)
        regimes = [r for r in REGIMES if r in set(frame["regime"])]
    else:
        frame, regimes = curves.assign(regime="all"), ["all"]
    fig, axes = plt.subplots(1, len(regimes), figsize=(4.5 * len(regimes), 3.8), squeeze=False)
    for ax, regime in zip(axes[0], regimes):
        part = frame[frame["regime"] == regime]
        mean = part.groupby(["learner", "round"], as_index=False)[column].mean()
        for name, group in mean.groupby("learner"):
            _line(ax, group["round"], group[column], name)
        ax.set_title(f"{regime} cost regime" if regime != "all" else "all trials")
        ax.set_xlabel("round")
    axes[0][0].set_ylabel(column.replace("cum_", "cumulative ").replace("stat_", ""))
    axes[0][-1].legend(fontsize=8)
    save_figure(fig, path)


#: curves with at most this many points get a marker on every point (a lone point shows)
FEW_POINTS = 12


def _line(ax, x: pd.Series, y: pd.Series, label: str) -> None:
    """A learner's curve; with few points each is marked, so one point is never invisible."""
    marker = "o" if len(x) <= FEW_POINTS else None
    ax.plot(x, y, label=label, marker=marker, ms=4)


def _plot_relative(relative: pd.DataFrame, reference: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name, group in relative.groupby("learner"):
        _line(ax, group["round"], group["relative"], name)
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xlabel("round")
    ax.set_ylabel(f"cumulative regret minus {reference}'s")
    ax.legend(fontsize=8)
    save_figure(fig, path)


__all__ = [
    "DEFAULT_SECTIONS",
    "REGIMES",
    "Section",
    "cost_regime",
    "load_results",
    "regime_table",
    "relative_regret",
    "run_labels",
    "write_report",
]
