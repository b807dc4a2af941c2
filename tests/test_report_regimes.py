"""The cost regimes of a run: its own tertiles, the CABS cuts, or the user's, said in the report."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from torchroute.cli import main
from torchroute.errors import ConfigError
from torchroute.report import cost_regime, write_report
from torchroute.report.regimes import regime_rule

#: a table of dollar costs: every useful rho in 0..300 (the CABS cuts call all of them low)
DOLLAR_RHOS = [0.0, 50.0, 100.0, 150.0, 200.0, 250.0, 300.0]
PRESETS = Path(__file__).resolve().parents[1] / "configs" / "experiment"


def test_a_run_with_rhos_in_0_to_300_gets_three_regimes_by_tertiles():
    rule = regime_rule(DOLLAR_RHOS)
    assert rule.name == "tertiles"
    # seven rhos in three groups as equal as they can be, the first the largest: 3, 2, 2
    by_hand = ["low"] * 3 + ["medium"] * 2 + ["high"] * 2
    assert [rule.of(r) for r in DOLLAR_RHOS] == by_hand
    assert "tertiles of the run's rhos" in rule.describe()
    assert "rho <= 100" in rule.describe() and "rho >= 250" in rule.describe()


def _preset_grids() -> list[tuple[str, list[float]]]:
    grids = []
    for path in sorted(PRESETS.glob("*.yaml")):
        rhos = (yaml.safe_load(path.read_text()) or {}).get("rhos")
        if isinstance(rhos, list):
            grids.append((path.stem, [float(r) for r in rhos]))
    return grids


@pytest.mark.parametrize(("preset", "rhos"), _preset_grids())
def test_every_preset_keeps_the_cabs_cuts_it_was_published_with(preset, rhos):
    rule = regime_rule(rhos)  # auto
    assert [rule.of(r) for r in rhos] == [cost_regime(r) for r in rhos], preset


def test_the_routerbench_grid_would_move_under_tertiles():
    """Why auto keeps the CABS cuts there: tertiles of 0..1000 step 50 put 350 in medium
    (as the cuts do) but 700 and 750 in high (the cuts: medium)."""
    grid = [50.0 * i for i in range(21)]
    tertiles = regime_rule(grid, "tertiles")
    assert (tertiles.low_max, tertiles.high_min) == (300.0, 700.0)
    assert [tertiles.of(r) for r in (700.0, 750.0)] == ["high", "high"]
    assert [cost_regime(r) for r in (700.0, 750.0)] == ["medium", "medium"]
    assert regime_rule(grid).name == "cabs"


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ("cabs", ["low"] * 7),
        ([100, 250], ["low", "low", "low", "medium", "medium", "high", "high"]),
        ("60,200", ["low", "low", "medium", "medium", "high", "high", "high"]),
    ],
)
def test_the_cabs_cuts_or_the_users_own(rule, expected):
    assert [regime_rule(DOLLAR_RHOS, rule).of(r) for r in DOLLAR_RHOS] == expected


@pytest.mark.parametrize("bad", ["fourths", [300, 100], [1, 2, 3], ["a", "b"], "1,inf"])
def test_a_bad_rule_is_one_line_naming_the_key(bad):
    with pytest.raises(ConfigError, match=r"^report_regimes must be auto, cabs, tertiles") as e:
        regime_rule(DOLLAR_RHOS, bad)
    assert "\n" not in str(e.value)


def _dollar_run(folder: Path) -> Path:
    """Two learners on the dollar rhos: ``a`` at 0.9 - rho / 1000, ``b`` flat at 0.6."""
    rows = [
        {"learner": name, "trial": t, "rho": rho, "seed": 0, "rounds": 10,
         "avg_utility": u, "avg_regret": 1 - u, "accuracy": u, "avg_cost": 1e-4}
        for name in ("a", "b")
        for t, rho in enumerate(DOLLAR_RHOS)
        for u in [0.9 - rho / 1000 if name == "a" else 0.6]
    ]  # fmt: skip
    folder.mkdir()
    pd.DataFrame(rows).to_csv(folder / "results.csv", index=False)
    return folder


def test_the_report_has_three_regimes_and_names_its_rule(tmp_path):
    run = _dollar_run(tmp_path / "run")
    text = write_report([run])
    assert "Cost regimes by tertiles of the run's rhos: low: rho <= 100" in text
    summary = pd.read_csv(run / "summary.csv").set_index("learner")
    # a's mean utility per regime by hand: 0.9 - mean rho / 1000
    assert summary.loc["a", "utility_low"] == pytest.approx(0.9 - 0.05)
    assert summary.loc["a", "utility_medium"] == pytest.approx(0.9 - 0.175)
    assert summary.loc["a", "utility_high"] == pytest.approx(0.9 - 0.275)


def test_the_rule_from_the_command_line_or_the_runs_config(tmp_path, capsys):
    run = _dollar_run(tmp_path / "run")
    assert main(["report", str(run), "--regimes", "cabs"]) == 0
    assert "Cost regimes by the CABS paper's fixed cuts" in capsys.readouterr().out
    assert list(pd.read_csv(run / "summary.csv").filter(like="utility_").columns) == [
        "utility_low",
        "utility_all",
    ]
    (run / "config.yaml").write_text("report_regimes: [50, 300]\n")
    assert main(["report", str(run)]) == 0
    assert "Cost regimes by the cuts report_regimes gave: low: rho <= 50" in (
        capsys.readouterr().out
    )
    before = (run / "report.md").read_text()
    assert main(["report", str(run), "--regimes", "fourths"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--regimes must be auto, cabs, tertiles" in err[0]
    assert (run / "report.md").read_text() == before


def test_a_bad_rule_in_the_runs_config_or_a_simulate_override_is_one_line(tmp_path, capsys):
    from tests.conftest import LINUCB_NODE, tiny_run_config
    from torchroute.run import RunOptions

    run = _dollar_run(tmp_path / "run")
    (run / "config.yaml").write_text("report_regimes: fourths\n")
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "config.yaml: report_regimes must be auto" in err[0]
    assert not (run / "report.md").exists()
    cfg = tiny_run_config(tmp_path / "sim", {"linucb": LINUCB_NODE}, "report_regimes=[800,300]")
    with pytest.raises(ConfigError, match=r"^report_regimes must be auto"):
        RunOptions.from_config(cfg)
