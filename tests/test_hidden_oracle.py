"""A scenario's new models are hidden from the oracles a run pre-trains (``hide_arms``)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from tests.conftest import naive_best_arms
from tests.trainers.test_pretrain import _cfg, tiny_table
from torchroute.cli import compose_config, main
from torchroute.envs.scenario import new_model_names
from torchroute.run.hidden import hide_from_oracles, scenario_new_models, takes_hidden_arms
from torchroute.run.options import RunOptions
from torchroute.trainers.pretrain import PretrainConfigError, hide_arms, run_pretrain


def test_new_model_names_are_the_named_and_each_rhos_best_model():
    table = tiny_table(k=4)
    rho = [0.0, 300.0, 900.0]
    expected_best = {table.arm_names[k] for k in naive_best_arms(table, rho)}
    spec = [{"kind": "new_model", "arm": "best", "at": 0.5}]
    assert set(new_model_names(spec, table, rho)) == expected_best
    named = [{"kind": "new_model", "arm": "arm3", "at": 0.3}]
    drift = [{"kind": "drift", "arm": "arm1", "at": 0.3, "score_shift": -0.2}]
    assert new_model_names(named + drift, table, rho) == ["arm3"]
    assert new_model_names(drift, table, rho) == [] and new_model_names(None, table, rho) == []


def test_every_oracle_factory_of_a_run_gets_the_new_models_as_its_argument(tmp_path):
    """The CABS preset's oracle nodes (the feature source and every learner's), with a
    named new model: each factory that takes ``hide_arms`` gets it as an argument; the
    learner factories, which take none, do not."""
    cfg = compose_config(
        "simulate",
        [
            "experiment=cabs_table2",
            f"out_dir={tmp_path}",
            "+env.scenario=[{kind: new_model, arm: gpt-4, at: 0.5}]",
        ],
    )
    opts = RunOptions.from_config(cfg)
    table = dataclasses.make_dataclass("T", ["arm_names", "split"])(("a", "gpt-4", "b"), [])
    names = scenario_new_models(opts, table)
    assert names == ["gpt-4"]
    node = hide_from_oracles(opts.learners["cabs_d"], names)
    assert node["oracle"]["_target_"] == "torchroute.trainers.load_or_pretrain"
    assert node["oracle"]["hide_arms"] == ["gpt-4"] and "hide_arms" not in node
    assert "hide_arms" not in opts.learners["cabs_d"]["oracle"]  # a copy
    assert "hide_arms" not in node["oracle"]["config"]  # an argument, not a config rewrite
    features = hide_from_oracles(opts.features.oracle, names)
    assert features["hide_arms"] == ["gpt-4"]
    assert hide_from_oracles(node, []) is node


def test_a_plug_in_oracle_factory_is_judged_by_its_signature():
    assert takes_hidden_arms("torchroute.trainers.load_or_pretrain")
    assert not takes_hidden_arms("torchroute.learners.LinUCB.from_problem")
    assert not takes_hidden_arms("os.system") and not takes_hidden_arms("no.such.thing")


def test_an_oracle_given_as_a_checkpoint_is_used_as_is_with_a_warning(tmp_path, caplog):
    from torchroute.models.oracles import OracleArtifactError
    from torchroute.trainers.pretrain import load_or_pretrain

    with pytest.raises(OracleArtifactError):  # the warning comes before the (missing) file
        load_or_pretrain(tmp_path / "oracle.pt", hide_arms=["gpt-4"])
    assert "new models (gpt-4) are not hidden from the oracle loaded from" in caplog.text


def test_pretrain_with_hide_arms_is_pretraining_on_the_scores_zeroed(tmp_path):
    """The oracle pre-trained with ``hide_arms: [arm1]`` is the one pre-trained on a copy of
    the table whose arm1 scores are 0 in every row (costs kept), not the plain one."""
    table = tiny_table()
    hidden = run_pretrain(_cfg(table, tmp_path / "hidden", hide_arms=["arm1"]))
    scores = table.scores.clone()
    scores[:, 1] = 0.0
    zeroed = run_pretrain(_cfg(dataclasses.replace(table, scores=scores), tmp_path / "zeroed"))
    plain = run_pretrain(_cfg(table, tmp_path / "plain"))
    a = torch.load(tmp_path / "hidden" / "oracle.pt", weights_only=True)["state_dict"]
    b = torch.load(tmp_path / "zeroed" / "oracle.pt", weights_only=True)["state_dict"]
    c = torch.load(tmp_path / "plain" / "oracle.pt", weights_only=True)["state_dict"]
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert any(not torch.equal(a[k], c[k]) for k in a)
    assert hidden["accuracy_mae"] == zeroed["accuracy_mae"] != plain["accuracy_mae"]
    kept = hide_arms(table, ["arm1"])
    assert torch.equal(kept.costs, table.costs) and bool((kept.scores[:, 1] == 0).all())
    with pytest.raises(PretrainConfigError, match=r"cfg\.hide_arms: no model 'gpt-9'"):
        hide_arms(table, ["gpt-9"])


def test_a_scenario_run_pretrains_its_oracle_without_the_new_models(tmp_path):
    """End to end: the static preset on the synthetic text table with each regime's best
    model new halfway pre-trains its oracle with those models hidden (the ones the run's
    problem names, in every trial where they are new), and the regressor scores them 0."""
    out = tmp_path / "run"
    args = [
        "simulate",
        "experiment=routerbench_static",
        "data=synthetic_text",
        "data.num_queries=200",
        f"out_dir={out}",
        f"cache_dir={tmp_path / 'cache'}",
        "+env.scenario=[{kind: new_model, arm: best, at: 0.5}]",
        "+learners.regressor.oracle.config.trainer.max_epochs=2",
        "+learners.regressor.oracle.config.logger=null",
    ]
    assert main(args) == 0
    problem = torch.load(out / "problem.pt", weights_only=True)["problem"]
    new = [n for n, h in zip(problem["arm_names"], problem["hidden_arms"].any(0)) if h]
    assert new  # the scenario hides at least one model
    key = json.loads((out / "oracle" / "pretrain_key.json").read_text())
    assert key["config"]["hide_arms"] == new
