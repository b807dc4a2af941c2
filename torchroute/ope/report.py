"""The report of ``torchroute evaluate``: a Markdown table per rho and one plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from omegaconf import DictConfig

from torchroute.io import atomic_write, write_text_atomic


def _number(value: float) -> str:
    """``value`` to 4 decimals; ``n/a`` for NaN and never ``-0.0000``."""
    if pd.isna(value):
        return "n/a"
    text = f"{value:.4f}"
    return "0.0000" if text == "-0.0000" else text


def markdown_table(frame: pd.DataFrame) -> str:
    """``frame`` (one rho) as a Markdown table: target x estimator, ``value [lower, upper]``."""
    lines = [
        "| target | mode | estimator | value | interval | ESS |",
        "|---|---|---|---:|---|---:|",
    ]
    for row in frame.itertuples(index=False):
        ess = getattr(row, "ess", float("nan"))
        ess_text = "" if pd.isna(ess) else f"{ess:.0f}"
        if getattr(row, "mode", "") == "replay":
            ess_text = f"{int(row.accepted)} accepted"
        interval = f"[{_number(row.lower)}, {_number(row.upper)}]"
        if getattr(row, "clipped", False):
            interval += " *"
        lines.append(
            f"| {row.target} | {row.mode} | {row.estimator} | {_number(row.value)} | "
            f"{interval} | {ess_text} |"
        )
    return "\n".join(lines)


def write_evaluate_report(
    frame: pd.DataFrame,
    out_dir: Path,
    cfg: DictConfig,
    notes: Sequence[str] = (),
    clipped: int = 0,
) -> Path:
    """Write ``report.md`` and ``ope.png`` under ``out_dir``; returns the report's path.

    ``notes``: what the log cannot support (:mod:`torchroute.ope.limits`), listed
    first; ``clipped``: how many intervals were clipped to ``[0, 1]`` (marked ``*``).
    """
    n = int(frame["n"].iloc[0])
    dropped = int(frame["dropped_no_feedback"].iloc[0])
    level = round(100 * (1 - float(cfg.alpha)))
    parts = [
        "# Off-policy evaluation",
        "",
        f"Log `{cfg.logs}`: {n} decisions with feedback ({dropped} without, left out). "
        f"Intervals: {level}% {cfg.interval}"
        + (f" ({cfg.bootstrap} replicates)" if cfg.interval == "bootstrap" else "")
        + "; replay and the logged value: normal intervals. ESS: effective sample size "
        "(sum w)^2 / sum w^2 of the importance weights.",
        "",
    ]
    if notes:
        parts += ["## What this log can support", "", *(f"- {n}" for n in notes), ""]
    parts += [_range_note(frame, clipped), ""]
    for rho, part in frame.groupby("rho", sort=True):
        parts += [f"## rho = {rho:g}", "", markdown_table(part), ""]
    parts += ["![estimates](ope.png)", ""]
    _plot(frame, out_dir / "ope.png")
    return write_text_atomic(out_dir / "report.md", "\n".join(parts))


def _range_note(frame: pd.DataFrame, clipped: int) -> str:
    """The sentence on the utility's range: clipped intervals, values outside it, n/a."""
    text = "Utilities lie in [0, 1]; the intervals are clipped to it"
    text += f" ({clipped} were wider, marked *)." if clipped else " (none was wider)."
    outside = int(((frame["value"] < 0) | (frame["value"] > 1)).sum())
    if outside:
        text += (
            f" {outside} estimates lie outside [0, 1]: unbiased estimators (IPS, DR) are not "
            "bounded on a finite log; the true value is in [0, 1]."
        )
    if frame["value"].isna().any():
        text += " n/a: no estimate (the notes above say why)."
    return text


def _plot(frame: pd.DataFrame, path: Path) -> None:
    rhos = sorted(frame["rho"].unique())
    fig, axes = plt.subplots(1, len(rhos), figsize=(5 * len(rhos), 4), squeeze=False)
    for ax, rho in zip(axes[0], rhos):
        part = frame[frame["rho"] == rho]
        label = part["target"].where(part["mode"] != "replay", part["target"] + " (replay)")
        part = part.assign(target=label)
        targets = list(dict.fromkeys(part["target"]))
        estimators = list(dict.fromkeys(part["estimator"]))
        width = 0.8 / max(len(estimators), 1)
        for j, est in enumerate(estimators):
            sub = part[part["estimator"] == est].set_index("target")
            xs = [
                i + (j - (len(estimators) - 1) / 2) * width
                for i, t in enumerate(targets)
                if t in sub.index
            ]
            rows = sub.loc[[t for t in targets if t in sub.index]]
            # (a value outside its clipped interval gets no bar on that side)
            err = [
                (rows["value"] - rows["lower"]).clip(lower=0),
                (rows["upper"] - rows["value"]).clip(lower=0),
            ]
            ax.errorbar(xs, rows["value"], yerr=err, fmt="o", capsize=3, label=est)
        ax.set_xticks(range(len(targets)), targets, rotation=30, ha="right")
        ax.set_title(f"rho = {rho:g}")
        ax.set_ylabel("estimated value (utility)")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)
