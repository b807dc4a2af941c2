"""Report section: one leaderboard of static anchor routers, cold and warm online learners.

Learners fall into three families by their config in ``<out_dir>/config.yaml`` (never
instantiated; the class found by :func:`~torchroute.run.classes.learner_class`): **static**
(a class whose ``role`` is static, a router that never learns online, or reference, the
random router), **warm online** (``warm_start`` set, or a class that
:attr:`~torchroute.learners.Learner.starts_warm`, such as an online learner built on a
router fitted on train) and **cold online** (the rest). Per cost regime (the run's rule,
:func:`~torchroute.report.regimes.regime_rule`, named under the title) and phase (the whole
stream; with scenario columns ``avg_utility_before``/``avg_utility_after``, the rounds
before and after the change too), each learner's cell is the mean utility over the
regime's trials +- its standard error (trials' standard deviation / sqrt(n)); the best of
each family is in bold. The oracle row (every query's best arm, an upper bound) is
``avg_utility + avg_regret``. AIQ comes from
:func:`~torchroute.report.routing.routing_metrics`.

The **baseline** of each regime is the static router with the highest mean ``val_utility``
over the regime's trials (its mean utility on the validation split, or on the share of
train it held out, recorded by the router itself): chosen on validation, reported on test.
Static routers without a ``val_utility`` (``knn`` with a fixed ``k``, ``regressor``,
``random``) are not candidates; when none has one (a run from before the column existed),
the baseline is the static router with the best test mean, and the report says so.

The verdict compares the best warm online learner with the baseline per regime, paired on
the trials (same rho and seed): a difference within one standard error of the paired
differences is a tie. With a scenario, a second sentence compares the best online learner
(warm or cold) with the baseline on the rounds after the change, and says in how many
trials it recovered (``rounds_to_recover``). Then one sentence per regime and phase names
that regime's best online learner, its baseline and, after the change, the share of the
change loss it recovers; with a ``static_refit`` row (family ``reference``: the static
router refitted with the change applied) a table gives the change loss and every online
learner's share (:mod:`torchroute.report.change_loss`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from torchroute.report.paired import paired_gap
from torchroute.report.regimes import regimes_present, with_regimes
from torchroute.run.classes import learner_class

TITLE = "## Leaderboard: static anchors, cold and warm online learners"
FAMILIES = ("static", "cold online", "warm online", "reference")
PHASES = {"whole": "avg_utility", "before": "avg_utility_before", "after": "avg_utility_after"}


def learner_families(out_dir: str | Path, learners: list[str]) -> dict[str, str]:
    """``{learner: family}`` from ``out_dir/config.yaml``: ``reference`` for a class that
    :attr:`~torchroute.learners.Learner.refits_after_change` (``static_refit``: a yardstick,
    never a baseline), ``static`` for the learners whose
    class's :attr:`~torchroute.learners.Learner.role` is static or reference (the random
    router), else ``warm online`` when the node sets ``warm_start`` or the class
    :attr:`~torchroute.learners.Learner.starts_warm`, else ``cold online``
    (also when the class is unknown)."""
    nodes: Mapping = {}
    path = Path(out_dir) / "config.yaml"
    if path.is_file():
        try:
            nodes = OmegaConf.to_container(OmegaConf.load(path)).get("learners") or {}
        except Exception:  # an unreadable config only costs the grouping
            nodes = {}
    out = {}
    for name in learners:
        node = nodes.get(name) if isinstance(nodes.get(name), Mapping) else {}
        cls = learner_class(node)
        if cls is not None and cls.refits_after_change:
            out[name] = "reference"
        elif cls is not None and cls.role in ("static", "reference"):
            out[name] = "static"
        elif node.get("warm_start") is not None or (cls is not None and cls.starts_warm):
            out[name] = "warm online"
        else:
            out[name] = "cold online"
    return out


def _with_regimes(results: pd.DataFrame) -> pd.DataFrame:
    return with_regimes(results)


def cell_stats(results: pd.DataFrame, column: str) -> pd.DataFrame:
    """Mean and standard error of ``column`` per learner and regime (``all`` included)."""
    frame = _with_regimes(results)
    parts = [frame, frame.assign(regime="all")]
    stats = pd.concat(parts).groupby(["learner", "regime"])[column].agg(["mean", "std", "count"])
    stats["se"] = stats["std"].fillna(0.0) / np.sqrt(stats["count"])
    return stats[["mean", "se"]]


def _best(stats: pd.DataFrame, learners: list[str], regime: str) -> str | None:
    means = {n: stats.loc[(n, regime), "mean"] for n in learners if (n, regime) in stats.index}
    means = {n: m for n, m in means.items() if not np.isnan(m)}
    return max(means, key=means.get) if means else None


def baselines(
    results: pd.DataFrame, families: Mapping[str, str], regimes: list[str]
) -> tuple[dict[str, str], bool]:
    """``({regime: baseline}, on_validation)``: per regime, the static router with the best
    mean ``val_utility`` (``on_validation`` True); when no static router has one, the
    static router with the best mean test ``avg_utility`` (``on_validation`` False)."""
    static = [n for n, f in families.items() if f == "static"]
    on_validation = "val_utility" in results and bool(
        results.loc[results["learner"].isin(static), "val_utility"].notna().any()
    )
    stats = cell_stats(results, "val_utility" if on_validation else "avg_utility")
    chosen = {regime: _best(stats, static, regime) for regime in regimes}
    return {r: n for r, n in chosen.items() if n is not None}, on_validation


def baseline_line(results: pd.DataFrame, families: Mapping[str, str], regimes: list[str]) -> str:
    """The sentence naming each regime's baseline and how it was chosen."""
    chosen, on_validation = baselines(results, families, regimes)
    if not chosen:
        return "No baseline: the run has no static router."
    names = set(chosen.values())
    which = (
        next(iter(names))
        if len(names) == 1
        else ", ".join(f"{regime}: {name}" for regime, name in chosen.items())
    )
    if on_validation:
        return (
            f"Baseline: {which}, the best static router on validation (the highest mean "
            "val_utility over the regime's trials; static routers without val_utility are "
            "not candidates)."
        )
    return (
        f"Baseline: {which}, the best static router on test: no static router of this run "
        "records val_utility (a run from before it was recorded), so the baseline is the "
        "choice most favourable to the static side."
    )


