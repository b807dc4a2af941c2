"""``torchroute sweep``: selection on the val split, one test evaluation, no test leakage."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.conftest import make_table
from torchroute.cli import main
from torchroute.configs_path import compose_config, config_dir
from torchroute.report import cost_regime
from torchroute.run import ConfigError, run_config
from torchroute.sweep import grid_points, per_trial_params, run_sweep, select

RHOS, SEEDS = [0.0, 500.0, 900.0], [0, 1]
ALPHAS, GAMMAS = [0.1, 0.5, 2.0], [1.0, 50.0]


def routing_table(flip_test: bool = False, with_val: bool = True):
    """90 queries (45 train, 15 val, 30 test); ``flip_test`` turns test scores into ``1 - Y``."""
    table = make_table(n=90, seed=3)
    test = [s == "test" for s in table.split]
    scores = table.scores.clone()
    if flip_test:
        scores[test] = 1 - scores[test]
    split = table.split if with_val else tuple("train" if s == "val" else s for s in table.split)
    return replace(table, scores=scores, split=split)


def _overrides(out_dir, *extra: str) -> list[str]:
    return [
        "experiment=default",
        "~learners.cabs_d",  # its oracle pre-trains from ${encoder}, removed below
        "~data",
        "+data._target_=tests.test_sweep.routing_table",
        "~encoder",
        "~logger",
        "features.pca_dim=null",
        f"rhos={RHOS}",
        f"seeds={SEEDS}",
        "progress=false",
        f"out_dir={out_dir}",
        *extra,
    ]


def _grid_overrides(*extra: str) -> list[str]:
    return [
        "sweep=linucb_alpha",
        f"sweep.grid.linucb.alpha={ALPHAS}",
        f"+sweep.grid.squarecb.gamma={GAMMAS}",  # not per trial: one run per grid point
        *extra,
    ]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The CLI sweep on the tiny table: LinUCB alpha (batched), SquareCB gamma (per point)."""
    out = tmp_path_factory.mktemp("sweep")
    assert main(["sweep", *_overrides(out, *_grid_overrides())]) == 0
    return out, pd.read_csv(out / "sweep_results.csv")


def _float_run(out_dir: Path, learner: str, split: str, rhos, seeds, **values) -> pd.DataFrame:
    """A plain simulate run of one learner with float hyper-parameters (rng=per_trial, as
    every run of the sweep)."""
    sets = [f"learners.{learner}.{k}={v}" for k, v in values.items()]
    extra = [f"run_learners=[{learner}]", f"split={split}", f"rhos={rhos}", f"seeds={seeds}"]
    extra.append("rng=per_trial")
    return run_config(compose_config("simulate", _overrides(out_dir, *extra, *sets)))


def test_grid_points_are_the_product_per_learner():
    points = grid_points({"a": {"x": [1, 2], "y": [3, 4]}, "b": {"z": [5]}})
    assert points == {
        "a": [{"x": 1, "y": 3}, {"x": 1, "y": 4}, {"x": 2, "y": 3}, {"x": 2, "y": 4}],
        "b": [{"z": 5}],
    }


def test_select_takes_the_best_mean_per_regime_and_the_first_of_ties():
    val = pd.DataFrame(
        {
            "learner": ["a"] * 8,
            "point": [0, 0, 1, 1, 0, 0, 1, 1],
            "rho": [0, 300, 0, 300, 500, 900, 500, 900],
            "avg_utility": [0.5, 0.3, 0.2, 0.8, 0.4, 0.1, 0.4, 0.1],
        }
    )
    table = select(val).set_index(["regime", "point"])
    # low: point 0 mean 0.4, point 1 mean 0.5; medium and high: tied -> point 0.
    assert table.loc[("low", 1), "val_utility"] == pytest.approx(0.5)
    chosen = table[table["chosen"]].index.tolist()
    assert sorted(chosen) == [("high", 0), ("low", 1), ("medium", 0)]


