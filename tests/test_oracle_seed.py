"""``oracle_seed`` in the CABS presets: one seed for every oracle node, part of the fingerprint."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import tiny_run_config
from torchroute.checkpoint import CheckpointError
from torchroute.configs_path import compose_config
from torchroute.errors import ConfigError
from torchroute.run import RunOptions, run

PRESETS = ("cabs_table1", "cabs_table2", "cabs_table2_openllm")
PRETRAIN = "torchroute.trainers.load_or_pretrain"


def _oracle_nodes(node, path=""):
    """Every ``load_or_pretrain`` node of a resolved config, with its dotted path."""
    if isinstance(node, dict):
        if node.get("_target_") == PRETRAIN:
            yield path, node
        for key, value in node.items():
            yield from _oracle_nodes(value, f"{path}.{key}" if path else key)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_oracle_node_of_a_preset_gets_the_seed(preset):
    cfg = compose_config("simulate", [f"experiment={preset}", "oracle_seed=2"])
    plain = OmegaConf.to_container(cfg, resolve=True)
    nodes = dict(_oracle_nodes(plain))
    assert "features.oracle" in nodes and len(nodes) >= 3
    configs = {path: node["config"] for path, node in nodes.items()}
    assert all(c["seed"] == 2 for c in configs.values()), configs
    first = next(iter(configs.values()))
    assert all(c == first for c in configs.values())  # one oracle pre-trained per run
    other = compose_config("simulate", [f"experiment={preset}", "oracle_seed=1"])
    # the seed is part of the run's fingerprint
    assert RunOptions.from_config(other).digest() != RunOptions.from_config(cfg).digest()
    if preset != "cabs_table1":
        assert plain["learners"]["cabs_d_identity"]["graph"] == "identity"
        ablated, chosen = plain["learners"]["cabs_d_nosurrogates"], plain["learners"]["cabs_d"]
        assert ablated["surrogates"] == "none" and "surrogates" not in chosen
        assert {k: v for k, v in ablated.items() if k != "surrogates"} == chosen


def _oracle_run(out_dir, seed: int, *extra: str):
    """A tiny run whose features come from an oracle pre-trained in-run with ``seed``."""
    node = {
        "_target_": PRETRAIN,
        "_recursive_": False,
        "checkpoint": None,
        "config": {
            "name": "tiny_oracle",
            "out_dir": str(out_dir / "oracle"),
            "data": {"_target_": "tests.conftest.make_table"},
            "encoder": None,
            "seed": seed,
            "logger": None,
            "oracle": {"feature_dim": 4, "hidden": 8},
            "trainer": {"max_epochs": 2, "enable_progress_bar": False},
        },
    }
    learners = {"linucb": {"_target_": "torchroute.learners.LinUCB.from_problem",
                           "_partial_": True}}  # fmt: skip
    cfg = tiny_run_config(out_dir, learners, "features.source=oracle", *extra)
    cfg.features.oracle = OmegaConf.create(node)
    cfg.oracle_seed = seed
    return cfg


@pytest.mark.slow
def test_runs_of_two_oracle_seeds_get_two_oracles_and_do_not_mix(tmp_path):
    states = []
    for seed in (0, 1):
        out = tmp_path / f"seed{seed}"
        run(RunOptions.from_config(_oracle_run(out, seed)))
        states.append(torch.load(out / "oracle" / "oracle.pt", weights_only=True))
    w0, w1 = (s["state_dict"] for s in states)
    differ = [k for k in w0 if torch.is_tensor(w0[k]) and not torch.equal(w0[k], w1[k])]
    assert differ  # independently initialised and trained
    # a run folder of seed 0 refuses seed 1, and so does a resume from its checkpoint
    with pytest.raises(ConfigError, match="another configuration"):
        run(RunOptions.from_config(_oracle_run(tmp_path / "seed0", 1)))
    ckpt = tmp_path / "seed0" / "checkpoints" / "linucb.pt"
    resumed = _oracle_run(tmp_path / "seed1", 1, f"resume={ckpt}", "overwrite=true")
    with pytest.raises(CheckpointError, match="another configuration"):
        run(RunOptions.from_config(resumed))