def verdict(
    results: pd.DataFrame,
    families: Mapping[str, str],
    regimes: list[str],
    column: str = "avg_utility",
) -> str:
    """One sentence: the best warm online learner (``column="avg_utility_after"``: the best
    online learner, warm or cold) against each regime's baseline (:func:`baselines`)."""
    stats = cell_stats(results, column)
    static = [n for n, f in families.items() if f == "static"]
    chosen = baselines(results, families, regimes)[0]
    after = column == "avg_utility_after"
    wanted = ("warm online", "cold online") if after else ("warm online",)
    online = [n for n, f in families.items() if f in wanted]
    kind = "after the change, online" if after else "warm"
    if not online:
        online, kind = [n for n, f in families.items() if f == "cold online"], "cold"
    if not static or not online:
        return "No verdict: the run lacks a static router or an online learner."
    best_online = _best(stats, online, "all")
    parts, wins, ties = [], 0, 0
    regimes = [r for r in regimes if r in chosen]
    for regime in regimes:
        best_static = chosen[regime]
        gap, se = paired_gap(results, best_online, best_static, column, regime)
        tie = abs(gap) <= se
        wins += gap > 0 and not tie
        ties += tie
        word = "tie" if tie else ("above" if gap > 0 else "below")
        parts.append(f"{regime} {gap:+.4f} +- {se:.4f} vs {best_static} ({word})")
    below = len(regimes) - wins - ties
    head = (
        f"{kind} {best_online} is above the baseline in {wins}, tied (within one "
        f"SE) in {ties} and below in {below} of {len(regimes)} regimes"
    )
    text = f"{head}: {'; '.join(parts)}."
    if after and "rounds_to_recover" in results:
        rec = results.loc[results["learner"] == best_online, "rounds_to_recover"]
        text += (
            f" {best_online} recovered (rounds_to_recover defined) in {int(rec.notna().sum())} "
            f"of {len(rec)} trials"
            + (f", after {rec.mean():.0f} rounds on average." if rec.notna().any() else ".")
        )
    return text


