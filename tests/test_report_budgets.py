"""The report's budgets section on a hand-made results frame."""

from __future__ import annotations

import pandas as pd
import pytest

from torchroute.report.budgets import budget_section, compliance_table


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
