"""Open LLM Leaderboard v2 loader on the real pickle and cost CSV."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from torchroute.data import TableError, load_openllm_leaderboard

PICKLE = "openllm_lb_v2/new_leaderboard_processed_20241205.pickle"
COSTS = "openllm_lb_v2/costs_from_paper.csv"


@pytest.fixture(scope="module")
def openllm(shared_data: Path):
    with pytest.warns(UserWarning, match="skipping 'leaderboard_ifeval'"):
        return load_openllm_leaderboard(
            shared_data / PICKLE, shared_data / COSTS, trust_pickle=True
        )


def test_all_benchmarks_with_costs(openllm):
    t = openllm
    assert t.num_arms == 18 and "SOLAR-10.7B-Instruct-v1.0" not in t.arm_names
    assert t.num_queries == 21065
    assert len(set(t.groups)) == 38 and t.text == t.groups
    assert len(t.rows("test")) == round(0.3 * 21065) and len(t.rows("val")) == 2106
    yi = t.arm_names.index("Yi-34B-Chat")
    np.testing.assert_allclose(t.costs[:, yi].numpy(), 0.0006375)
    assert set(np.unique(t.scores.numpy())) == {0.0, 1.0}


def test_without_mmlu_pro_all_19_models(shared_data: Path):
    with open(shared_data / PICKLE, "rb") as fh:
        keys = [k for k, v in pickle.load(fh).items() if k not in ("leaderboard_mmlu_pro",)]
    keys.remove("leaderboard_ifeval")
    t = load_openllm_leaderboard(shared_data / PICKLE, benchmarks=keys, seed=1, trust_pickle=True)
    assert t.num_arms == 19 and t.num_queries == 21065 - 12032
    assert float(t.costs.sum()) == 0.0


def test_bad_choices(shared_data: Path):
    with pytest.raises(TableError, match="unknown benchmarks"):
        load_openllm_leaderboard(
            shared_data / PICKLE, benchmarks=["leaderboard_nope"], trust_pickle=True
        )
    with pytest.raises(TableError, match=r"'leaderboard_mmlu_pro' has no models \['SOLAR"):
        load_openllm_leaderboard(
            shared_data / PICKLE,
            benchmarks=["leaderboard_gpqa_main", "leaderboard_mmlu_pro"],
            models=["Yi-34B-Chat", "SOLAR-10.7B-Instruct-v1.0"],
            trust_pickle=True,
        )
    with pytest.raises(TableError, match=r"costs_from_paper.csv: no cost for models \['SOLAR"):
        load_openllm_leaderboard(
            shared_data / PICKLE,
            shared_data / COSTS,
            benchmarks=["leaderboard_gpqa_main"],
            models=["SOLAR-10.7B-Instruct-v1.0"],
            trust_pickle=True,
        )


def test_real_pickle_needs_no_trust(shared_data: Path, openllm):
    """The restricted unpickler reads the real file: the same table as with trust."""
    with pytest.warns(UserWarning, match="skipping 'leaderboard_ifeval'"):
        table = load_openllm_leaderboard(shared_data / PICKLE, shared_data / COSTS)
    assert table.arm_names == openllm.arm_names and table.query_ids == openllm.query_ids
    assert np.array_equal(np.asarray(table.scores), np.asarray(openllm.scores))


def _dump(tmp_path: Path, correctness, models=("org/a", "org/b")) -> Path:
    path = tmp_path / "lb.pickle"
    with open(path, "wb") as fh:
        pickle.dump({"leaderboard_x": {"correctness": correctness, "models": list(models)}}, fh)
    return path


def test_string_matrix_names_file_benchmark_and_value(tmp_path: Path):
    strings = np.array([["1", "0"], ["yes", "no"]], dtype=object)
    with pytest.raises(
        TableError,
        match=r"lb.pickle: 'leaderboard_x' correctness must be a numeric \[n_models=2, "
        r"n_questions\] matrix of 0/1 scores \(NaN for missing\), got 'yes' for model 'b', "
        r"question 0$",
    ):
        load_openllm_leaderboard(_dump(tmp_path, strings), trust_pickle=True)
    with pytest.raises(TableError, match=r"'leaderboard_x' .* got rows of different lengths"):
        load_openllm_leaderboard(_dump(tmp_path, [[1, 0], [1]]), trust_pickle=True)
    with pytest.raises(TableError, match=r"got 'x' for model 'a', question 1$"):
        load_openllm_leaderboard(_dump(tmp_path, [[1, "x"], [0, 1]]), trust_pickle=True)
