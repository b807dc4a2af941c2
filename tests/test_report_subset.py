"""The subset-routing report section: feasibility rates, rewards, curves and spend plot."""

from __future__ import annotations

import numpy as np
import pandas as pd

from torchroute.report.sections import load_sections
from torchroute.report.subset import (
    add_final_policy_r1,
    early_rounds_table,
    fig2_verdicts,
    risk_curves,
    subset_section,
)


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
    assert subset_section in load_sections()  # a default section
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


def test_r1_against_the_final_policy_from_block_values():
    """Two blocks of a 20-round run, final-policy values 1.0 then 3.0: at round 10 R1_qT is
    1.0 - cum_reward/10, at round 15 (10 rounds of 1.0, 5 of 3.0) 25/15 - cum_reward/15."""
    curves = pd.DataFrame({
        "learner": ["a"] * 3, "seed": [0] * 3, "round": [10, 15, 20],
        "cum_reward": [5.0, 9.0, 30.0], "cum_r1_opt": [0.0] * 3,
    })  # fmt: skip
    results = pd.DataFrame({"learner": ["a"], "seed": [0], "rounds": [20],
                            "qT_value_0": [1.0], "qT_value_1": [3.0]})  # fmt: skip
    frame = add_final_policy_r1(risk_curves(curves), results)
    np.testing.assert_allclose(frame["R1_qT"], [1.0 - 0.5, 25 / 15 - 9 / 15, 2.0 - 1.5])
    table = early_rounds_table(frame)
    assert list(table.index.get_level_values("round")) == [10, 20]  # 15 is not an early round


def _fig2(rates):
    """20 runs per (learner, world, constrained level); ``rates[learner]`` = feasible share
    at 1e-9 and at 1e-3; rewards: omd 2.0, cbwk 1.0, tsbwk 1.5 (+- seed noise)."""
    rows = []
    reward = {"omd_approachability": 2.0, "cbwk": 1.0, "tsbwk": 1.5, "cucb": 3.0}
    for learner, (exact, loose) in rates.items():
        for world in ("stochastic", "regime"):
            for level in ("tight", "medium", "loose", "none"):
                for seed in range(20):
                    rows.append({"learner": learner, "env": world, "constraint": level,
                                 "seed": seed, "avg_reward": reward[learner] + 0.01 * seed,
                                 "r2": 0.0, "feasible": float(seed < 20 * exact),
                                 "feasible_1e3": float(seed < 20 * loose)})  # fmt: skip
    return pd.DataFrame(rows)


def test_fig2_verdicts_sentence_by_sentence():
    rates = {"omd_approachability": (1.0, 1.0), "cbwk": (1.0, 1.0), "tsbwk": (0.7, 1.0),
             "cucb": (0.1, 0.2)}  # fmt: skip
    text = "\n".join(fig2_verdicts(_fig2(rates)))
    assert "| stochastic | omd_approachability | 100 | 100 | 100-100 | REPRODUCED |" in text
    assert "| stochastic | cbwk | 100 | 100 | 25-55 | NOT REPRODUCED |" in text
    # TS-BwK: 70% at 1e-9 (outside 90-100) but 100% at 1e-3 (inside): reproduced at 1e-3
    assert "| stochastic | tsbwk | 70 | 100 | 90-100 | REPRODUCED |" in text
    assert "| regime | tsbwk | 70 | 100 | 75-95 | NOT REPRODUCED |" in text
    assert "| regime | cucb | 10 | 20 | 0-25 | REPRODUCED |" in text
    assert "- REPRODUCED: OMD-Approachability has the highest reward" in text
    # 60 runs: 0.01 x (0..19) three times: sd = 0.01 sqrt(60 x 33.25 / 59) = 0.0581
    assert "omd_approachability 2.0950 ± 0.0581" in text
    lines = subset_section(_fig2(rates), pd.DataFrame(), _tmp())
    assert any("R2 <= 1e-3" in line for line in lines)
    assert any("states no rule" in line for line in lines)


def _tmp():
    import tempfile
    from pathlib import Path

    return Path(tempfile.mkdtemp())


def test_results_file_of_a_subset_run_may_hold_unbounded_box_sides(tmp_path):
    """A target box side of -inf/inf (no bound) is a label, not a damaged measurement."""
    import pytest

    from torchroute.results_file import ResultsFileError, read_run_csv

    rows = (
        "learner,rho,seed,lower_0,upper_0,avg_reward\n"
        "omd_approachability,0.0,0,-inf,0.31,0.87\n"
        "random,0.0,0,-inf,inf,0.52\n"
    )
    (tmp_path / "results.csv").write_text(rows)
    frame = read_run_csv(tmp_path / "results.csv")
    assert np.isneginf(frame["lower_0"]).all() and np.isposinf(frame["upper_0"].iloc[1])
    (tmp_path / "bad.csv").write_text(rows.replace("0.52", "inf"))
    with pytest.raises(ResultsFileError, match="'avg_reward' holds an infinite value on line 3"):
        read_run_csv(tmp_path / "bad.csv")
