"""The report: cost regimes, relative regret and the written files, on hand-made frames.

Every expected number below is worked out by hand from the frames built here (the CABS
regimes of docs/reference/problem.md: low ``rho <= 300``, medium ``300 < rho < 800``, high
``rho >= 800``).
"""

from __future__ import annotations

import pandas as pd
import pytest

from torchroute.report import cost_regime, regime_table, relative_regret, write_report

# rho on both sides of each boundary: 300 is low, 350 and 750 medium, 800 high.
RHOS = [0.0, 300.0, 350.0, 750.0, 800.0]
# avg_utility of learner "a" per seed, in the order of RHOS.
A_SEED0 = [0.90, 0.80, 0.60, 0.40, 0.20]
A_SEED1 = [0.70, 0.60, 0.40, 0.20, 0.00]
# learner "b" is flat at 0.5 except in the high regime (0.9), for both seeds.
B_VALUES = [0.50, 0.50, 0.50, 0.50, 0.90]


def _results() -> pd.DataFrame:
    rows = []
    for learner, per_seed in (("a", (A_SEED0, A_SEED1)), ("b", (B_VALUES, B_VALUES))):
        for seed, values in enumerate(per_seed):
            for trial, (rho, u) in enumerate(zip(RHOS, values, strict=True)):
                rows.append(
                    {
                        "learner": learner,
                        "trial": trial + 5 * seed,
                        "rho": rho,
                        "seed": seed,
                        "rounds": 20,
                        "avg_utility": u,
                        "avg_regret": 1.0 - u,
                        "accuracy": u + 0.05,
                        "avg_cost": 1e-3 * (trial + 1),
                    }
                )
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    ("rho", "regime"),
    [
        (0.0, "low"),
        (300.0, "low"),
        (300.5, "medium"),
        (350.0, "medium"),
        (500.0, "medium"),
        (799.9, "medium"),
        (800.0, "high"),
        (1000.0, "high"),
    ],
)
def test_cost_regime_boundaries(rho, regime):
    assert cost_regime(rho) == regime


def test_regime_table_numbers_by_hand():
    table = regime_table(_results())
    assert list(table.columns) == ["low", "medium", "high", "all"]
    # sorted by "all", best first: b (0.58) above a (0.48)
    assert list(table.index) == ["b", "a"]
    # a: low = rho 0 and 300 of both seeds = (0.9 + 0.8 + 0.7 + 0.6) / 4
    #    medium = rho 350 and 750 = (0.6 + 0.4 + 0.4 + 0.2) / 4; high = rho 800 = (0.2 + 0) / 2
    #    all = (0.9 + 0.8 + 0.6 + 0.4 + 0.2 + 0.7 + 0.6 + 0.4 + 0.2 + 0.0) / 10
    expected_a = {"low": 0.75, "medium": 0.40, "high": 0.10, "all": 0.48}
    # b: 0.5 everywhere but rho 800 (0.9): all = (8 * 0.5 + 2 * 0.9) / 10
    expected_b = {"low": 0.50, "medium": 0.50, "high": 0.90, "all": 0.58}
    for learner, expected in (("a", expected_a), ("b", expected_b)):
        for column, value in expected.items():
            assert table.loc[learner, column] == pytest.approx(value, abs=1e-12), (
                learner,
                column,
            )


def test_regime_table_of_another_value_and_missing_regimes():
    results = _results()
    accuracy = regime_table(results, value="accuracy")
    assert accuracy.loc["a", "medium"] == pytest.approx(0.45, abs=1e-12)  # 0.40 + 0.05
    assert accuracy.loc["b", "high"] == pytest.approx(0.95, abs=1e-12)
    # only low and high trials: no medium column, regimes kept in their order
    part = regime_table(results[results["rho"].isin([0.0, 800.0])])
    assert list(part.columns) == ["low", "high", "all"]
    assert part.loc["a", "low"] == pytest.approx((0.9 + 0.7) / 2, abs=1e-12)
    assert part.loc["a", "all"] == pytest.approx((0.9 + 0.2 + 0.7 + 0.0) / 4, abs=1e-12)


def _curves() -> pd.DataFrame:
    """Cumulative regret of the reference "linucb" and of "sq" at rounds 1 and 2.

    Per (rho, seed): linucb (0, 0) 1, 2; (900, 0) 0.5, 1.5; (0, 1) 3, 3.
                     sq     (0, 0) 2, 4; (900, 0) 1.5, 0.5; (0, 1) 3, 6.
    """
    rows = []
    table = {
        "linucb": {(0.0, 0): (1.0, 2.0), (900.0, 0): (0.5, 1.5), (0.0, 1): (3.0, 3.0)},
        "sq": {(0.0, 0): (2.0, 4.0), (900.0, 0): (1.5, 0.5), (0.0, 1): (3.0, 6.0)},
    }
    for learner, runs in table.items():
        for (rho, seed), values in runs.items():
            for rnd, value in enumerate(values, start=1):
                rows.append(
                    {
                        "learner": learner,
                        "rho": rho,
                        "seed": seed,
                        "round": rnd,
                        "cum_regret": value,
                    }
                )
    return pd.DataFrame(rows)


def test_relative_regret_by_hand():
    rel = relative_regret(_curves(), reference="linucb")
    assert list(rel.columns) == ["learner", "round", "relative"]
    got = {(row.learner, row.round): row.relative for row in rel.itertuples()}
    # sq - linucb per (rho, seed): round 1: 1, 1, 0 -> 2/3; round 2: 2, -1, 3 -> 4/3
    assert got[("sq", 1)] == pytest.approx(2 / 3, abs=1e-12)
    assert got[("sq", 2)] == pytest.approx(4 / 3, abs=1e-12)
    assert got[("linucb", 1)] == 0.0 and got[("linucb", 2)] == 0.0
    assert len(got) == 4


