"""RouterBench loader: the real files and one test per kind of bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from torchroute.data import TableError, load_routerbench, parse_prompt

ARMS = (
    "WizardLM/WizardLM-13B-V1.2",
    "claude-instant-v1",
    "claude-v1",
    "claude-v2",
    "gpt-3.5-turbo-1106",
    "gpt-4-1106-preview",
    "meta/code-llama-instruct-34b-chat",
    "meta/llama-2-70b-chat",
    "mistralai/mistral-7b-chat",
    "mistralai/mixtral-8x7b-chat",
    "zero-one-ai/Yi-34B-Chat",
)


@pytest.fixture(scope="module")
def routerbench(shared_data: Path):
    with pytest.warns(UserWarning, match="dropped 28 of 3178 queries"):
        return load_routerbench(shared_data / "routerbench", drop_missing=True)


def test_real_directory(routerbench):
    t = routerbench
    assert t.arm_names == ARMS
    assert t.num_queries == 3150
    assert len(t.rows("train")) == 1039 + 299 + 887 - 20
    assert len(t.rows("test")) == 445 + 128 + 380 - 8
    assert set(t.groups) == {"arc-challenge", "mbpp", "winogrande"}
    assert len(set(t.query_ids)) == t.num_queries  # repeated sample_ids were renamed
    assert set(np.unique(t.scores.numpy())) <= {0.0, 1.0}
    assert (t.costs > 0).all() and t.costs.max() < 0.1
    assert not t.text[0].startswith("['") and "Answer:" in t.text[0]


def test_real_missing_cells_raise(shared_data: Path):
    with pytest.raises(TableError, match=r"62 missing .* in 8 queries .* drop_missing=True"):
        load_routerbench(shared_data / "routerbench" / "arc_challenge_test.csv")


def test_real_val_fraction_is_seeded(shared_data: Path):
    path = shared_data / "routerbench" / "winograde_train.csv"
    a = load_routerbench(path, val_fraction=0.1, seed=3)
    b = load_routerbench(path, val_fraction=0.1, seed=3)
    c = load_routerbench(path, val_fraction=0.1, seed=4)
    assert len(a.rows("val")) == round(0.1 * 887) and len(a.rows("train")) == 887 - 89
    assert a.split == b.split and a.split != c.split
    with pytest.raises(TableError, match="is empty"):
        a.rows("test")


def _tiny(**changes) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "sample_id": ["t.0", "t.1", "t.2"],
            "prompt": ["['What is 1+1?']", "['Part one', 'part two']", "plain text"],
            "eval_name": ["math", "math", "qa"],
            "m1": [1.0, 0.0, 1.0],
            "m2": [0.0, 1.0, 1.0],
            "m1|model_response": ["['2']", "['x']", "['y']"],
            "m1|total_cost": [1e-4, 2e-4, 3e-4],
            "m2|total_cost": [1e-3, 2e-3, 3e-3],
        }
    )
    for col, value in changes.items():
        frame[col] = value
    return frame


def _write(tmp_path: Path, frame: pd.DataFrame, name: str = "tiny_train.csv") -> Path:
    path = tmp_path / name
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    elif path.suffix == ".parquet":
        frame.to_parquet(path)
    else:
        frame.to_pickle(path)
    return path


@pytest.mark.parametrize("name", ["tiny_train.csv", "tiny_train.parquet", "tiny_train.pkl"])
def test_tiny_file_formats(tmp_path: Path, name: str):
    t = load_routerbench(_write(tmp_path, _tiny(), name), trust_pickle=name.endswith(".pkl"))
    assert t.arm_names == ("m1", "m2")
    assert t.split == ("train",) * 3
    assert t.text == ("What is 1+1?", "Part one\n\npart two", "plain text")
    assert t.groups == ("math", "math", "qa")
    np.testing.assert_allclose(t.costs[:, 1].numpy(), [1e-3, 2e-3, 3e-3])


def test_unmarked_file_gets_default_split(tmp_path: Path):
    path = _write(tmp_path, _tiny(), "bench.csv")
    assert load_routerbench(path, default_split="test").split == ("test",) * 3
    assert set(load_routerbench(path, test_fraction=0.34).split) == {"train", "test"}


def test_missing_model_column(tmp_path: Path):
    path = _write(tmp_path, _tiny())
    with pytest.raises(TableError, match=r"tiny_train.csv: missing model correctness .*'m3'"):
        load_routerbench(path, models=["m1", "m3"])


def test_missing_cost_column(tmp_path: Path):
    path = _write(tmp_path, _tiny().drop(columns=["m2|total_cost"]))
    with pytest.raises(TableError, match=r"cost columns \['m2\|total_cost'\]"):
        load_routerbench(path, models=["m1", "m2"])
    no_models = _tiny().drop(columns=["m1|total_cost", "m2|total_cost"])
    with pytest.raises(TableError, match="no model columns"):
        load_routerbench(_write(tmp_path, no_models))


def test_scores_outside_unit_interval(tmp_path: Path):
    path = _write(tmp_path, _tiny(m1=[1.0, 2.0, 0.0]))
    with pytest.raises(TableError, match=r"tiny_train.csv: 1 scores cells are not in \[0.0, 1.0\]"):
        load_routerbench(path)


def test_negative_cost(tmp_path: Path):
    path = _write(tmp_path, _tiny(**{"m2|total_cost": [1e-3, -2e-3, 3e-3]}))
    with pytest.raises(TableError, match=r"1 costs cells are not >= 0.0.*'t.1'"):
        load_routerbench(path)


def test_nan_cells_raise_or_drop(tmp_path: Path):
    path = _write(tmp_path, _tiny(m1=[1.0, np.nan, np.nan]))
    with pytest.raises(TableError, match=r"2 missing .* \{'m1': 2\}"):
        load_routerbench(path)
    with pytest.warns(UserWarning, match="dropped 2 of 3 queries"):
        t = load_routerbench(path, drop_missing=True)
    assert t.query_ids == ("t.0",)


def test_malformed_prompt(tmp_path: Path):
    path = _write(tmp_path, _tiny(prompt=["['ok']", "['unterminated", "x"]))
    with pytest.raises(TableError, match=r"tiny_train.csv row 1: malformed prompt"):
        load_routerbench(path)
    with pytest.raises(TableError, match="strings only"):
        parse_prompt("[1, 2]")
    with pytest.raises(TableError, match="row 2: prompt must be a string, got float"):
        load_routerbench(_write(tmp_path, _tiny(prompt=["['a']", "b", np.nan])))
    assert parse_prompt("['a', 'b']") == "a\n\nb"


def test_missing_path_and_empty_dir(tmp_path: Path):
    with pytest.raises(TableError, match="no such file"):
        load_routerbench(tmp_path / "nope.csv")
    with pytest.raises(TableError, match="no RouterBench files"):
        load_routerbench(tmp_path)


def test_pickle_needs_trust(tmp_path: Path):
    path = _write(tmp_path, _tiny(), "tiny_train.pkl")
    with pytest.raises(TableError, match=r"tiny_train.pkl: refusing to unpickle .*trust_pickle"):
        load_routerbench(path)
    assert load_routerbench(tmp_path, trust_pickle=True).num_queries == 3


def test_header_only_file_says_no_rows(tmp_path: Path):
    path = _write(tmp_path, _tiny().iloc[:0])
    with pytest.raises(TableError, match=r"tiny_train.csv: the file has no rows \(only the header"):
        load_routerbench(path)


def test_infinite_cost_is_not_called_missing(tmp_path: Path):
    path = _write(tmp_path, _tiny(**{"m1|total_cost": [1e-4, np.inf, 3e-4]}))
    with pytest.raises(TableError, match=r"1 infinite costs cells.*'t.1'.*finite values >= 0.0$"):
        load_routerbench(path, drop_missing=True)
