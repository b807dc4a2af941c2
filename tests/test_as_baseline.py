"""A static-router option chosen as the report chooses its baseline
(``choose_on_validation.as_baseline``, :mod:`torchroute.run.as_baseline`): the routers' own
validation utility per group, no replay for it, and only the candidates holding a trial's
chosen router replayed for that trial."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from tests.conftest import tiny_run_config
from torchroute.errors import ConfigError
from torchroute.run import RunOptions, build, run_config
from torchroute.run.as_baseline import router_val_utility
from torchroute.run.choice_rule import ChoiceRule, check_choice_rule

MLP = {
    "_target_": "torchroute.learners.anchors.MLPScoreRouter.from_problem",
    "_partial_": True,
    "hidden": 4,
    "steps": 5,
}
KNN = {
    "_target_": "torchroute.learners.anchors.KNNScoreRouter.from_problem",
    "_partial_": True,
    "k": [1, 3],
}
LOGISTIC = {
    "_target_": "torchroute.learners.anchors.LogisticScoreRouter.from_problem",
    "_partial_": True,
}
RESIDUAL = "torchroute.learners.residual.ResidualLinUCB.from_problem"
RHOS = "rhos=[0,100,200,300,400,500]"


def _run(out, residual: dict, rule: dict, *overrides: str) -> pd.DataFrame:
    """The three routers and ``r`` (a residual LinUCB) on the tiny table, per-trial rng."""
    learners = {
        "m": MLP,
        "k": KNN,
        "g": LOGISTIC,
        "r": {"_target_": RESIDUAL, "_partial_": True, "projection": 0, **residual},
    }
    cfg = tiny_run_config(out, learners, RHOS, "seeds=[0,1]", "rng=per_trial", *overrides)
    cfg.choose_on_validation = OmegaConf.create(rule)
    return run_config(cfg)


def _hand_choice(results: pd.DataFrame, names: list[str], groups: dict[float, str]) -> dict:
    """Per group, the router among ``names`` with the highest mean ``val_utility`` over the
    group's trials (the first listed on a tie), from the routers' own rows."""
    out = {}
    for group in dict.fromkeys(groups.values()):
        means = []
        for name in names:
            rows = results[(results["learner"] == name) & results["rho"].map(groups).eq(group)]
            means.append(rows["val_utility"].mean())
        out[group] = names[int(np.argmax(means))]
    return out


def test_the_base_alone_is_the_regimes_best_router_on_its_own_validation_utility(tmp_path):
    out = tmp_path / "run"
    bases = [MLP, KNN, LOGISTIC]
    rule = {"per": "regime", "as_baseline": ["base"]}
    results = _run(out, {"base": bases}, rule, "report_regimes=[100,400]")
    groups = {0.0: "low", 100.0: "low", 200.0: "medium", 300.0: "medium"}
    groups |= {400.0: "high", 500.0: "high"}
    expected = _hand_choice(results, ["m", "k", "g"], groups)
    rows = results[results["learner"] == "r"]
    assert [expected[groups[rho]] for rho in rows["rho"]] == list(rows["chosen_base"])
    # no replay: the table's utility is the routers' own, per rho
    table = pd.read_csv(out / "runs" / "r" / "choice_on_validation.csv")
    for name in ("m", "k", "g"):
        own = results[results["learner"] == name].groupby("rho")["val_utility"].mean()
        mine = table[table["base"] == name].set_index("rho")["val_utility"]
        assert mine.to_numpy() == pytest.approx(own.loc[mine.index].to_numpy(), abs=1e-6)
    # chosen_val_utility: the chosen router's own, at the trial's rho
    chosen_own = [
        results[(results["learner"] == b) & (results["rho"] == rho)]["val_utility"].mean()
        for b, rho in zip(rows["chosen_base"], rows["rho"])
    ]
    assert list(rows["chosen_val_utility"]) == pytest.approx(chosen_own, abs=1e-6)


def test_per_rho_the_base_is_the_best_router_at_that_rho(tmp_path):
    results = _run(tmp_path / "run", {"base": [MLP, KNN, LOGISTIC]}, {"as_baseline": ["base"]})
    groups = {float(rho): float(rho) for rho in (0, 100, 200, 300, 400, 500)}
    expected = _hand_choice(results, ["m", "k", "g"], groups)
    rows = results[results["learner"] == "r"]
    assert list(rows["chosen_base"]) == [expected[float(rho)] for rho in rows["rho"]]


def test_the_other_keys_are_replayed_with_the_chosen_base_only(tmp_path):
    """``base`` by the routers, ``lam`` by replay: the candidates of another base are not
    run (NaN in the table); the ``lam`` chosen and the replayed utilities are those of a
    run that lists that base alone (the full replay, the independent reference)."""
    rule = {"per": "regime", "as_baseline": ["base"]}
    both = _run(
        tmp_path / "both",
        {"base": [MLP, KNN, LOGISTIC], "lam": [10.0, 1000.0]},
        rule,
        "report_regimes=[100,400]",
    )
    table = pd.read_csv(tmp_path / "both" / "runs" / "r" / "choice_on_validation.csv")
    rows = both[both["learner"] == "r"]
    regime_of = dict(zip(table["rho"], table["regime"]))
    for regime in ("low", "medium", "high"):
        mine = rows[rows["rho"].map(regime_of) == regime]
        (base,) = set(mine["chosen_base"])
        node = {"m": MLP, "k": KNN, "g": LOGISTIC}[base]
        part = table[table["regime"] == regime]
        assert part[part["base"] != base]["val_utility"].isna().all()
        replayed = part[part["base"] == base].set_index(["rho", "lam"])["val_utility"]
        assert replayed.notna().all()
        alone = _run(
            tmp_path / f"alone-{regime}",
            {"base": node, "lam": [10.0, 1000.0]},
            {"per": "regime"},
            "report_regimes=[100,400]",
        )
        ref = pd.read_csv(tmp_path / f"alone-{regime}" / "runs" / "r" / "choice_on_validation.csv")
        ref = ref[ref["regime"] == regime].set_index(["rho", "lam"])["val_utility"]
        assert replayed.to_numpy() == pytest.approx(ref.loc[replayed.index].to_numpy(), abs=1e-9)
        ref_rows = alone[alone["learner"] == "r"]
        ref_lam = set(ref_rows[ref_rows["rho"].isin(mine["rho"])]["chosen_lam"])
        assert set(mine["chosen_lam"]) == ref_lam


def test_static_refit_refits_the_router_chosen_as_the_baseline(tmp_path):
    refit = {
        "_target_": "torchroute.learners.refit.StaticRefit.from_problem",
        "_partial_": True,
        "base": [MLP, KNN, LOGISTIC],
    }
    residual = {"_target_": RESIDUAL, "_partial_": True, "projection": 0, "base": [MLP, KNN]}
    learners = {"m": MLP, "k": KNN, "g": LOGISTIC, "s": refit, "r": residual}
    cfg = tiny_run_config(tmp_path / "run", learners, RHOS, "seeds=[0,1]")
    # qualified: static_refit's base as the baseline; the residual learner's base replayed
    cfg.choose_on_validation = OmegaConf.create({"as_baseline": ["s.base"]})
    results = run_config(cfg)
    replayed = pd.read_csv(tmp_path / "run" / "runs" / "r" / "choice_on_validation.csv")
    own = results[results["learner"] == "m"].groupby("rho")["val_utility"].mean()
    mine = replayed[replayed["base"] == "m"].set_index("rho")["val_utility"]
    assert mine.notna().all()  # every candidate replayed for every trial
    assert not np.allclose(mine.to_numpy(), own.loc[mine.index].to_numpy())
    groups = {float(rho): float(rho) for rho in (0, 100, 200, 300, 400, 500)}
    expected = _hand_choice(results, ["m", "k", "g"], groups)
    rows = results[results["learner"] == "s"]
    assert list(rows["chosen_base"]) == [expected[float(rho)] for rho in rows["rho"]]
    # without a scenario it plays its base: the chosen router's test utility
    for _, row in rows.iterrows():
        own = results[(results["learner"] == row["chosen_base"]) & (results["rho"] == row["rho"])]
        own = own[own["seed"] == row["seed"]]
        assert row["avg_utility"] == pytest.approx(float(own["avg_utility"].iloc[0]), abs=1e-6)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"as_baseline": "base"}, "choose_on_validation.as_baseline must be a list"),
        (
            {"as_baseline": ["base"], "prefer_first": ["base"]},
            "listed in both as_baseline and prefer_first",
        ),
    ],
)
def test_bad_as_baseline_fails_by_name(value, message):
    with pytest.raises(ConfigError, match=message):
        check_choice_rule(value)


def test_as_baseline_is_read():
    assert check_choice_rule({"as_baseline": ["base"]}) == ChoiceRule(as_baseline=("base",))


def test_a_value_that_is_no_router_with_a_validation_utility_fails_by_name(tmp_path):
    """Refused in one line naming the list entry, before anything is written: by the
    residual learner's own check, and by the choice itself for a learner that would take
    any static policy (the router is read for its ``val_utility``)."""
    best_arm = {
        "_target_": "torchroute.learners.simple.BestSingleArm.from_problem",
        "_partial_": True,
    }
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"learners\.r: .*base must be a static router"):
        _run(out, {"base": [MLP, best_arm]}, {"as_baseline": ["base"]})
    assert not (out / "results.csv").exists()
    cfg = tiny_run_config(tmp_path / "direct", {"m": MLP})
    env = build(RunOptions.from_config(cfg)).env
    assert router_val_utility(MLP, env, "learners.r.base[0]").shape == (env.num_trials,)
    uniform = {"_target_": "torchroute.learners.RandomRouter.from_problem", "_partial_": True}
    with pytest.raises(ConfigError, match=r"learners\.r\.base\[1\]: .*validation utility"):
        router_val_utility(uniform, env, "learners.r.base[1]")
