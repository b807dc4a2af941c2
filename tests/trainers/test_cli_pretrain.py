"""The pretrain command and the static-router preset, in-process on tiny data."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from torchroute.cli import main
from torchroute.models import MultiHeadOracle, load_oracle


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


def test_unknown_pretrain_option_is_named(tmp_path, capsys):
    args = [
        "pretrain",
        f"out_dir={tmp_path}",
        "+train.lr_typo=1",
        "data.num_queries=200",
        f"cache_dir={tmp_path}",
    ]
    assert main(args) == 2
    assert "lr_typo" in capsys.readouterr().err
