"""The HPG report section on results with known numbers."""

from __future__ import annotations

import math

import pandas as pd

from torchroute.report.hpg import (
    hpg_claims,
    hpg_section,
    hpg_table,
    loglog_slope,
    rank_trajectory,
    theorem3_rows,
)


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


def _sweep() -> pd.DataFrame:
    """sup_regret = c s^a d^b per seed with known exponents: hpg a = 1, b = 0.1 (c = 2, 3
    for seeds 0, 1); flattened_npg b = 0.8; T = 100, M = 4."""
    rows = []
    for learner, a, b in (("hpg", 1.0, 0.1), ("flattened_npg", 1.0, 0.8)):
        for s in (1, 2, 4):
            for dim in (64, 256):
                for seed, c in ((0, 2.0), (1, 3.0)):
                    rows.append({"learner": learner, "s": s, "dim": dim, "seed": seed,
                                 "M": 4, "rounds": 100, "linearized_regret": 1.0,
                                 "sup_regret": c * s**a * dim**b})  # fmt: skip
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


def test_loglog_slopes_and_theorem3_rows():
    sweep = _sweep()
    mean, sd, n = loglog_slope(sweep, "hpg", "dim")
    assert n == 6 and abs(mean - 0.1) < 1e-12 and sd < 1e-12  # one fit per (seed, s)
    mean, _, n = loglog_slope(sweep, "hpg", "s")
    assert n == 4 and abs(mean - 1.0) < 1e-12
    assert loglog_slope(sweep[sweep["dim"] == 64], "hpg", "dim")[2] == 0  # one d only
    rows = theorem3_rows(sweep).set_index(["s", "dim"])
    want = 2 * math.sqrt(4 * 100 * math.log(256))  # s = 2
    assert abs(rows.loc[(2, 256), "bound"] - want) < 1e-9
    measured = 2.5 * 2 * 256**0.1  # mean over seeds c = 2, 3
    assert abs(rows.loc[(2, 256), "regret"] - measured) < 1e-9
    assert abs(rows.loc[(2, 256), "ratio"] - measured / want) < 1e-12


def test_claims_pass_and_fail():
    lines = hpg_claims(_sweep())
    text = "\n".join(lines)
    assert "- PASS: `hpg` sup_regret against d grows slower than any power: slope <= 0.25" in text
    assert "- PASS: `hpg` sup_regret against s grows at most linearly" in text
    assert "- PASS: `flattened_npg` (Table 1's" in text
    # largest ratio (s cancels): d = 64, seeds' mean c = 2.5: 2.5 * 64**0.1 / sqrt(400 log 64)
    worst = 2.5 * 64**0.1 / math.sqrt(400 * math.log(64))
    want = "- PASS: `hpg` sup_regret <= s sqrt(M T log d) (the bound with constant 1)"
    assert f"{want} in every (s, d) cell (largest ratio {worst:.3f})" in text
    assert "- PASS: `hpg` sup_regret < `flattened_npg`'s at d = 256, s = 1" in text
    assert "2x" not in text and "2 x" not in text  # the old ad hoc check is gone
    steep = _sweep()
    steep.loc[steep["learner"] == "hpg", "sup_regret"] *= steep["dim"] ** 0.5
    lines = hpg_claims(steep)
    assert lines[2].startswith("- FAIL: `hpg` sup_regret against d")
    one_d = hpg_claims(_results())  # no sup_regret, no s: falls back, says n/a
    assert one_d[2].startswith("- PASS: `hpg` linearized_regret against d")
    assert one_d[3].startswith("- n/a")
    assert (
        "- FAIL: `hpg` linearized_regret < `euclidean_quad_pg`'s at d = 256 (10.00 vs 6.00)"
        in one_d
    )


def test_rank_trajectory_averages_trials_per_interval():
    trajectory = rank_trajectory(_curves())
    assert set(trajectory["learner"]) == {"hpg"}  # exp3 reports no rank
    got = dict(zip(trajectory["round"], trajectory["rank"], strict=True))
    assert got == {10: (2.0 + 6.0) / 2, 20: (4.0 + 6.0) / 2}


def test_section_lines_and_other_results(tmp_path):
    text = "\n".join(hpg_section(_results(), _curves(), tmp_path))
    assert "| hpg | 256 | 2 | 10.00 ± 1.41 | 0.1500 ± 0.0707 | 3.5000 ± 0.7071 |" in text
    assert "| loglinear_pg | 64 | 2 | 20.00 ± 1.41 | 0.1500 ± 0.0707 |  |" in text
    assert "- PASS: `hpg` linearized_regret < `loglinear_pg`'s at d = 256 (10.00 vs 12.00)" in text
    assert "| hpg | 64 | 4.00 | 5.00 |" in text
    sweep = "\n".join(hpg_section(_sweep(), pd.DataFrame(), tmp_path))
    assert "| hpg | 2 | 256 | 2 | " in sweep  # learner, s, d, trials
    bound = 2 * math.sqrt(4 * 100 * math.log(256))
    assert f"| 2 | 256 | {bound:.1f} | {2.5 * 2 * 256**0.1:.2f} |" in sweep
    assert (tmp_path / "hpg_rank.png").is_file()
    other = pd.DataFrame({"learner": ["linucb"], "rho": [0.0], "avg_utility": [0.5]})
    assert hpg_section(other, pd.DataFrame(), tmp_path) == []
