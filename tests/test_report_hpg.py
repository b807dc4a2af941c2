"""The HPG report section on results with known numbers."""

from __future__ import annotations

import pandas as pd

from torchroute.report.hpg import hpg_relations, hpg_section, hpg_table, rank_trajectory


def _results(hpg_high: float = 10.0) -> pd.DataFrame:
    """Two seeds per (learner, dim); linearized regret mean +- 1, known means."""
    means = {
        ("hpg", 64): 8.0,
        ("hpg", 256): hpg_high,
        ("loglinear_pg", 64): 20.0,
        ("loglinear_pg", 256): 12.0,
        ("euclidean_quad_pg", 64): 5.0,
        ("euclidean_quad_pg", 256): 6.0,
    }
    rows = []
    for (learner, dim), mean in means.items():
        for seed, sign in ((0, -1.0), (1, 1.0)):
            row = {"learner": learner, "dim": dim, "seed": seed,
                   "linearized_regret": mean + sign, "avg_reward": 0.1 * (seed + 1)}  # fmt: skip
            if learner == "hpg":
                row["rank"] = 3.0 + seed
            rows.append(row)
    return pd.DataFrame(rows)


def _curves() -> pd.DataFrame:
    """hpg trial 0 has rank 2 over rounds 1..10 and 4 over 11..20; trial 1 has rank 6
    throughout; exp3 reports no rank (NaN, as the loop writes for a learner without it)."""
    rows = []
    for learner, trial, ranks in (
        ("hpg", 0, (2.0, 4.0)),
        ("hpg", 1, (6.0, 6.0)),
        ("exp3", 2, (float("nan"), float("nan"))),
    ):
        for rnd, rank in zip((10, 20), ranks, strict=True):
            rows.append({"learner": learner, "trial": trial, "dim": 64, "seed": trial,
                         "round": rnd, "stat_rank": rank})  # fmt: skip
    return pd.DataFrame(rows)


def test_table_has_mean_and_sample_sd():
    table = hpg_table(_results())
    row = table.loc[("hpg", 256)]
    assert row["trials"] == 2
    assert row["linearized_regret_mean"] == 10.0
    assert abs(row["linearized_regret_sd"] - 2**0.5) < 1e-12  # values 9 and 11
    assert abs(row["avg_reward_mean"] - 0.15) < 1e-12
    assert row["rank_mean"] == 3.5
    assert pd.isna(table.loc[("loglinear_pg", 64), "rank_mean"])  # it reports no rank


def test_relations_pass_and_fail():
    lines = hpg_relations(_results(hpg_high=10.0))
    assert lines == [
        "- FAIL: `hpg` linearized regret < `euclidean_quad_pg`'s at d = 256 (10.00 vs 6.00)",
        "- PASS: `hpg` linearized regret < `loglinear_pg`'s at d = 256 (10.00 vs 12.00)",
        "- PASS: `hpg` linearized regret at d = 256 < 2 x its regret at d = 64 (10.00 vs 2 x 8.00)",
    ]
    lines = hpg_relations(_results(hpg_high=17.0))
    assert lines[1].startswith("- FAIL") and lines[2].startswith("- FAIL")
    missing = hpg_relations(_results()[lambda f: f["learner"] != "loglinear_pg"])
    assert missing[1].startswith("- n/a")


def test_rank_trajectory_averages_trials_per_interval():
    trajectory = rank_trajectory(_curves())
    assert set(trajectory["learner"]) == {"hpg"}  # exp3 reports no rank
    got = dict(zip(trajectory["round"], trajectory["rank"], strict=True))
    assert got == {10: (2.0 + 6.0) / 2, 20: (4.0 + 6.0) / 2}


def test_section_lines_and_other_results(tmp_path):
    text = "\n".join(hpg_section(_results(), _curves(), tmp_path))
    assert "| hpg | 256 | 2 | 10.00 ± 1.41 | 0.1500 ± 0.0707 | 3.5000 ± 0.7071 |" in text
    assert "| loglinear_pg | 64 | 2 | 20.00 ± 1.41 | 0.1500 ± 0.0707 |  |" in text
    assert "- PASS: `hpg` linearized regret < `loglinear_pg`'s" in text
    assert "| hpg | 64 | 4.00 | 5.00 |" in text
    assert (tmp_path / "hpg_rank.png").is_file()
    other = pd.DataFrame({"learner": ["linucb"], "rho": [0.0], "avg_utility": [0.5]})
    assert hpg_section(other, pd.DataFrame(), tmp_path) == []
