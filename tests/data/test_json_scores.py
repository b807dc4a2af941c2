"""JSON score-list loader (RouterDC layout): the real folder and bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from torchroute.data import TableError, load_json_scores

MODELS = (
    "mistralai/Mistral-7B-v0.1",
    "meta-math/MetaMath-Mistral-7B",
    "itpossible/Chinese-Mistral-7B-v0.1",
    "HuggingFaceH4/zephyr-7b-beta",
    "cognitivecomputations/dolphin-2.6-mistral-7b",
    "meta-llama/Meta-Llama-3-8B",
    "cognitivecomputations/dolphin-2.9-llama3-8b",
)


@pytest.fixture(scope="module")
def routerdc(shared_data: Path):
    return load_json_scores(shared_data / "routerdc_model7")


def test_real_folder(routerdc):
    t = routerdc
    assert t.arm_names == MODELS
    assert t.num_queries == 20600
    assert len(t.rows("train")) == 820 + 1663 + 2000 + 1000 + 115 + 2000
    assert len(t.rows("test")) == 20600 - 7598  # *_test files plus the unmarked ones
    assert {"gsm8k", "MATH_prealgebra", "mmlu", "ceval", "arc_challenge"} <= set(t.groups)
    assert t.groups[t.query_ids.index("gsm8k-train:0")] == "gsm8k"
    assert t.split[t.query_ids.index("mbpp:0")] == "test"
    assert float(t.costs.abs().sum()) == 0.0  # no costs in this data
    assert float(t.scores.min()) >= 0.0 and float(t.scores.max()) <= 1.0


def test_real_file_with_costs_and_random_split(shared_data: Path):
    path = shared_data / "routerdc_model7" / "mbpp.json"
    costs = {m: 1e-4 * (k + 1) for k, m in enumerate(MODELS)}
    t = load_json_scores(path, costs=costs, default_split="random", val_fraction=0.2, seed=1)
    assert t.num_queries == 500 and set(t.split) == {"train", "val", "test"}
    assert len(t.rows("test")) == 150 and len(t.rows("val")) == 70
    np.testing.assert_allclose(t.costs[0].numpy(), [1e-4 * (k + 1) for k in range(7)])


def _write(tmp_path: Path, entries: list, name: str = "toy_train.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(entries))
    return path


def _entries(**override) -> list:
    rows = [
        {"question": "q0", "scores": {"a": 1.0, "b": 0.5}},
        {"question": "q1", "scores": {"a": 0.0, "b": 0.25}, "cluster_id": 3},
        {"question": "q2", "scores": {"a": 0.5, "b": 1.0}},
    ]
    for i, scores in override.items():
        rows[int(i[1:])]["scores"] = scores
    return rows


def test_costs_from_csv(tmp_path: Path):
    csv = tmp_path / "prices.csv"
    csv.write_text("model,avg_cost_usd\nvendor/a,0.001\nb,0.002\n")
    t = load_json_scores(_write(tmp_path, _entries()), costs=csv)
    assert t.split == ("train",) * 3 and t.groups == ("toy",) * 3
    np.testing.assert_allclose(t.costs.numpy(), [[1e-3, 2e-3]] * 3)
    with pytest.raises(TableError, match=r"no cost for models \['b'\]"):
        load_json_scores(_write(tmp_path, _entries()), costs={"a": 1.0})


def test_unknown_model(tmp_path: Path):
    with pytest.raises(TableError, match=r"models \['c'\] have no scores"):
        load_json_scores(_write(tmp_path, _entries()), models=["a", "c"])


def test_score_outside_unit_interval(tmp_path: Path):
    path = _write(tmp_path, _entries(q1={"a": 1.5, "b": 0.0}))
    with pytest.raises(TableError, match=r"toy_train.json: 1 scores cells .*'toy_train:1'"):
        load_json_scores(path)


def test_null_or_absent_scores(tmp_path: Path):
    path = _write(tmp_path, _entries(q0={"a": None, "b": 0.5}, q2={"a": 1.0}))
    with pytest.raises(TableError, match=r"2 missing .* \{'a': 1, 'b': 1\}"):
        load_json_scores(path)
    with pytest.warns(UserWarning, match="dropped 2 of 3 queries"):
        t = load_json_scores(path, drop_missing=True)
    assert t.text == ("q1",)


def test_malformed_files(tmp_path: Path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TableError, match=r"bad\.json: could not be read as JSON"):
        load_json_scores(bad)
    with pytest.raises(TableError, match="entry 0 must be an object"):
        load_json_scores(_write(tmp_path, [{"text": "x"}], "x.json"))
    with pytest.raises(TableError, match="must be a number"):
        load_json_scores(_write(tmp_path, _entries(q0={"a": "yes", "b": 1})))


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "scores"
    folder.mkdir()
    _write(folder, _entries(), "gsm8k_train.json")
    _write(folder, _entries()[:2], "mbpp-test.json")
    (folder / "models.json").write_text(json.dumps({"a": {"params": "7B"}, "b": {}}))
    (folder / "config.json").write_text(json.dumps([{"name": "x"}]))
    (folder / "README.md").write_text("not json")
    return folder


def test_folder_skips_unrelated_json_and_says_so(tmp_path: Path, caplog):
    with caplog.at_level("INFO", logger="torchroute.data"):
        t = load_json_scores(_folder(tmp_path))
    assert t.num_queries == 5
    assert t.groups == ("gsm8k",) * 3 + ("mbpp",) * 2  # per-file task names
    assert t.split == ("train",) * 3 + ("test",) * 2
    skipped = next(r.getMessage() for r in caplog.records if "skipped" in r.getMessage())
    assert "skipped 2 .json files" in skipped
    assert "config.json" in skipped and "models.json" in skipped


def test_folder_pattern_reads_only_matching_files(tmp_path: Path):
    folder = _folder(tmp_path)
    t = load_json_scores(folder, pattern="*-test.json")
    assert t.query_ids == ("mbpp-test:0", "mbpp-test:1") and t.groups == ("mbpp", "mbpp")
    with pytest.raises(TableError, match=r"no file matches pattern '\*\.jsonl'"):
        load_json_scores(folder, pattern="*.jsonl")
    with pytest.raises(TableError, match=r"config\.json: entry 0 must be an object"):
        load_json_scores(folder, pattern="*.json")  # matched files must be score lists


def test_folder_without_score_lists(tmp_path: Path):
    (tmp_path / "models.json").write_text("{}")
    with pytest.raises(TableError, match=r"no \.json file in the directory is a list of"):
        load_json_scores(tmp_path)
