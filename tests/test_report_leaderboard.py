"""The leaderboard section on a hand-made results frame: families from the config, means and
standard errors computed by hand, bold per family, the paired verdict."""

from __future__ import annotations

import math
import statistics

import pandas as pd
import yaml

from torchroute.report.leaderboard import leaderboard_section, learner_families, paired_gap


def _results() -> pd.DataFrame:
    rows = []
    util = {
        "stat": [0.5, 0.7, 0.2, 0.4],
        "cold": [0.4, 0.5, 0.1, 0.2],
        "warm": [0.6, 0.8, 0.2, 0.4],
    }
    for learner, values in util.items():
        for (rho, seed), u in zip([(0, 0), (0, 1), (900, 0), (900, 1)], values, strict=True):
            rows.append({"learner": learner, "rho": rho, "seed": seed, "avg_utility": u,
                         "avg_regret": 0.9 - u})  # fmt: skip
    return pd.DataFrame(rows)


def _config(tmp_path):
    learners = {
        "stat": {"_target_": "torchroute.learners.anchors.KNNScoreRouter.from_problem"},
        "cold": {"_target_": "torchroute.learners.LinTS.from_problem", "warm_start": None},
        "warm": {"_target_": "torchroute.learners.LinTS.from_problem", "warm_start": "train"},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"learners": learners}))


def test_families_come_from_the_config(tmp_path):
    _config(tmp_path)
    assert learner_families(tmp_path, ["stat", "cold", "warm"]) == {
        "stat": "static",
        "cold": "cold online",
        "warm": "warm online",
    }


def test_a_learner_built_on_a_router_fitted_on_train_is_warm(tmp_path):
    learners = {
        "residual": {"_target_": "torchroute.learners.ResidualLinUCB.from_problem"},
        "linucb": {"_target_": "torchroute.learners.LinUCB.from_problem"},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"learners": learners}))
    assert learner_families(tmp_path, ["residual", "linucb"]) == {
        "residual": "warm online",  # its base router is fitted on the train split
        "linucb": "cold online",
    }


def test_cells_verdict_and_oracle_row(tmp_path):
    _config(tmp_path)
    lines = leaderboard_section(_results(), pd.DataFrame(), tmp_path)
    text = "\n".join(lines)
    # warm - stat per trial: low (0.1, 0.1): +0.1, SE 0 -> above; high (0, 0): tie
    assert "warm warm is above the baseline in 1, tied (within one SE) in 1" in text
    low_se = statistics.stdev([0.6, 0.8]) / math.sqrt(2)  # sample std over sqrt(n)
    row = next(line for line in lines if "| warm online | warm |" in line)
    assert f"**0.7000 +- {low_se:.4f}**" in row
    assert "| upper bound | oracle (best arm per query) | 0.9000 | 0.9000 | 0.9000 |" in text
    cold = next(line for line in lines if "| cold online | cold |" in line)
    assert cold.count("**") == 6  # best of its own family in every column (one learner)


def test_paired_gap_matches_trials():
    gap, se = paired_gap(_results(), "warm", "cold", "avg_utility", "all")
    diffs = [0.2, 0.3, 0.1, 0.2]
    mean = sum(diffs) / 4
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 3)
    assert math.isclose(gap, mean) and math.isclose(se, sd / 2)


def test_a_scenario_adds_the_after_phase_verdict(tmp_path):
    _config(tmp_path)
    results = _results()
    # after the change the cold learner is best: +0.05 over stat in every trial
    results["avg_utility_after"] = results["avg_utility"]
    cold = results["learner"] == "cold"
    results.loc[cold, "avg_utility_after"] = (
        results.loc[results["learner"] == "stat", "avg_utility"].to_numpy() + 0.05
    )
    results["rounds_to_recover"] = [float("nan")] * 8 + [10.0, 30.0, float("nan"), float("nan")]
    text = "\n".join(leaderboard_section(results, pd.DataFrame(), tmp_path))
    assert "after the change, online cold is above the baseline in 2" in text
    assert "low +0.0500 +- 0.0000 vs stat (above)" in text
    assert "Phase: after" in text


def test_the_after_phase_verdict_counts_the_trials_that_recovered(tmp_path):
    _config(tmp_path)
    results = _results()
    results["avg_utility_after"] = results["avg_utility"]
    cold = results["learner"] == "cold"
    results.loc[cold, "avg_utility_after"] = 0.95  # the best online learner after the change
    nan = float("nan")
    recover = {"stat": [5.0, 5.0, 5.0, 5.0], "cold": [12.0, nan, 40.0, 8.0], "warm": [nan] * 4}
    results["rounds_to_recover"] = [r for name in ("stat", "cold", "warm") for r in recover[name]]
    text = "\n".join(leaderboard_section(results, pd.DataFrame(), tmp_path))
    # cold: 3 of its 4 trials have a rounds_to_recover, (12 + 40 + 8) / 3 = 20 on average
    assert "cold recovered (rounds_to_recover defined) in 3 of 4 trials, after 20 rounds" in text


def test_the_baseline_is_the_best_static_router_on_validation_not_on_test(tmp_path):
    """Two static routers: "val_best" has the higher val_utility, "test_best" the higher
    test utility. warm - val_best per trial: +0.3, +0.3 (low), +0.2, +0.2 (high): above in
    both; warm - test_best: -0.1 in every trial, which a test-chosen baseline would report."""
    learners = {
        "val_best": {"_target_": "torchroute.learners.anchors.LogisticScoreRouter.from_problem"},
        "test_best": {"_target_": "torchroute.learners.anchors.KNNScoreRouter.from_problem"},
        "warm": {"_target_": "torchroute.learners.LinTS.from_problem", "warm_start": "train"},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"learners": learners}))
    util = {
        "val_best": ([0.3, 0.5, 0.1, 0.2], 0.8),
        "test_best": ([0.7, 0.9, 0.4, 0.5], 0.6),
        "warm": ([0.6, 0.8, 0.3, 0.4], float("nan")),
    }
    rows = [
        {"learner": name, "rho": rho, "seed": seed, "avg_utility": u, "val_utility": val}
        for name, (values, val) in util.items()
        for (rho, seed), u in zip([(0, 0), (0, 1), (900, 0), (900, 1)], values, strict=True)
    ]
    text = "\n".join(leaderboard_section(pd.DataFrame(rows), pd.DataFrame(), tmp_path))
    assert "Baseline: val_best, the best static router on validation" in text
    assert "warm warm is above the baseline in 2, tied (within one SE) in 0 and below in 0" in text
    assert "low +0.3000 +- 0.0000 vs val_best (above)" in text
    assert "high +0.2000 +- 0.0000 vs val_best (above)" in text
    assert "test_best (" not in text
    # a run from before val_utility was recorded: the test-best, said so
    old = pd.DataFrame(rows).drop(columns="val_utility")
    text = "\n".join(leaderboard_section(old, pd.DataFrame(), tmp_path))
    assert "Baseline: test_best, the best static router on test" in text
    assert "below in 2 of 2 regimes" in text and "vs test_best (below)" in text
