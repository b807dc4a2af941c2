"""The subset-routing report section: feasibility rates, rewards, curves and spend plot."""

from __future__ import annotations

import numpy as np
import pandas as pd

from torchroute.report import SECTIONS
from torchroute.report.subset import risk_curves, subset_section


def _results():
    rows = []
    for learner, feasible in (("omd", [1, 1, 1, 1]), ("cbwk", [1, 0, 0, 1])):
        for seed in range(4):
            for level in ("tight", "none"):
                rows.append({
                    "learner": learner, "seed": seed, "env": "stochastic", "constraint": level,
                    "avg_reward": 2.0 + seed, "r2": 0.0 if feasible[seed] else 0.1,
                    "feasible": float(feasible[seed] or level == "none"),
                    "avg_cost_0": 0.3, "upper_0": 0.5 if level == "tight" else np.inf,
                })  # fmt: skip
    return pd.DataFrame(rows)


def test_section_reports_the_feasibility_rate_per_level(tmp_path):
    assert subset_section in SECTIONS
    lines = subset_section(_results(), pd.DataFrame(), tmp_path)
    text = "\n".join(lines)
    row = next(line for line in text.splitlines() if line.startswith("| cbwk"))
    # cbwk: 2 of 4 seeds feasible at tight (50 %), all at none (100 %)
    cells = [c.strip() for c in row.strip("|").split("|")[1:]]
    assert cells[:2] == ["50", "100"] or cells[:2] == ["100", "50"]
    assert "% of runs feasible" in text
    assert (tmp_path / "subset_levels.png").is_file() and (tmp_path / "subset_spend.png").is_file()


def test_section_ignores_other_results(tmp_path):
    assert subset_section(pd.DataFrame({"learner": ["a"], "avg_utility": [1.0]}), pd.DataFrame(),
                          tmp_path) == []  # fmt: skip


def test_risk_curves_rebuild_r2_from_cumulative_costs():
    curves = pd.DataFrame({
        "learner": ["a", "a"], "round": [10, 20], "cum_r1_opt": [1.0, 1.0],
        "cum_cost_0": [8.0, 8.0], "cum_cost_1": [30.0, 20.0],
        "lower_0": [-np.inf] * 2, "upper_0": [0.5, 0.5],
        "lower_1": [-np.inf] * 2, "upper_1": [1.0, 1.0],
    })  # fmt: skip
    frame = risk_curves(curves)
    np.testing.assert_allclose(frame["R1"], [0.1, 0.05])
    # round 10: averages (0.8, 3.0) -> gaps (0.3, 2.0); round 20: (0.4, 1.0) -> inside
    np.testing.assert_allclose(frame["R2"], [np.hypot(0.3, 2.0), 0.0])