def _change_lines(
    results: pd.DataFrame, families: Mapping[str, str], regimes: list[str], out_dir: Path
) -> list[str]:
    """The per-regime sentences and the change-loss table
    (:mod:`torchroute.report.change_loss`)."""
    from torchroute.report.change_loss import (
        change_loss_lines,
        regime_verdicts,
        remaining_rounds,
    )

    chosen, on_validation = baselines(results, families, regimes)
    remaining = remaining_rounds(results, out_dir)
    per_regime = regime_verdicts(results, families, chosen, on_validation, remaining)
    head = ["Per regime and phase (paired over the trials, +- one SE):", ""] if per_regime else []
    return head + per_regime + change_loss_lines(results, families, chosen, remaining)


def leaderboard_section(results: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[str]:
    """Markdown lines of the leaderboard (single-choice results with ``avg_utility``)."""
    if not {"learner", "rho", "avg_utility"} <= set(results):
        return []
    learners = sorted(results["learner"].unique())
    families = learner_families(out_dir, learners)
    regimes = regimes_present(results)
    columns = [*regimes, "all"]
    lines = ["", TITLE, ""]
    if "regime_rule" in results.attrs:
        lines += [results.attrs["regime_rule"], ""]
    lines += [baseline_line(results, families, regimes), ""]
    lines += [verdict(results, families, regimes), ""]
    if "avg_utility_after" in results and results["avg_utility_after"].notna().any():
        lines[-1:] = ["", verdict(results, families, regimes, "avg_utility_after"), ""]
    lines += _change_lines(results, families, regimes, out_dir)
    aiq = {}
    if {"accuracy", "avg_cost"} <= set(results):
        from torchroute.report.routing import routing_metrics

        aiq = routing_metrics(results)[0]["AIQ"].to_dict()
    for phase, column in PHASES.items():
        if column not in results or results[column].isna().all():
            continue
        stats = cell_stats(results, column)
        lines += [
            f"Phase: {phase} (mean {column} +- SE over trials; best of each family in bold)",
            "",
        ]
        head = ["family", "learner", *columns, *(["AIQ"] if phase == "whole" and aiq else [])]
        lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * 2 + " --: |" * (len(head) - 2)]
        for family in FAMILIES:
            names = [n for n in learners if families[n] == family]
            if not names:
                continue
            best = {c: _best(stats, names, c) for c in columns}
            order = sorted(names, key=lambda n: -stats.loc[(n, "all"), "mean"])
            for name in order:
                cells = []
                for c in columns:
                    m, se = stats.loc[(name, c), ["mean", "se"]]
                    text = f"{m:.4f} +- {se:.4f}"
                    cells.append(f"**{text}**" if best[c] == name else text)
                if phase == "whole" and aiq:
                    cells.append(f"{aiq.get(name, float('nan')):.4f}")
                lines.append(f"| {family} | {name} | " + " | ".join(cells) + " |")
        if phase == "whole" and "avg_regret" in results:
            oracle = results.assign(avg_utility=results["avg_utility"] + results["avg_regret"])
            first = oracle[oracle["learner"] == learners[0]]
            o = cell_stats(first, "avg_utility")
            cells = [f"{o.loc[(learners[0], c), 'mean']:.4f}" for c in columns]
            lines.append(
                "| upper bound | oracle (best arm per query) | "
                + " | ".join(cells)
                + (" | |" if aiq else " |")
            )
        lines.append("")
    return lines


__all__ = [
    "baseline_line",
    "baselines",
    "leaderboard_section",
    "learner_families",
    "paired_gap",
    "verdict",
]
