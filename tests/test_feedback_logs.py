"""Decisions that never got feedback: a run with ``feedback: {rate}`` logs them without a
score or cost, and ``torchroute evaluate`` and a warm start from the log skip them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch

from torchroute.cli import main
from torchroute.data import linear_contextual_table
from torchroute.data.decision_io import save_decisions
from torchroute.data.decisions import DecisionLog, load_decisions
from torchroute.envs.single_choice import SingleChoiceEnv
from torchroute.learners import LinUCB, SquareCB
from torchroute.learners.warm_options import WarmStart
from torchroute.run.decision_logger import log_decisions
from torchroute.run.warm import apply_warm_start


def _env(rate: float) -> SingleChoiceEnv:
    table, _ = linear_contextual_table(300, 3, 4, seed=2)
    return SingleChoiceEnv(
        table,
        rho=[50.0],
        seeds=[0],
        features=table.embeddings.double(),
        dtype=torch.float64,
        feedback={"rate": rate},
    )


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> tuple[Path, Path, DecisionLog]:
    """A log with unrated decisions (their features made absurd, so that reading them
    would show) and the same log without them."""
    env = _env(0.5)
    log = log_decisions(SquareCB.from_problem(env.problem(), gamma=5.0), env, seed=1)[0][0]
    rated = ~torch.isnan(log.score)
    assert torch.equal(rated, env.feedback_arrives[0])  # unrated: no score, no cost
    assert torch.equal(rated, ~torch.isnan(log.cost))
    assert 0.3 < float(rated.double().mean()) < 0.7
    features = torch.where(rated[:, None], log.features, 1e3)
    log = replace(log, features=features)
    folder = tmp_path_factory.mktemp("logs")
    full = save_decisions(log, folder / "with_unrated.parquet")
    only = save_decisions(log.select(rated), folder / "rated.parquet")
    return full, only, log


def _evaluate(path: Path, out: Path) -> pd.DataFrame:
    args = ["evaluate", f"logs={path}", "targets=[arm:arm1]", "rhos=[0,100]", f"out_dir={out}"]
    assert main([*args, "replay=[linucb]", "bootstrap=20"]) == 0
    return pd.read_csv(out / "ope.csv")


def test_evaluate_skips_decisions_without_feedback(logs, tmp_path):
    full, only, log = logs
    with_unrated, rated = _evaluate(full, tmp_path / "a"), _evaluate(only, tmp_path / "b")
    kept = load_decisions(full)
    keep = kept.has_feedback
    assert int(keep.sum()) < kept.num_decisions
    assert (with_unrated["dropped_no_feedback"] == int((~keep).sum())).all()
    assert (rated["dropped_no_feedback"] == 0).all()
    same = [c for c in rated.columns if c != "dropped_no_feedback"]
    assert with_unrated[same].equals(rated[same])
    for rho in (0.0, 100.0):  # IPS by hand on the rated decisions only
        u = (log.score[keep] - rho * log.cost[keep]).clamp(0, 1)
        want = float(((log.action[keep] == 1) * u / log.propensity[keep]).mean())
        got = rated.query("target == 'arm:arm1' and estimator == 'ips' and rho == @rho")
        assert got["value"].item() == pytest.approx(want, abs=1e-10)


def test_a_warm_start_skips_decisions_without_feedback(logs):
    full, only, _ = logs
    problem = _env(1.0).problem()
    states = []
    for path in (full, only):
        learner = LinUCB.from_problem(problem, alpha=1.0)
        apply_warm_start(learner, problem, WarmStart(source=str(path)), "learners.linucb")
        states.append(learner.state_dict())
    cold = LinUCB.from_problem(problem, alpha=1.0).state_dict()
    assert any(not torch.equal(states[0][k], cold[k]) for k in cold)  # it did learn
    for key, value in states[0].items():
        torch.testing.assert_close(value, states[1][key], rtol=0, atol=0)
