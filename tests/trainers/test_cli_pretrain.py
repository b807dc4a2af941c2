"""The pretrain command and the static-router preset, in-process on tiny data."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from hydra.utils import instantiate

from torchroute.cli import compose_config, main
from torchroute.models import MultiHeadOracle, load_oracle
from torchroute.trainers.pretrain import resolve_config


@pytest.fixture(scope="module")
def oracle_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("oracle")
    cache = tmp_path_factory.getbasetemp() / "cache"
    args = [
        "pretrain",
        f"out_dir={out}",
        f"cache_dir={cache}",
        "data.num_queries=200",
        "trainer.max_epochs=3",
    ]
    assert main(args) == 0
    return out


def test_pretrain_writes_a_loadable_artifact_and_metrics(oracle_dir):
    metrics = json.loads((oracle_dir / "metrics.json").read_text())
    for key in ("accuracy_mae", "baseline_mae", "cost_mre", "propagation_corr", "anchor_corr"):
        assert isinstance(metrics[key], float)
    oracle = load_oracle(oracle_dir / "oracle.pt")
    assert isinstance(oracle, MultiHeadOracle)


def test_static_preset_runs_with_a_pretrained_oracle(oracle_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("static")
    cache = tmp_path_factory.getbasetemp() / "cache"
    args = [
        "simulate",
        "experiment=routerbench_static",
        "data=synthetic_text",
        "data.num_queries=200",
        f"oracle_ckpt={oracle_dir}",
        f"out_dir={out}",
        f"cache_dir={cache}",
        "rhos=[0,900]",
        "seeds=[0,1]",
        "~logger",
        "progress=false",
    ]
    assert main(args) == 0
    results = pd.read_csv(out / "results.csv")
    assert set(results["learner"]) == {"best_single", "knn", "regressor"}
    assert (results["avg_regret"] >= -1e-9).all()


@pytest.mark.parametrize(
    ("override", "key"),
    [("+train.lr_typo=1", "train.lr_typo"), ("+module.lrr=1", "module.lrr")],
)
def test_unknown_pretrain_option_is_named(tmp_path, capsys, override, key):
    args = [
        "pretrain",
        f"out_dir={tmp_path / 'out'}",
        override,
        "data.num_queries=200",
        f"cache_dir={tmp_path}",
    ]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert f"unknown option {key} " in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("overrides", [[], ["experiment=routerbench_oracles"]])
def test_pretrain_configs_resolve_with_their_targets(overrides):
    cfg = resolve_config(compose_config("pretrain", [*overrides, "out_dir=x"]))
    assert cfg["module"]["_target_"] == "torchroute.trainers.OracleModule"
    assert cfg["module"]["lr"] > 0 and cfg["trainer"]["max_epochs"] > 0
    assert cfg["data_module"]["batch_size"] > 0 and cfg["train"]["patience"] > 0


def test_regressor_config_pretrains_through_load_or_pretrain(tmp_path):
    """configs/learner/regressor.yaml passes only {name, out_dir, data, encoder, cache_dir};
    the rest of the pretrain config comes from the packaged pretrain.yaml."""
    cfg = compose_config(
        "simulate",
        [
            "experiment=routerbench_static",
            "data=synthetic_text",
            "data.num_queries=200",
            f"out_dir={tmp_path}",
            f"cache_dir={tmp_path / 'cache'}",
            "+learners.regressor.oracle.config.trainer.max_epochs=2",
            "+learners.regressor.oracle.config.logger=null",
        ],
    )
    oracle = instantiate(cfg.learners.regressor.oracle)
    assert isinstance(oracle, MultiHeadOracle) and oracle.embed_dim == 384
    assert oracle.feature_dim == 128  # packaged oracle section
    metrics = json.loads((tmp_path / "oracle" / "metrics.json").read_text())
    assert metrics["epochs"] == 2
    best = torch.load(tmp_path / "oracle" / "checkpoints" / "best.ckpt", weights_only=True)
    assert best["hyper_parameters"]["loss"] == "huber"  # packaged module section
