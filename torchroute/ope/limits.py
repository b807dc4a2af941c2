"""What a decision log can support: the warnings of ``torchroute evaluate`` and its clipping.

Importance-weighted estimators (IPS, SNIPS, DR, Switch-DR, clipped DR) and replay need
every model a target may choose to have had a chance of being logged. A log whose
propensities are 1 (a deterministic router: LinUCB's argmax, a greedy rule) never shows
the other models, so those estimators see only the rows where a target agrees with the
logged choice. The direct method (the reward model) still gives a number, by extrapolating
the fitted rewards to models the log did not play, and the logged value (``on_policy``)
is still the logging router's own mean. A log that is small, or a target whose importance
weights concentrate on a few rows (a small effective sample size), gives intervals that
cannot be trusted either. Utilities lie in ``[0, 1]``, so the intervals are clipped to it.
"""

from __future__ import annotations

import pandas as pd
import torch

#: a propensity at least this close to 1 is deterministic
DETERMINISTIC = 1e-9
#: fewer decisions with feedback than this: too small a log for an interval to be trusted
MIN_DECISIONS = 100
#: an estimate whose effective sample size is below this is flagged
MIN_ESS = 10.0
#: estimators that do not weight by the logged propensity
VALID_WITHOUT_OVERLAP = ("dm", "on_policy")
#: the range of a utility ``clip(score - rho * cost, 0, 1)``
UTILITY_RANGE = (0.0, 1.0)


def log_warnings(propensity: torch.Tensor) -> list[str]:
    """One line per limit of a log with ``propensity [n]`` (empty when none applies)."""
    n = int(propensity.numel())
    lines = []
    sure = int((propensity >= 1.0 - DETERMINISTIC).sum())
    valid = ", ".join(VALID_WITHOUT_OVERLAP)
    if sure == n:
        lines.append(
            f"every one of the {n} decisions was logged with propensity 1 (a deterministic "
            "router): ips, snips, dr, switch_dr, clipped_dr and replay only see the rows "
            f"where a target agrees with the logged model; valid here: {valid} (dm "
            "extrapolates its reward model to models the log never played). Serve with "
            "--explore EPS to log evaluable decisions"
        )
    elif sure:
        lines.append(
            f"{sure} of the {n} decisions ({sure / n:.0%}) were logged with propensity 1: "
            "on those rows the importance-weighted estimators cannot credit a target that "
            f"picks another model; {valid} do not depend on it"
        )
    if n < MIN_DECISIONS:
        lines.append(
            f"the log has {n} decisions with feedback (fewer than {MIN_DECISIONS}): every "
            "interval is rough; read the estimates as a sketch"
        )
    return lines


def clip_intervals(frame: pd.DataFrame) -> int:
    """Clip ``lower``/``upper`` (and ``value``) of ``frame`` to the utility's range, in
    place; add the ``clipped`` column; return how many intervals were clipped."""
    low, high = UTILITY_RANGE
    wide = (frame["lower"] < low) | (frame["upper"] > high)
    frame["clipped"] = wide.to_numpy()
    frame["lower"] = frame["lower"].clip(low, high)
    frame["upper"] = frame["upper"].clip(low, high)
    return int(wide.sum())


def row_warnings(frame: pd.DataFrame) -> list[str]:
    """Lines for estimates with a small effective sample size or no value."""
    lines = []
    if "ess" in frame:
        weighted = frame[frame["mode"] == "frozen"]
        small = weighted[weighted["ess"] < MIN_ESS]
        for target, part in small.groupby("target", sort=False):
            lines.append(
                f"{target}: effective sample size {part['ess'].min():.1f} (< {MIN_ESS:g}): its "
                "importance weights rest on few or no rows, the weighted estimates and their "
                "intervals are unreliable"
            )
    missing = frame[frame["value"].isna()]
    for row in missing.itertuples(index=False):
        lines.append(
            f"{row.target} / {row.estimator} (rho {row.rho:g}): no estimate (n/a): the "
            "target never chose a logged model on a row with feedback, so the estimator "
            "divides by a zero weight"
        )
    return lines


__all__ = [
    "DETERMINISTIC",
    "MIN_DECISIONS",
    "MIN_ESS",
    "UTILITY_RANGE",
    "VALID_WITHOUT_OVERLAP",
    "clip_intervals",
    "log_warnings",
    "row_warnings",
]
