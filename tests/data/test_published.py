"""Tables as people publish them: column patterns, booleans, percent, row-index ids, and
error messages that name the right cell (issue 10, items 1, 5 and 6)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from torchroute.data import TableError, load_table

CORRECT = {"gpt-4o": [True, True, False, True], "llama-8b": [False, True, False, False]}
COST = {"gpt-4o": [3e-3, 2e-3, 4e-3, 1e-3], "llama-8b": [1e-4, 2e-4, 1e-4, 3e-4]}


def _published_csv(path: Path, cost_suffix: str = "_cost", index: bool = False) -> Path:
    """A wide CSV: query text in 'prompt', correctness True/False, '<model>_cost' columns."""
    frame = pd.DataFrame({"prompt": ["2+2?", "capital of France?", "sort a list", "hi"]})
    for model in CORRECT:
        frame[model] = CORRECT[model]
        frame[model + cost_suffix] = COST[model]
    frame["n_chars"] = frame["prompt"].str.len()  # an unrelated numeric column
    frame.to_csv(path, index=index)
    return path


def test_model_named_columns_with_boolean_scores(tmp_path: Path, caplog):
    path = _published_csv(tmp_path / "pub.csv")
    with caplog.at_level(logging.INFO, logger="torchroute.data"):
        t = load_table(
            path,
            score_pattern="{arm}",
            cost_pattern="{arm}_cost",
            text_column="prompt",
            id_column=None,
            default_split="test",
        )
    assert t.arm_names == ("gpt-4o", "llama-8b")
    assert t.query_ids == ("0", "1", "2", "3")  # the row index
    assert t.text == ("2+2?", "capital of France?", "sort a list", "hi")
    expected = np.array([CORRECT["gpt-4o"], CORRECT["llama-8b"]], dtype=float).T
    np.testing.assert_array_equal(t.scores.numpy(), expected)
    np.testing.assert_array_equal(t.costs.numpy(), np.array([COST["gpt-4o"], COST["llama-8b"]]).T)
    assert "2 arms ['gpt-4o', 'llama-8b']" in caplog.text


def test_unnamed_first_column_is_the_id_and_pipe_patterns(tmp_path: Path):
    path = _published_csv(tmp_path / "pub.csv", cost_suffix="|total_cost", index=True)
    assert pd.read_csv(path).columns[0] == "Unnamed: 0"
    t = load_table(path, score_pattern="{arm}", cost_pattern="{arm}|total_cost", id_column=None)
    assert t.query_ids == ("0", "1", "2", "3") and t.arm_names == ("gpt-4o", "llama-8b")


def test_percent_scores_and_text_booleans_with_blanks(tmp_path: Path):
    path = tmp_path / "pct.csv"
    path.write_text(
        "id,question,acc:a,usd:a,acc:b,usd:b\n"
        "x1,q one,87.5,0.1,TRUE,0.2\n"
        "x2,q two,100,0.1,,0.2\n"
        "x3,q three,0,0.1,false,0.2\n"
    )
    common = dict(score_pattern="acc:{arm}", cost_pattern="usd:{arm}", id_column="id")
    with pytest.raises(TableError, match=r"1 missing .*'b': 1"):
        load_table(path, **common, text_column="question")
    # mixed columns: percent in 'a', booleans (as text, with a blank) in 'b'
    frame = pd.read_csv(path).assign(**{"acc:b": [100.0, 50.0, 0.0]})
    t = load_table(frame, **common, score_scale=100, text_column="question")
    np.testing.assert_allclose(t.scores.numpy(), [[0.875, 1.0], [1.0, 0.5], [0.0, 0.0]])
    with pytest.warns(UserWarning, match="dropped 1 of 3"):
        t = load_table(path, **common, drop_missing=True, models=["b"])
    np.testing.assert_array_equal(t.scores.numpy()[:, 0], [1.0, 0.0])  # TRUE / false as text
    assert t.query_ids == ("x1", "x3")


def test_no_arm_matching_both_patterns_is_a_clear_error(tmp_path: Path):
    path = _published_csv(tmp_path / "pub.csv")
    with pytest.raises(TableError, match=r"no arm matches both score_pattern='\{arm\}' and "
                       r"cost_pattern='\{arm\}\|cost'"):  # fmt: skip
        load_table(path, score_pattern="{arm}", cost_pattern="{arm}|cost", id_column=None)
    with pytest.raises(TableError, match=r"contain '\{arm\}' exactly once"):
        load_table(path, score_pattern="score", id_column=None)
    with pytest.raises(TableError, match=r"no id column 'query_id'.*id_column=None"):
        load_table(path, score_pattern="{arm}", cost_pattern="{arm}_cost")
    with pytest.raises(TableError, match="score_scale must be"):
        load_table(path, score_pattern="{arm}", cost_pattern="{arm}_cost", score_scale=0)


def test_models_selects_and_orders_arms(tmp_path: Path):
    path = _published_csv(tmp_path / "pub.csv")
    kw = dict(score_pattern="{arm}", cost_pattern="{arm}_cost", id_column=None)
    assert load_table(path, models=["llama-8b"], **kw).arm_names == ("llama-8b",)
    with pytest.raises(TableError, match=r"models \['claude'\] not among the arms"):
        load_table(path, models=["claude"], **kw)


def test_constant_costs_instead_of_cost_columns(tmp_path: Path):
    frame = pd.DataFrame({"q": ["a", "b"], "m1": [1, 0], "m2": [0.5, 0.25]})
    t = load_table(frame, score_pattern="{arm}", costs={"m1": 0.01, "m2": 0.002}, id_column="q")
    np.testing.assert_allclose(t.costs.numpy(), [[0.01, 0.002]] * 2)


def test_random_split_is_logged_with_seed_sizes_and_override(tmp_path: Path, caplog):
    frame = pd.DataFrame({"query_id": [f"q{i}" for i in range(10)], "score:a": 0.5, "cost:a": 0.0})
    with caplog.at_level(logging.INFO, logger="torchroute.data"):
        t = load_table(frame, test_fraction=0.4, seed=3)
    assert t.split.count("test") == 4
    message = next(r.getMessage() for r in caplog.records if "at random" in r.getMessage())
    assert "seed 3" in message and "6 train, 4 test" in message
    assert "data.default_split" in message and "'split' column" in message


def test_drop_missing_warning_points_at_the_callers_line(tmp_path: Path):
    frame = pd.DataFrame({"query_id": ["q0", "q1"], "score:a": [0.5, np.nan], "cost:a": [0.0, 0.0]})
    with pytest.warns(UserWarning, match="dropped 1 of 2") as caught:
        load_table(frame, drop_missing=True)
    assert caught[0].filename == __file__


def test_long_layout_non_numeric_score_names_the_row():
    long = pd.DataFrame(
        {
            "query_id": ["q1", "q1", "q2", "q2"],
            "arm": ["a", "b", "a", "b"],
            "score": [1.0, "high", 0.0, 1.0],
            "cost": [0.1, 0.2, 0.1, 0.2],
        }
    )
    with pytest.raises(TableError) as err:
        load_table(long)
    assert "row (q1, b)" in str(err.value) and "'high'" in str(err.value)
    assert "score:" not in str(err.value)  # not a column that does not exist in the file
    booleans = long.assign(score=[True, False, "False", "true"])
    t = load_table(booleans)
    np.testing.assert_array_equal(t.scores.numpy(), [[1.0, 0.0], [0.0, 1.0]])


def test_long_layout_absent_row_says_row_missing():
    long = pd.DataFrame(
        {
            "query_id": ["q1", "q1", "q2"],
            "arm": ["a", "b", "a"],
            "score": [1.0, 0.0, 0.0],
            "cost": [0.1, 0.2, 0.1],
        }
    )
    with pytest.raises(TableError, match=r"1 missing \(query_id, arm\) rows, e.g. \('q2', 'b'\)"):
        load_table(long)
    with pytest.raises(TableError, match="row missing"):
        load_table(long)
    blank = pd.concat([long, pd.DataFrame({"query_id": ["q2"], "arm": ["b"], "score": [np.nan],
                                           "cost": [0.2]})])  # fmt: skip
    with pytest.raises(TableError) as err:  # a blank cell is a missing cell, not a row
        load_table(blank)
    assert "row missing" not in str(err.value) and "missing (NaN/blank)" in str(err.value)


def test_wide_layout_repeated_id_is_named():
    frame = pd.DataFrame({"query_id": ["q1", "q7", "q7", "q9"], "score:a": 0.5, "cost:a": 0.0})
    with pytest.raises(TableError, match=r"repeated in column 'query_id': 'q7' \(2 times\)"):
        load_table(frame)
