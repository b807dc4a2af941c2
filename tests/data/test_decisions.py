"""The decision-log reader: both file formats, and one-line errors for bad logs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from torchroute.data.decision_io import save_decisions
from torchroute.data.decisions import DecisionLogError, decisions_from_frame, load_decisions


def _frame(n=4) -> pd.DataFrame:
    probs = [[0.5, 0.3, 0.2], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6], [0.4, 0.4, 0.2]][:n]
    arms = ["a", "b", "c"]
    chosen = [0, 1, 2, 0][:n]
    return pd.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "timestamp": np.arange(n, dtype=float) + 1.7e9,
            "features": [[1.0, float(i)] for i in range(n)],
            "arm": [arms[k] for k in chosen],
            "propensity": [probs[i][k] for i, k in enumerate(chosen)],
            "arms": [arms] * n,
            "probabilities": probs,
            "score": [1.0, 0.0, None, 0.5][:n],
            "cost": [0.01, 0.02, None, 0.0][:n],
            "learner": ["squarecb"] * n,
            "rho": [10.0] * n,
        }
    )


def _csv(frame: pd.DataFrame, path: Path) -> Path:
    frame = frame.copy()
    for c in [c for c in ("features", "arms", "probabilities") if c in frame]:
        frame[c] = [json.dumps(v) for v in frame[c]]
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_reads_both_formats(tmp_path: Path, suffix: str):
    frame = _frame()
    path = tmp_path / f"log{suffix}"
    if suffix == ".csv":
        _csv(frame, path)
    else:
        frame.to_parquet(path)
    before = path.read_bytes()
    log = load_decisions(path)
    assert path.read_bytes() == before
    assert log.arm_names == ("a", "b", "c")
    assert log.action.tolist() == [0, 1, 2, 0]
    assert log.propensity.tolist() == [0.5, 0.8, 0.6, 0.4]
    assert log.features.shape == (4, 2)
    assert log.has_feedback.tolist() == [True, True, False, True]
    u = log.utility(torch.tensor([0.0, 10.0]))
    assert u.shape == (2, 4)
    assert u[1, 0].item() == pytest.approx(0.9)
    assert torch.isnan(u[:, 2]).all()
    assert log.select(log.has_feedback).num_decisions == 3


def test_round_trip_through_save(tmp_path: Path):
    log = decisions_from_frame(_frame())
    for name in ("x.parquet", "x.csv"):
        back = load_decisions(save_decisions(log, tmp_path / name))
        assert back.request_ids == log.request_ids
        assert torch.equal(back.probabilities, log.probabilities)
        assert torch.allclose(back.score, log.score, equal_nan=True)


def test_seed_and_trial_round_trip_and_must_be_whole_numbers(tmp_path: Path):
    log = decisions_from_frame(_frame().assign(seed=[3, 3, 3, 3], trial=[7, 7, 7, 7]))
    assert log.seed.tolist() == [3, 3, 3, 3] and log.trial.tolist() == [7, 7, 7, 7]
    for name in ("x.parquet", "x.csv"):
        back = load_decisions(save_decisions(log, tmp_path / name))
        assert back.seed.tolist() == [3, 3, 3, 3] and back.trial.tolist() == [7, 7, 7, 7]
    for column, bad, what in (("seed", 1.5, "whole number"), ("trial", -1, "out of range")):
        frame = _frame().assign(**{column: [0, bad, 0, 0]})
        with pytest.raises(DecisionLogError, match=rf"row 2 .*'{column}'.*{what}"):
            decisions_from_frame(frame, source="log.csv")


def test_a_dense_log_is_written_losslessly_in_well_under_its_raw_bytes(tmp_path: Path):
    # 1,793 decisions over 11 models with a dense distribution each (a SquareCB-like policy
    # computed in float32, as a run's learners do, and logged as float64)
    n, k = 1793, 11
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(3 * torch.randn(n, k, generator=g), 1).double()
    action = torch.multinomial(probs, 1, generator=g)[:, 0]
    frame = pd.DataFrame(
        {
            "request_id": [str(i) for i in range(n)],
            "query_id": [f"q{i}" for i in range(n)],
            "arm": [f"m{a}" for a in action.tolist()],
            "propensity": probs.gather(1, action[:, None])[:, 0].numpy(),
            "arms": [[f"m{j}" for j in range(k)]] * n,
            "probabilities": probs.tolist(),
            "score": torch.randint(0, 2, (n,), generator=g).double().numpy(),
            "cost": (torch.rand(n, generator=g).double() * 1e-3).numpy(),
        }
    )
    log = decisions_from_frame(frame)
    path = save_decisions(log, tmp_path / "dense.parquet")
    back = load_decisions(path)
    assert torch.equal(back.probabilities, log.probabilities)
    assert torch.equal(back.cost, log.cost) and torch.equal(back.propensity, log.propensity)
    # the probabilities alone are n * k * 8 = 157,784 raw bytes
    assert path.stat().st_size < 0.75 * n * k * 8


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda f: f.assign(propensity=[0.5, 0.0, 0.6, 0.4]),
            r"row 2 \(request_id 'r1'\), column 'propensity'",
        ),
        (
            lambda f: f.assign(propensity=[0.5, 1.2, 0.6, 0.4]),
            r"row 2 .*'propensity'.*out of range",
        ),
        (
            lambda f: f.assign(propensity=[0.5, None, 0.6, 0.4]),
            r"row 2 .*'propensity'.*not a number",
        ),
        (lambda f: f.assign(propensity=[0.5, 0.7, 0.6, 0.4]), r"row 2 .*'propensity'.*differs"),
        (
            lambda f: f.assign(request_id=["r0", "r1", "r0", "r3"]),
            r"row 3, column 'request_id'.*repeats row 1",
        ),
        (lambda f: f.assign(arm=["a", "b", "zz", "a"]), r"row 3 .*'arm': unknown arm 'zz'"),
        (lambda f: f.assign(cost=[0.01, None, None, 0.0]), r"row 2 .*'cost': null while"),
        (lambda f: f.assign(score=[1.0, 1.5, None, 0.5]), r"row 2 .*'score'.*out of range"),
        (lambda f: f.drop(columns=["features"]), r"no context column"),
        (lambda f: f.drop(columns=["propensity"]), r"missing column\(s\) \['propensity'\]"),
    ],
)
def test_bad_logs_name_file_row_and_column(tmp_path: Path, change, message):
    path = _csv(change(_frame()), tmp_path / "bad.csv")
    with pytest.raises(DecisionLogError, match=message) as err:
        load_decisions(path)
    assert str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_list_cells(tmp_path: Path):
    frame = _frame()
    frame["probabilities"] = [[0.5, 0.3, 0.2], [0.5, 0.5], [0.2, 0.2, 0.6], [0.4, 0.4, 0.2]]
    with pytest.raises(DecisionLogError, match=r"row 2 .*'probabilities': 2 entries, expected 3"):
        decisions_from_frame(frame)
    frame = _frame()
    frame["arms"] = [["a", "b", "c"], ["b", "a", "c"], ["a", "b", "c"], ["a", "b", "c"]]
    with pytest.raises(DecisionLogError, match=r"row 2 .*'arms'.*same order"):
        decisions_from_frame(frame)
    frame = _frame()
    frame["features"] = [[1.0, 2.0], [1.0, float("nan")], [1.0, 0.0], [0.0, 0.0]]
    with pytest.raises(DecisionLogError, match=r"row 2 .*'features'.*NaN"):
        decisions_from_frame(frame)
    csv = tmp_path / "c.csv"
    _csv(_frame(), csv)
    text = csv.read_text().replace('"[1.0, 1.0]"', '"[1.0, oops"')
    csv.write_text(text)
    with pytest.raises(DecisionLogError, match=r"row 2 .*'features'.*not a JSON list"):
        load_decisions(csv)


def test_known_arms_argument_and_missing_file(tmp_path: Path):
    frame = _frame().drop(columns=["arms", "probabilities"])
    log = decisions_from_frame(frame, arms=["c", "b", "a", "d"])
    assert log.arm_names == ("c", "b", "a", "d") and log.action.tolist() == [2, 1, 0, 2]
    with pytest.raises(DecisionLogError, match="unknown arm 'c'"):
        decisions_from_frame(frame, arms=["a", "b"])
    with pytest.raises(DecisionLogError, match="no such file"):
        load_decisions(tmp_path / "nope.parquet")