def test_write_report_for_a_single_choice_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _results().to_csv(run / "results.csv", index=False)
    _curves().to_csv(run / "curves.csv", index=False)
    text = write_report([run], reference="linucb")
    for name in ("report.md", "summary.csv", "pareto.png", "regret_curves.png"):
        assert (run / name).stat().st_size > 0, name
    assert (run / "relative_regret.png").stat().st_size > 0
    assert (run / "report.md").read_text() == text
    assert "## Average utility per cost regime" in text
    assert "2 seeds" in text and "rho in [0.0, 300.0, 350.0, 750.0, 800.0]" in text
    # the regime table's numbers (floatfmt .4f) appear in the markdown
    for number in ("0.7500", "0.4000", "0.1000", "0.4800", "0.5800", "0.9000"):
        assert number in text, number
    summary = pd.read_csv(run / "summary.csv").set_index("learner")
    assert list(summary.index) == ["b", "a"]
    assert summary.loc["a", "utility_low"] == pytest.approx(0.75, abs=1e-12)
    assert summary.loc["a", "utility_medium"] == pytest.approx(0.40, abs=1e-12)
    assert summary.loc["b", "utility_high"] == pytest.approx(0.90, abs=1e-12)
    # the overall means: avg_regret = 1 - u, so 1 - 0.48 for a; avg_cost = mean of 1..5 mC
    assert summary.loc["a", "avg_regret"] == pytest.approx(0.52, abs=1e-12)
    assert summary.loc["b", "avg_cost"] == pytest.approx(3e-3, abs=1e-15)
    assert "rho" not in summary and "trial" not in summary and "seed" not in summary


def test_write_report_without_rho_has_no_regime_table(tmp_path):
    """A non-table environment: no rho, no utility/accuracy/cost columns."""
    run, out = tmp_path / "run", tmp_path / "out"
    run.mkdir()
    results = pd.DataFrame(
        {
            "learner": ["x", "x", "y", "y"],
            "trial": [0, 1, 0, 1],
            "seed": [0, 1, 0, 1],
            "rounds": [10, 10, 10, 10],
            "avg_reward": [0.2, 0.4, 0.7, 0.9],
            "avg_regret": [0.6, 0.4, 0.1, 0.0],
        }
    )
    results.to_csv(run / "results.csv", index=False)
    curves = pd.DataFrame(
        {
            "learner": ["x", "x", "y", "y"],
            "trial": [0, 0, 0, 0],
            "seed": [0, 0, 0, 0],
            "round": [5, 10, 5, 10],
            "cum_regret": [3.0, 6.0, 0.5, 1.0],
            "cum_reward": [1.0, 2.0, 3.5, 7.0],
        }
    )
    curves.to_csv(run / "curves.csv", index=False)
    text = write_report([run], out_dir=out, reference="x")
    assert "regime" not in text and "Pareto" not in text
    assert not (out / "pareto.png").exists()
    assert not (out / "relative_regret.png").exists()  # the curves carry no rho
    for name in ("report.md", "summary.csv", "regret_curves.png", "curves_reward.png"):
        assert (out / name).stat().st_size > 0, name
    assert not (run / "report.md").exists()  # written to out_dir only
    summary = pd.read_csv(out / "summary.csv").set_index("learner")
    assert list(summary.columns) == ["avg_reward", "avg_regret"]
    assert summary.loc["x", "avg_reward"] == pytest.approx(0.3, abs=1e-12)
    assert summary.loc["y", "avg_reward"] == pytest.approx(0.8, abs=1e-12)
    assert summary.loc["x", "avg_regret"] == pytest.approx(0.5, abs=1e-12)


def test_load_results_names_a_folder_without_results(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"results\.csv not found"):
        write_report([tmp_path])


def test_a_stopped_run_reports_its_finished_learners(tmp_path):
    """No results.csv: the report is built from runs/<learner>/summary.csv and names the
    configured learner that never finished."""
    run = tmp_path / "run"
    (run / "runs").mkdir(parents=True)
    (run / "config.yaml").write_text("learners:\n  a: {}\n  b: {}\n  slow: {}\n")
    results, curves = _results(), _curves().replace({"learner": {"linucb": "a", "sq": "b"}})
    for name in ("a", "b"):
        folder = run / "runs" / name
        folder.mkdir()
        results[results["learner"] == name].to_csv(folder / "summary.csv", index=False)
        curves[curves["learner"] == name].to_csv(folder / "curve.csv", index=False)
    (run / "runs" / "slow").mkdir()  # started, never wrote its summary
    text = write_report([run])
    assert text.startswith("## An unfinished run")
    assert "the learners that finished (a, b); without results: slow." in text
    # the same numbers as from results.csv: a's low-regime mean worked out by hand above
    summary = pd.read_csv(run / "summary.csv").set_index("learner")
    assert summary.loc["a", "utility_low"] == pytest.approx(0.75, abs=1e-12)
    assert summary.loc["b", "utility_high"] == pytest.approx(0.90, abs=1e-12)
    assert (run / "regret_curves.png").stat().st_size > 0
    assert not (run / "results.csv").exists()  # the report never writes the run's files


def test_a_metric_some_learners_lack_reads_n_a_with_a_word(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    results = _results()
    results["rank"] = results["learner"].map({"a": 3.0})  # only "a" reports it
    results.to_csv(run / "results.csv", index=False)
    text = write_report([run])
    means = text[text.index("## Overall means") :]
    assert "nan" not in means and "n/a" in means
    assert "n/a: no value for that learner" in means