def test_sweep_writes_results_and_the_chosen_table(swept):
    out, results = swept
    assert {"learner", "batched", "point", "alpha", "gamma", "regime"} <= set(results)
    assert {"val_utility", "chosen", "test_utility"} <= set(results)
    assert len(results) == (len(ALPHAS) + len(GAMMAS)) * 3  # x 3 regimes
    chosen = results[results["chosen"]]
    assert sorted(zip(chosen["learner"], chosen["regime"])) == sorted(
        (name, r) for name in ("linucb", "squarecb") for r in ("low", "medium", "high")
    )
    assert chosen["test_utility"].notna().all()
    assert results.loc[~results["chosen"], "test_utility"].isna().all()
    assert dict(zip(results["learner"], results["batched"])) == {
        "linucb": True,
        "squarecb": False,
    }
    md = (out / "chosen.md").read_text()
    assert "| linucb" in md and "alpha=" in md and "gamma=" in md
    for folder in ("val/linucb", "test/linucb", "val/squarecb/point-1"):
        assert (out / folder / "results.csv").is_file()


def test_batched_grid_points_and_the_choice_match_separate_float_runs(swept, tmp_path):
    """Each alpha's slice of the batched val run is exactly a float run of that alpha on the
    plain (rho, seed) trials; the sweep's val scores, choice and test scores follow from
    those float runs."""
    out, results = swept
    batched = pd.read_csv(out / "val" / "linucb" / "results.csv")
    point = [g for _ in RHOS for g in range(len(ALPHAS)) for _ in SEEDS]  # the batched layout
    means = {}
    for g, alpha in enumerate(ALPHAS):
        alone = _float_run(tmp_path / f"val{g}", "linucb", "val", RHOS, SEEDS, alpha=alpha)
        rows = [i for i, p in enumerate(point) if p == g]
        pd.testing.assert_frame_equal(
            batched.iloc[rows].reset_index(drop=True), alone, check_exact=True
        )
        means[alpha] = alone.groupby(alone["rho"].map(cost_regime))["avg_utility"].mean()
    linucb = results[results["learner"] == "linucb"]
    for row in linucb.itertuples():
        assert row.val_utility == pytest.approx(means[row.alpha][row.regime], abs=1e-12)
    for regime in ("low", "medium", "high"):
        best = max(ALPHAS, key=lambda a: (means[a][regime], -ALPHAS.index(a)))
        assert linucb[(linucb["regime"] == regime) & linucb["chosen"]]["alpha"].item() == best
    # Test: one batched run with each regime's choice; a float run on the same trials gives
    # each regime's numbers.
    chosen = linucb[linucb["chosen"]].set_index("regime")
    for regime, row in chosen.iterrows():
        alone = _float_run(
            tmp_path / f"test-{regime}", "linucb", "test", RHOS, SEEDS, alpha=row.alpha
        )
        mine = alone[alone["rho"].map(cost_regime) == regime]["avg_utility"].mean()
        assert row.test_utility == pytest.approx(mine, abs=1e-12)


def test_per_point_learner_is_tested_once_on_its_regimes_rhos(swept, tmp_path):
    _, results = swept
    squarecb = results[(results["learner"] == "squarecb") & results["chosen"]]
    for gamma, rows in squarecb.groupby("gamma"):
        rhos = [r for r in RHOS if cost_regime(r) in set(rows["regime"])]
        alone = _float_run(tmp_path / f"g{gamma}", "squarecb", "test", rhos, SEEDS, gamma=gamma)
        per_regime = alone.groupby(alone["rho"].map(cost_regime))["avg_utility"].mean()
        for row in rows.itertuples():
            assert row.test_utility == pytest.approx(per_regime[row.regime], abs=1e-12)


