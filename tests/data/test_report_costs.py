"""Costs of a cheap table keep their significant digits in the report (issue 10, item 5)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

import torchroute.report as report


def _results(out: Path) -> Path:
    rows = []
    for learner, cost in [("linucb", 1.234e-4), ("random", 1.251e-4)]:
        for rho in (0.0, 500.0):
            rows.append(
                {"learner": learner, "trial": 0, "seed": 0, "rho": rho, "rounds": 10,
                 "avg_utility": 0.5, "avg_regret": 0.1, "accuracy": 0.6, "avg_cost": cost}
            )  # fmt: skip
    out.mkdir()
    pd.DataFrame(rows).to_csv(out / "results.csv", index=False)
    return out


def test_report_tables_keep_cost_digits(tmp_path: Path):
    text = report.write_report([_results(tmp_path / "run")])
    assert "0.0001234" in text and "0.0001251" in text  # not 0.0001 for both
    summary = pd.read_csv(tmp_path / "run" / "summary.csv").set_index("learner")
    assert summary.loc["linucb", "avg_cost"] == 1.234e-4  # full precision in the CSV
