"""The leaderboard's change loss: what a scenario's change costs the static side, and how
much of it each online learner wins back.

With a ``static_refit`` row (a reference whose class
:attr:`~torchroute.learners.Learner.refits_after_change`: the static router refitted on the
train split with the change applied, what retraining would give), per cost regime and on
the rounds after the change (``avg_utility_after``):

- the **change loss** is ``static_refit - baseline``, paired over the regime's trials
  (mean +- its standard error), the baseline being the regime's best static router chosen
  on validation (:func:`~torchroute.report.leaderboard.baselines`);
- the **share recovered** by an online learner is ``S = (learner - baseline) / (static_refit -
  baseline)`` (the paired means), with its standard error by linearisation, the standard
  error of the paired mean of ``(learner - baseline) - S (static_refit - baseline)`` over
  the trials divided by the change loss (a share is below a target ``s`` by more than one
  SE exactly when that paired mean at ``S = s`` is below zero by more than its own SE, to
  first order); printed only where the change loss is at least :data:`MIN_LOSS` (``n/a
  (loss < 0.02)`` elsewhere: a ratio of small differences is noise);
- the best online learner's ``rounds_to_recover`` (its mean over the regime's trials
  where defined) as a share of the rounds after the change.

One sentence per regime and phase names the best online learner (the highest mean in that
regime and phase), the baseline and, after the change, the share recovered. A results file
without a refit row gets the sentences without the change loss.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from torchroute.report.paired import mean_and_se, paired_gap, trial_values
from torchroute.report.regimes import with_regimes

#: the smallest change loss whose share recovered is printed
MIN_LOSS = 0.02
#: the phases of the per-regime sentences: stationary, and with a scenario
PHASES = {
    "whole": "avg_utility",
    "before": "avg_utility_before",
    "after": "avg_utility_after",
}
#: the family of the refit references (:func:`~torchroute.report.leaderboard.learner_families`)
REFERENCE = "reference"
ONLINE = ("warm online", "cold online")


def share_recovered(gap: float, loss: float) -> float | None:
    """``gap / loss`` (a learner's and the refit's paired gain over the baseline), or
    ``None`` when ``loss`` is below :data:`MIN_LOSS` (or NaN)."""
    if not loss >= MIN_LOSS:
        return None
    return gap / loss


def paired_share(
    results: pd.DataFrame, learner: str, baseline: str, refit: str, column: str, regime: str
) -> tuple[float | None, float]:
    """The share of the change loss ``learner`` recovers in ``regime`` and its standard
    error (the module doc), over the trials all three ran: ``(S, se)``, ``(None, nan)``
    where the loss is below :data:`MIN_LOSS`."""
    trials = trial_values(results, [learner, baseline, refit], column, regime)
    gain = trials[learner] - trials[baseline]  # [n]
    loss = trials[refit] - trials[baseline]
    share = share_recovered(float(gain.mean()), float(loss.mean()))
    if share is None:
        return None, math.nan
    return share, mean_and_se(gain - share * loss)[1] / float(loss.mean())


def share_text(share: float | None, se: float | None = None) -> str:
    """``"54%"`` (``"54% +- 3%"`` with ``se``), or ``"n/a (loss < 0.02)"`` for ``None``."""
    if share is None:
        return f"n/a (loss < {MIN_LOSS:g})"
    return f"{share:.0%}" if se is None else f"{share:.0%} +- {se:.0%}"


def remaining_rounds(results: pd.DataFrame, out_dir: str | Path | None) -> int | None:
    """The rounds after the change, ``T - floor(min(at) T)``, from the results' ``rounds``
    (``T``) and ``env.scenario`` in ``out_dir/config.yaml``; ``None`` when either is
    missing."""
    if out_dir is None or "rounds" not in results or results["rounds"].isna().all():
        return None
    path = Path(out_dir) / "config.yaml"
    try:
        env = OmegaConf.to_container(OmegaConf.load(path)).get("env") or {}
        starts = [float(e["at"]) for e in env.get("scenario") or []]
    except Exception:  # no config, or no readable scenario: no share of the rounds
        return None
    if not starts:
        return None
    rounds = int(results["rounds"].max())
    return rounds - math.floor(min(starts) * rounds)


def _means(results: pd.DataFrame, column: str, regime: str) -> pd.Series:
    frame = with_regimes(results)
    frame = frame[frame["regime"] == regime] if regime != "all" else frame
    return frame.groupby("learner")[column].mean().dropna()


def best_of(results: pd.DataFrame, learners: Sequence[str], column: str, regime: str) -> str | None:
    """The learner of ``learners`` with the highest mean ``column`` in ``regime``."""
    means = _means(results, column, regime)
    means = means[means.index.isin(list(learners))]
    return None if means.empty else str(means.idxmax())


def change_loss_lines(
    results: pd.DataFrame,
    families: Mapping[str, str],
    chosen: Mapping[str, str],
    remaining: int | None = None,
) -> list[str]:
    """Markdown: the change loss and the share each online learner recovers, per regime
    (``chosen``: each regime's baseline), after the change; ``[]`` without a refit row or
    scenario columns."""
    column = PHASES["after"]
    refits = sorted(n for n, f in families.items() if f == REFERENCE)
    online = [n for n, f in families.items() if f in ONLINE]
    if not refits or column not in results or results[column].isna().all() or not chosen:
        return []
    refit, regimes = refits[0], list(chosen)
    losses = {r: paired_gap(results, refit, chosen[r], column, r) for r in regimes}
    lines = [
        f"Change loss after the change: `{refit}` (the static router refitted with the change "
        "applied) minus the baseline, paired over the regime's trials (+- SE); the share an "
        f"online learner recovers is (learner - baseline) / ({refit} - baseline) (+- its SE, "
        f"paired over the same trials), printed where the loss is >= {MIN_LOSS:g}.",
        "",
        "| | " + " | ".join(regimes) + " |",
        "| --- |" + " --: |" * len(regimes),
        "| baseline | " + " | ".join(chosen[r] for r in regimes) + " |",
        "| change loss | " + " | ".join(f"{m:+.4f} +- {s:.4f}" for m, s in losses.values()) + " |",
    ]
    order = sorted(online, key=lambda n: -_means(results, column, "all").get(n, -math.inf))
    for name in order:
        shares = [paired_share(results, name, chosen[r], refit, column, r) for r in regimes]
        cells = [share_text(*share) for share in shares]
        lines.append(f"| share recovered: {name} | " + " | ".join(cells) + " |")
    if "rounds_to_recover" in results and online:
        cells = []
        for r in regimes:
            best = best_of(results, online, column, r)
            cells.append(f"{best}: {_recover_text(results, best, r, remaining)}" if best else "")
        lines.append("| rounds_to_recover (best online) | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _recover(results: pd.DataFrame, learner: str, regime: str) -> tuple[float, int, int]:
    """``(mean rounds_to_recover where defined, trials defined, trials)`` in ``regime``."""
    frame = with_regimes(results)
    frame = frame[(frame["learner"] == learner) & (frame["regime"] == regime)]
    values = frame["rounds_to_recover"]
    defined = values.dropna()
    return (float(defined.mean()) if len(defined) else math.nan), len(defined), len(values)


def _recover_text(results: pd.DataFrame, learner: str, regime: str, remaining: int | None) -> str:
    mean, defined, total = _recover(results, learner, regime)
    if not defined:
        return f"not recovered (0 of {total} trials)"
    share = f" = {mean / remaining:.0%} of {remaining}" if remaining else ""
    return f"{mean:.0f} rounds{share} ({defined} of {total} trials)"


def regime_verdicts(
    results: pd.DataFrame,
    families: Mapping[str, str],
    chosen: Mapping[str, str],
    on_validation: bool = True,
    remaining: int | None = None,
) -> list[str]:
    """One sentence per regime and phase (``whole`` without a scenario, else ``before`` and
    ``after``): the best online learner against the regime's baseline (``chosen``), paired
    over the trials (a difference within one SE is a tie); after the change also the change
    loss, the share of it the best online learner recovers and its ``rounds_to_recover``."""
    online = [n for n, f in families.items() if f in ONLINE]
    refits = sorted(n for n, f in families.items() if f == REFERENCE)
    if not online or not chosen:
        return []
    scenario = PHASES["after"] in results and results[PHASES["after"]].notna().any()
    phases = [p for p in ("before", "after") if PHASES[p] in results] if scenario else ["whole"]
    where = "validation" if on_validation else "test"
    lines = []
    for phase in phases:
        column = PHASES[phase]
        for regime, baseline in chosen.items():
            best = best_of(results, online, column, regime)
            if best is None:
                continue
            gap, se = paired_gap(results, best, baseline, column, regime)
            word = "tie" if abs(gap) <= se else ("above" if gap > 0 else "below")
            text = (
                f"- {phase}, {regime}: the best online learner {best} is {gap:+.4f} +- "
                f"{se:.4f} ({word}) against the best static router {baseline} (chosen on "
                f"{where})"
            )
            if phase == "after" and refits:
                loss, loss_se = paired_gap(results, refits[0], baseline, column, regime)
                share = paired_share(results, best, baseline, refits[0], column, regime)
                text += (
                    f"; the change loss ({refits[0]} - {baseline}) is {loss:+.4f} +- "
                    f"{loss_se:.4f}, share recovered {share_text(*share)}"
                )
            if phase == "after" and "rounds_to_recover" in results:
                text += f"; rounds_to_recover {_recover_text(results, best, regime, remaining)}"
            lines.append(text + ".")
    return [*lines, ""] if lines else []


__all__ = [
    "MIN_LOSS",
    "best_of",
    "change_loss_lines",
    "paired_share",
    "regime_verdicts",
    "remaining_rounds",
    "share_recovered",
    "share_text",
]