def test_choice_never_reads_the_test_split(swept, tmp_path):
    """Flipping every test score (Y -> 1 - Y) leaves the choice and the val scores alone."""
    _, results = swept
    flipped = tmp_path / "flipped"
    cfg = compose_config("simulate", _overrides(flipped, *_grid_overrides("+data.flip_test=true")))
    again = run_sweep(cfg)
    keys = ["learner", "point", "regime"]
    pd.testing.assert_frame_equal(
        results[[*keys, "val_utility", "chosen"]], again[[*keys, "val_utility", "chosen"]]
    )
    chosen = results["chosen"]
    assert (results.loc[chosen, "test_utility"] != again.loc[chosen, "test_utility"]).any()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], r"sweep\.grid is not set: choose a grid \(sweep=linucb_alpha"),
        (["sweep=linucb_alpha", "+sweep.grid.nope.x=[1]"], r"sweep\.grid\.nope: no learner"),
        (["sweep=linucb_alpha", "+sweep.grid.linucb.alpa=[1]"], r"learners\.linucb has no key"),
        (["sweep=linucb_alpha", "sweep.grid.linucb.alpha=[]"], r"must be a non-empty list"),
        (
            ["sweep=linucb_alpha", "+data.with_val=false"],
            r"split \['val'\] is empty .* give the table a val split, e\.g\. data\.val_fraction",
        ),
    ],
)
def test_bad_sweeps_are_one_line_errors(extra, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        run_sweep(compose_config("simulate", _overrides(tmp_path, *extra)))


def test_cli_sweep_reports_a_bad_grid_in_one_line(tmp_path, capsys):
    assert main(["sweep", *_overrides(tmp_path, "sweep=linucb_alpha", "+sweep.grid.x.y=[1]")]) == 2
    assert "torchroute sweep: error: sweep.grid.x: no learner" in capsys.readouterr().err


def test_shipped_grids_compose_and_say_which_learners_batch():
    cfg = compose_config("simulate", ["experiment=routerbench_baselines", "sweep=baselines"])
    assert set(cfg.sweep.grid) == {"linucb", "epsilon_greedy", "neural_ucb"}
    assert per_trial_params(cfg.learners.linucb) == ("alpha", "lam")
    assert per_trial_params(cfg.learners.epsilon_greedy) == ("eps0", "lam")
    assert per_trial_params(cfg.learners.neural_ucb) == ()  # one run per learning rate
    assert "sweep" not in compose_config("simulate", ["experiment=default"])


def test_wandb_sweep_config_runs_torchroute_simulate_per_grid_point(monkeypatch):
    """wandb's own argument builder turns a grid point into Hydra overrides that compose."""
    from wandb.sdk.launch.sweeps.utils import create_sweep_command_args

    spec = yaml.safe_load((config_dir() / "sweep" / "wandb_sweep.yaml").read_text())
    assert spec["method"] == "grid" and spec["metric"]["name"] == "avg_utility"
    command = spec["command"]
    assert command[:3] == ["${env}", "torchroute", "simulate"]
    assert command[-1] == "${args_no_hyphens}"
    point = {k: {"value": v["values"][-1]} for k, v in spec["parameters"].items()}
    flags = create_sweep_command_args({"args": point})["args_no_hyphens"]
    monkeypatch.setenv("WANDB_RUN_ID", "abc123")
    cfg = compose_config("simulate", [*command[3:-1], *flags])
    assert cfg.split == "val" and cfg.out_dir.endswith("abc123")
    for key, value in point.items():
        got = cfg
        for part in key.split("."):
            got = got[part]
        expected = yaml.safe_load(str(value["value"]))
        assert (list(got) if isinstance(expected, list) else got) == expected


def test_a_bad_grid_value_is_refused_before_any_point_runs(tmp_path, capsys):
    """alpha = -1 is the third of three grid points: nothing of the first two is written."""
    out = tmp_path / "sweep"
    argv = ["sweep", *_overrides(out, "sweep=linucb_alpha", "sweep.grid.linucb.alpha=[0.1,1,-1]")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "sweep.grid.linucb, point 2 {'alpha': -1}" in err and "alpha" in err
    assert not out.exists() or not any(out.rglob("*.csv"))
