"""The first run (`make run`, configs/experiment/default.yaml) on tiny sizes: every learner
family, the companion subset run, an opening sentence per family, the oracle cached."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from torchroute.cli import main
from torchroute.report.headline import OPENING


@pytest.mark.slow
def test_the_default_runs_every_family_with_its_companion(tmp_path, capsys, caplog):
    caplog.set_level(logging.INFO, logger="torchroute")
    out = tmp_path / "run"
    argv = [
        "simulate",
        "experiment=default",
        f"out_dir={out}",
        f"cache_dir={tmp_path / 'cache'}",
        "data.num_queries=120",
        "rhos=[0,900]",
        "seeds=[0]",
        "progress=false",
        "jobs=1",
        "~logger",
        "+learners.cabs_d.oracle.config.trainer={max_epochs: 2}",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    printed = captured.out
    # a quiet console: one line per learner, no Lightning banner, bars or model summary
    console = captured.out + captured.err
    for noise in ("GPU available", "Trainable params", "LeafSpec", "Epoch ", "it/s]"):
        assert noise not in console, noise
    lines = [m for m in caplog.messages if " trials x " in m]  # one per learner, both runs
    assert len(lines) == 12 + 4, lines
    for name in ("random", "cabs_d", "hpg", "omd_approachability"):
        assert any(m.startswith(f"{name}: ") and " rounds, " in m for m in lines), name
    results = pd.read_csv(out / "results.csv")
    assert set(results["learner"]) == {
        "random",
        "best_single",
        "knn_val",
        "mlp_router",
        "epsilon_greedy",
        "linucb",
        "lints",
        "linucb_full",
        "squarecb",
        "cabs_d",
        "hpg",
        "residual_linucb",
    }
    subset = pd.read_csv(out / "default_subset" / "results.csv")
    assert set(subset["learner"]) == {"omd_approachability", "random", "greedy", "cucb"}
    assert len(subset) == 4 and {"avg_reward", "feasible"} <= set(subset)  # 1 trial each
    report = (out / "report.md").read_text()
    assert report.startswith(OPENING) and OPENING in printed
    opening = report.split("\n## ", 2)[0]
    # the drift halfway: the opening compares online and static routers after it too
    assert {"avg_utility_before", "avg_utility_after", "rounds_to_recover"} <= set(results)
    assert "- **online vs static**:" in opening and "after the change in the stream" in opening
    for family in ("baselines", "CABS", "HPG", "residual", "subset routing"):
        assert f"- **{family}**:" in opening
    assert "## Companion run default_subset" in report
    oracle = out / "oracle" / "oracle.pt"
    assert (out / "oracle" / "pretrain_key.json").is_file()
    stamp = oracle.stat().st_mtime_ns
    assert main(argv) == 0  # the same configuration: the oracle is loaded, not trained again
    assert oracle.stat().st_mtime_ns == stamp
