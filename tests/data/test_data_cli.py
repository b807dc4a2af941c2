"""Loader options from the command line and ``torchroute data inspect|convert`` (issue 10,
items 4 and 8)."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from torchroute.cli import main
from torchroute.configs_path import compose_config, config_dir
from torchroute.data import load_json_scores, load_routerbench, load_table
from torchroute.data.synthetic import synthetic_text_benchmark

LOADER_CONFIGS = {
    "table": load_table,
    "routerdc": load_json_scores,
    "routerbench": load_routerbench,
    "synthetic_text": synthetic_text_benchmark,
}
#: defaults a data config changes on purpose
DELIBERATE = {("routerbench", "drop_missing"): True}  # RouterBench's ARC part has blanks
PATTERNS = ["score_pattern={arm}", "cost_pattern={arm}_cost", "id_column=null"]


def _csv(path: Path) -> Path:
    pd.DataFrame(
        {
            "prompt": [f"question {i} about {'maths' if i % 2 else 'code'}" for i in range(12)],
            "gpt-4o": [True] * 9 + [False] * 3,
            "gpt-4o_cost": np.linspace(2e-3, 3e-3, 12),
            "llama-8b": [True, False] * 6,
            "llama-8b_cost": 1.25e-4,
            "task": ["maths", "code"] * 6,
        }
    ).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("name", sorted(LOADER_CONFIGS))
def test_every_loader_option_is_declared_with_its_default(name: str):
    node = OmegaConf.to_container(OmegaConf.load(config_dir() / "data" / f"{name}.yaml"))
    params = inspect.signature(LOADER_CONFIGS[name]).parameters
    declared = set(node) - {"_target_"}
    assert declared == set(params), f"{name}.yaml declares {sorted(declared ^ set(params))}"
    for key, p in params.items():
        if p.default is not inspect.Parameter.empty:
            default = list(p.default) if isinstance(p.default, tuple) else p.default
            default = DELIBERATE.get((name, key), default)
            assert node[key] == default, f"{name}.yaml {key}: {node[key]!r} != {default!r}"


def test_loader_options_override_without_plus(tmp_path: Path):
    path = _csv(tmp_path / "pub.csv")
    cfg = compose_config(
        "simulate",
        [
            "data=table",
            f"data.path={path}",
            "data.score_pattern='{arm}'",
            "data.cost_pattern='{arm}_cost'",
            "data.id_column=null",
            "data.text_column=prompt",
            "data.group_column=task",
            "data.test_fraction=0.25",
        ],
    )
    table = instantiate(cfg.data)
    assert table.arm_names == ("gpt-4o", "llama-8b") and table.split.count("test") == 3
    assert table.groups[:2] == ("maths", "code")
    cfg = compose_config("simulate", ["data=routerdc", "data.costs={a: 1.0}", "data.pattern=x"])
    assert cfg.data.costs == {"a": 1.0}


def test_simulate_without_experiment_gets_the_default_learners():
    cfg = compose_config("simulate", ["data=table", "data.path=x.csv"])
    expected = ["random", "best_single", "linucb", "linucb_full", "lints", "epsilon_greedy",
                "squarecb"]  # fmt: skip
    assert list(cfg.learners) == expected
    assert cfg.learners.linucb.lam == 1.0 and cfg.learners.lints.v == 1.0  # library defaults
    paper = compose_config("simulate", ["experiment=default"])
    assert list(paper.learners) == [*expected[:2], "knn_val", "mlp_router", "epsilon_greedy",
                                    "linucb", "lints", "linucb_full", "squarecb", "cabs_d",
                                    "hpg", "residual_linucb"]  # fmt: skip
    assert list(paper.companions) == ["default_subset"]
    assert (paper.learners.linucb.lam, paper.learners.linucb.alpha) == (10.0, 1.0)
    static = compose_config("simulate", ["experiment=routerbench_static"])
    assert list(static.learners) == ["best_single", "knn", "regressor"]  # replaced, not merged


@pytest.mark.slow
def test_simulate_data_table_runs(tmp_path: Path, capsys):
    (tmp_path / "data").mkdir()  # a run never writes inside its data folder
    path = _csv(tmp_path / "data" / "pub.csv")
    code = main(
        [
            "simulate",
            "data=table",
            f"data.path={path}",
            "data.score_pattern='{arm}'",
            "data.cost_pattern='{arm}_cost'",
            "data.id_column=null",
            "data.text_column=prompt",
            f"out_dir={tmp_path / 'out'}",
            f"cache_dir={tmp_path / 'cache'}",
            "progress=false",
            "~logger",
            "report=false",
            "seeds=[0]",
            "rhos=[0]",
            "features.pca_dim=4",
        ]
    )
    assert code == 0
    results = pd.read_csv(tmp_path / "out" / "results.csv")
    assert len(results) == 7 and results["rounds"].eq(4).all()


def test_inspect_prints_what_the_loader_sees(tmp_path: Path, capsys):
    path = _csv(tmp_path / "pub.csv")
    args = ["data", "inspect", str(path), *PATTERNS, "text_column=prompt", "group_column=task"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "queries: 12   arms: 2   train: 8   val: 0   test: 4" in out
    assert "costs: [0.000125, 0.003]" in out and "scores: [0, 1]" in out
    assert "groups: 2: maths (6), code (6)" in out and "missing cells: none" in out
    assert "gpt-4o | 0.75 | [0, 1] | 0.0025 | [0.002, 0.003]" in out
    assert "score_pattern: '{arm}'" in out and "id_column: None" in out
    assert "drop_missing: False" in out  # a default, listed as used
    assert "split at random with seed 0: 8 train, 4 test" in out


def test_inspect_reports_dropped_missing_cells_and_bad_options(tmp_path: Path, capsys):
    path = tmp_path / "gaps.csv"
    frame = pd.read_csv(_csv(tmp_path / "pub.csv"))
    frame["llama-8b"] = frame["llama-8b"].astype(object)
    frame.loc[3, "llama-8b"] = np.nan
    frame.to_csv(path, index=False)
    assert main(["data", "inspect", str(path), *PATTERNS, "drop_missing=true"]) == 0
    assert "missing cells: warning:" in capsys.readouterr().out
    assert main(["data", "inspect", str(path), *PATTERNS, "bogus=1"]) == 2
    assert "table loader has no options ['bogus']" in capsys.readouterr().err
    assert main(["data", "inspect", str(path), *PATTERNS]) == 2
    assert "1 missing (NaN/blank)" in capsys.readouterr().err


def test_convert_writes_the_generic_format(tmp_path: Path, capsys):
    path = _csv(tmp_path / "pub.csv")
    out = tmp_path / "table.parquet"
    assert main(["data", "convert", str(path), str(out), *PATTERNS, "text_column=prompt"]) == 0
    assert "wrote" in capsys.readouterr().out
    direct = load_table(path, score_pattern="{arm}", cost_pattern="{arm}_cost", id_column=None,
                        text_column="prompt")  # fmt: skip
    back = load_table(out)  # the generic layout, default options
    assert (back.arm_names, back.query_ids, back.split, back.text) == (
        direct.arm_names, direct.query_ids, direct.split, direct.text
    )  # fmt: skip
    np.testing.assert_array_equal(back.scores.numpy(), direct.scores.numpy())
    np.testing.assert_array_equal(back.costs.numpy(), direct.costs.numpy())


def test_inspect_json_folder(tmp_path: Path, capsys):
    folder = tmp_path / "scores"
    folder.mkdir()
    rows = [{"question": f"q{i}", "scores": {"a": i % 2, "b": 0.5}} for i in range(4)]
    (folder / "gsm8k_test.json").write_text(pd.Series(rows).to_json(orient="values"))
    (folder / "models.json").write_text('{"a": {}, "b": {}}')
    assert main(["data", "inspect", str(folder), "costs={a: 0.01, b: 0.002}"]) == 0
    out = capsys.readouterr().out
    assert "loader: json_scores" in out and "queries: 4   arms: 2" in out
    assert "skipped 1 .json files" in out and "models.json" in out
    assert "groups: 1: gsm8k (4)" in out and "costs: [0.002, 0.01]" in out
