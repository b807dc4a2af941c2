"""``torchroute.run.build``: one rule for table envs, and ``build`` giving table, features,
env and problem."""

from __future__ import annotations

import pytest
import torch

from torchroute.cli import compose_config, main
from torchroute.envs.low_rank_experts import low_rank_experts_table
from torchroute.run import ConfigError, RunOptions, build, env_takes_table

#: a small table with embeddings (no encoder)
TABLE = ["data=low_rank_experts", "data.num_queries=120", "~encoder", "~logger"]


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("torchroute.envs.SingleChoiceEnv", True),  # a class with a table argument
        ("torchroute.envs.table_subset_env", True),  # a function with one
        ("torchroute.envs.LowRankExperts", False),  # a simulator
        ("torchroute.envs.trec_subset_env", False),  # reads its own files
    ],
)
def test_env_takes_table_reads_the_factory(target, expected):
    assert env_takes_table({"_target_": target}) is expected


def test_env_takes_table_names_a_bad_target():
    with pytest.raises(ConfigError, match=r"env\._target_='torchroute\.envs\.Nope'"):
        env_takes_table({"_target_": "torchroute.envs.Nope"})


def test_build_gives_the_table_features_env_and_problem():
    cfg = compose_config(
        "simulate", [*TABLE, "features.pca_dim=null", "seeds=[0,1]", "rhos=[0.0]", "out_dir=x"]
    )
    built = build(RunOptions.from_config(cfg))
    table = low_rank_experts_table(num_queries=120, seed=0, dim=64, num_experts=8, rank=4)
    e = table.embeddings.double()
    by_hand = torch.cat([e / e.norm(dim=1, keepdim=True), torch.ones(len(e), 1, dtype=e.dtype)], 1)
    torch.testing.assert_close(built.features, by_hand.float(), rtol=0, atol=0)
    assert built.problem.num_trials == 2 and built.problem.num_arms == 8
    assert built.problem.dim == 65
    alone = build(RunOptions.from_config(cfg), env=False)
    assert alone.env is None and torch.equal(alone.features, built.features)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["env=low_rank_experts", *TABLE], "reads or simulates its own data"),
        (["env=single_choice", "~data", "~encoder", "~logger"], "runs on a routing table"),
    ],
)
def test_an_env_and_data_that_do_not_fit_are_one_line(tmp_path, capsys, overrides, expected):
    out = tmp_path / "run"
    argv = ["simulate", *overrides, "experiment=baselines", f"out_dir={out}", "progress=false"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize(
    "node",
    [
        {"_target_": "torchroute.learners.LinUCB"},
        {"_target_": "torchroute.learners.LinUCB", "_partial_": True, "alpha": 2.0},
        {"_target_": "torchroute.learners.LinUCB.from_problem"},
    ],
)
def test_a_learner_node_that_is_not_its_factory_says_how_learners_are_built(tmp_path, node):
    from tests.conftest import tiny_run_config
    from torchroute.run import RunOptions, run
    from torchroute.run.options import ConfigError

    out = tmp_path / "out"
    opts = RunOptions.from_config(tiny_run_config(out, {"lin": node}))
    expected = (
        f"learners.lin: _target_='{node['_target_']}' does not build a learner that way: "
        "a learner node names a factory the run calls with its Problem, with _partial_: true "
        "({_target_: torchroute.learners.LinUCB.from_problem, _partial_: true, "
        "<hyper-parameters>}, as configs/learner/)"
    )
    with pytest.raises(ConfigError) as caught:
        run(opts)
    assert str(caught.value) == expected
    assert not out.exists()
