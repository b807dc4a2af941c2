"""The validation stream as long as the test stream (``choose_on_validation.rounds: test``):
the validation rows replayed in passes, each a new order from the trial's seed."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import make_table, tiny_run_config
from torchroute.envs.single_choice import SingleChoiceEnv
from torchroute.errors import ConfigError
from torchroute.run import RunOptions, build, run_config
from torchroute.run.choice_rule import check_choice_rule
from torchroute.run.choose_on_validation import validation_env

D_LINUCB = {
    "_target_": "torchroute.learners.discounted.DiscountedLinUCB.from_problem",
    "_partial_": True,
    "alpha": 1.0,
}
DRIFT = [{"kind": "drift", "arm": "arm0", "at": 0.5, "score_shift": -0.6}]


def test_passes_are_new_permutations_from_the_trials_seed():
    table = make_table()
    val = torch.as_tensor(table.rows("val"))
    n = val.numel()
    env = SingleChoiceEnv(table, rho=[0.0, 0.0], seeds=[3, 7], split="val", horizon=2 * n + 4,
                          repeat=True)  # fmt: skip
    once = SingleChoiceEnv(table, rho=[0.0, 0.0], seeds=[3, 7], split="val")
    for trial, seed in enumerate((3, 7)):
        g = torch.Generator().manual_seed(seed)
        hand = torch.cat([val[torch.randperm(n, generator=g)] for _ in range(3)])[: 2 * n + 4]
        assert torch.equal(env._stream[trial].cpu(), hand)
        assert torch.equal(env._stream[trial, :n].cpu(), once._stream[trial].cpu())
        # each pass holds every validation row once
        assert torch.equal(env._stream[trial, n : 2 * n].sort().values.cpu(), val.sort().values)
    assert env.fingerprint()["repeat"] is True and "repeat" not in once.fingerprint()


def test_without_repeat_the_horizon_stays_within_the_split():
    table = make_table()
    n = len(table.rows("val"))
    with pytest.raises(ValueError, match=rf"rounds={n + 1} but split 'val'"):
        SingleChoiceEnv(table, rho=[0.0], seeds=[0], split="val", horizon=n + 1)


def _config(out_dir, rounds):
    node = {**D_LINUCB, "gamma": [0.9, 1.0]}
    cfg = tiny_run_config(out_dir, {"d": node}, "rng=per_trial", "seeds=[0,1]")
    cfg.env.scenario = DRIFT
    if rounds is not None:
        cfg.choose_on_validation = OmegaConf.create({"rounds": rounds})
    return cfg


def test_the_validation_stream_has_the_test_horizon_and_its_change_round(tmp_path):
    cfg = _config(tmp_path / "run", "test")
    opts = RunOptions.from_config(cfg)
    built = build(opts)
    env = built.env
    n_val = len(built.table.rows("val"))
    assert env.horizon > n_val  # the tiny table's test split is longer than its val split
    val_env = validation_env(opts, built, env, 2, "d")
    assert val_env.horizon == env.horizon and val_env.num_trials == 2 * env.num_trials
    assert val_env.scenario.change == env.scenario.change
    default = validation_env(RunOptions.from_config(_config(tmp_path / "d", None)), built, env,
                             2, "d")  # fmt: skip
    assert default.horizon == n_val
    assert default.scenario.change == int(0.5 * n_val)


def test_a_run_chooses_on_the_longer_stream(tmp_path):
    """Each candidate's validation utility is that of a plain run of its value replaying
    the validation rows for the test stream's rounds (the independent reference)."""
    out = tmp_path / "run"
    run_config(_config(out, "test"))
    horizon = len(make_table().rows("test"))  # the test stream's rounds
    table = pd.read_csv(out / "runs" / "d" / "choice_on_validation.csv")
    for gamma in (0.9, 1.0):
        cfg = _config(tmp_path / f"solo-{gamma}", None)
        cfg.learners.d.gamma = gamma
        cfg.split = "val"
        cfg.env.repeat = True
        cfg.rounds = horizon
        solo = run_config(cfg)
        mine = table[table["gamma"] == gamma].set_index("rho")["val_utility"]
        ref = solo.groupby("rho")["avg_utility"].mean()
        assert mine.to_numpy() == pytest.approx(ref.loc[mine.index].to_numpy(), abs=1e-9)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"rounds": "all"}, r"choose_on_validation\.rounds must be one of"),
        ({"rounds": 3}, r"choose_on_validation\.rounds must be one of"),
        ({"seeds": 0}, r"choose_on_validation\.seeds must be an integer >= 1"),
        ({"seeds": "2"}, r"choose_on_validation\.seeds must be an integer >= 1"),
        ({"seeds": True}, r"choose_on_validation\.seeds must be an integer >= 1"),
    ],
)
def test_bad_rounds_or_seeds_fail_by_name(value, message):
    with pytest.raises(ConfigError, match=message):
        check_choice_rule(value)


def test_the_defaults_replay_the_split_once_with_every_seed():
    rule = check_choice_rule({})
    assert rule.rounds == "split" and rule.seeds is None


def test_replaying_the_first_seeds_only_chooses_as_a_run_of_those_seeds(tmp_path):
    """``seeds: 1``: the candidates replay seed 0's trials only; each rho's choice and
    validation utilities are those of a run whose only seed is 0 (the reference), and the
    run's other seeds take their rho's choice."""
    rule = {"seeds": 1}
    cfg = _config(tmp_path / "run", None)
    cfg.seeds = [0, 1, 2]
    cfg.rhos = [0, 100]
    cfg.choose_on_validation = OmegaConf.create(rule)
    results = run_config(cfg)
    table = pd.read_csv(tmp_path / "run" / "runs" / "d" / "choice_on_validation.csv")
    ref_cfg = _config(tmp_path / "ref", None)
    ref_cfg.seeds = [0]
    ref_cfg.rhos = [0, 100]
    ref = run_config(ref_cfg)
    ref_table = pd.read_csv(tmp_path / "ref" / "runs" / "d" / "choice_on_validation.csv")
    assert table["val_utility"].to_numpy() == pytest.approx(
        ref_table["val_utility"].to_numpy(), abs=1e-9
    )
    for rho in (0.0, 100.0):
        ours = results[results["rho"] == rho]["chosen_gamma"]
        theirs = ref[ref["rho"] == rho]["chosen_gamma"]
        assert set(ours) == set(theirs) and ours.nunique() == 1
