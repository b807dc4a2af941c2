"""The report's budgets section on a hand-made results frame."""

from __future__ import annotations

import pandas as pd
import pytest

from torchroute.report.budgets import budget_section, compliance_table, curve_gap


def _results() -> pd.DataFrame:
    rows = []
    # learner a: budget 1 -> costs 0.99, 1.02 (the second over 1.01); budget 2 -> 1.5, 1.9
    for learner, budget, cost, acc in [
        ("a", 1.0, 0.99, 0.5),
        ("a", 1.0, 1.02, 0.7),
        ("a", 2.0, 1.5, 0.8),
        ("a", 2.0, 1.9, 0.9),
    ]:
        rows.append(
            {
                "learner": learner,
                "rho": 3.0,
                "seed": len(rows) % 2,
                "budget": budget,
                "accuracy": acc,
                "avg_cost_after_warmup": cost,
                "budget_overrun_after_warmup": cost / budget - 1,
                "rho_final": 4.0,
            }
        )
    return pd.DataFrame(rows)


def test_compliance_table_by_hand():
    table = compliance_table(_results())
    first, second = table.loc[("a", 1.0)], table.loc[("a", 2.0)]
    assert first["cost_after_warmup"] == pytest.approx(1.005)
    assert first["max_overrun"] == pytest.approx(0.02)
    assert first["accuracy"] == pytest.approx(0.6)
    assert first["within"] == "1/2" and second["within"] == "2/2"
    assert second["overrun_after_warmup"] == pytest.approx(((0.75 - 1) + (0.95 - 1)) / 2)


def test_the_section_writes_its_figure_and_is_empty_without_budgets(tmp_path):
    lines = budget_section(_results(), pd.DataFrame(), tmp_path)
    assert lines[0] == "## Budgets" and "3 of 4 trials" in lines[2]
    assert (tmp_path / "budget_curves.png").stat().st_size > 0
    assert budget_section(_results().drop(columns="budget"), pd.DataFrame(), tmp_path) == []


def test_curve_gap_by_hand():
    """Learner a's fixed-rho curve, means over two seeds: rho 0 -> (cost 4, acc 0.9), rho 1
    -> (2, 0.8), rho 10 -> (1, 0.4). At budget 1 the trials' mean avg_cost is
    (1.0 + 1.5) / 2 = 1.25: the curve is 0.4 + 0.25 * (0.8 - 0.4) = 0.5 and the quality
    0.6 is 0.1 above it. At budget 2: cost 1.7 -> 0.4 + 0.7 * 0.4 = 0.68, gap 0.85 - 0.68.
    Learner b has no curve (NaN)."""
    results = _results().assign(avg_cost=[1.0, 1.5, 1.6, 1.8])
    results = pd.concat([results, results.iloc[:1].assign(learner="b")], ignore_index=True)
    fixed = pd.DataFrame(
        {
            "learner": ["a"] * 6,
            "rho": [0.0, 0.0, 1.0, 1.0, 10.0, 10.0],
            "seed": [0, 1] * 3,
            "avg_cost": [3.5, 4.5, 2.0, 2.0, 0.5, 1.5],
            "accuracy": [0.85, 0.95, 0.7, 0.9, 0.4, 0.4],
        }
    )
    table = curve_gap(results, fixed)
    first, second = table.loc[("a", 1.0)], table.loc[("a", 2.0)]
    assert first["avg_cost"] == pytest.approx(1.25)
    assert first["curve"] == pytest.approx(0.5)
    assert first["gap"] == pytest.approx(0.1)
    assert first["within"] == "1/2"  # 1.02 > 1.01
    assert first["max_overrun"] == pytest.approx(0.02)
    assert first["cost_after_warmup"] == pytest.approx(1.005)
    assert second["curve"] == pytest.approx(0.68)
    assert second["gap"] == pytest.approx(0.85 - 0.68)
    assert second["within"] == "2/2" and second["max_overrun"] == pytest.approx(-0.05)
    assert pd.isna(table.loc[("b", 1.0), "gap"])
