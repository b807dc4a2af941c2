"""Budgets against each learner's own fixed-rho curve: compliance and quality per budget.

Workload: two finished ``simulate`` runs of the same learners on the same stream and
seeds: one with ``budgets`` (each trial paced to its budget) and one at fixed ``rhos``
spanning the costs of the budgets (e.g. 0 to 1e5). A learner's fixed-rho curve is its mean
accuracy against its mean cost over the rhos (means over the seeds, interpolated linearly);
under a budget its quality should be close to that curve at the cost it realised.

Printed, per learner and budget (:func:`torchroute.report.budgets.curve_gap`): the mean
cost after the first 5% of the rounds, the largest overrun over the seeds, the trials
within ``budget x 1.01``, the realised mean cost, the quality, the curve at that cost and
the gap; then the trials within ``budget x 1.01`` and the budgets whose gap is at least
``-gap`` (default 0.005), both over all.

    .venv/bin/python benchmarks/budget_curve.py --budgets runs/paced --fixed runs/rhos
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from torchroute.report.budgets import TOLERANCE, curve_gap


def _results(folder: Path, flag: str) -> pd.DataFrame:
    path = folder / "results.csv"
    if not path.is_file():
        raise SystemExit(f"{flag}: no results.csv in {folder} (give a finished run's out_dir)")
    return pd.read_csv(path)


def main(argv: list[str] | None = None) -> None:
    """Parse the flags, print the table and the two counts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=Path, required=True, help="out_dir of the paced run")
    parser.add_argument("--fixed", type=Path, required=True, help="out_dir of the rhos run")
    parser.add_argument("--gap", type=float, default=0.005, help="allowed quality shortfall")
    args = parser.parse_args(argv)
    paced, fixed = _results(args.budgets, "--budgets"), _results(args.fixed, "--fixed")
    if "budget" not in paced:
        raise SystemExit(f"--budgets: {args.budgets} is not a run with budgets (no budget column)")
    table = curve_gap(paced, fixed)
    print(table.reset_index().to_markdown(index=False, floatfmt=".4g"))
    ok = int((paced["avg_cost_after_warmup"] <= paced["budget"] * TOLERANCE).sum())
    near = int((table["gap"] >= -args.gap).sum())
    print(f"trials within budget x {TOLERANCE:g} after the warm-up: {ok}/{len(paced)}")
    print(f"budgets with quality >= own fixed-rho curve - {args.gap:g}: {near}/{len(table)}")


if __name__ == "__main__":
    main()
