"""Any learner as the behaviour policy of a table env, logged in the decision-log format."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from torchroute.data import linear_contextual_table
from torchroute.data.decisions import load_decisions
from torchroute.envs.single_choice import SingleChoiceEnv
from torchroute.learners import SquareCB
from torchroute.loop import simulate
from torchroute.run.decision_logger import log_decisions, write_decision_logs


def _env():
    table, _ = linear_contextual_table(200, 3, 4, seed=1)
    return SingleChoiceEnv(
        table,
        rho=[0.0, 50.0],
        seeds=[0, 1],
        features=table.embeddings,
        horizon=40,
        dtype=torch.float64,
    ), table


def test_logs_are_the_stream_and_do_not_change_the_run(tmp_path: Path):
    env, table = _env()
    learner = SquareCB.from_problem(env.problem(), gamma=10.0)
    logs, result = log_decisions(learner, env, name="squarecb", seed=3)
    plain = simulate(SquareCB.from_problem(env.problem(), gamma=10.0), env, seed=3, progress=False)
    pd.testing.assert_frame_equal(result.summary, plain.summary)
    assert len(logs) == 2
    ids = {q: i for i, q in enumerate(table.query_ids)}
    for r, log in enumerate(logs):
        rows = torch.tensor([ids[q] for q in log.query_ids])
        assert torch.equal(rows, env._stream[r].cpu())
        chosen = log.action
        assert torch.equal(log.score, table.scores[rows, chosen])
        assert torch.equal(log.cost, table.costs[rows, chosen])
        assert torch.allclose(log.propensity, log.probabilities[torch.arange(40), chosen])
        assert torch.allclose(log.features, table.embeddings[rows].double())
        assert log.rho.unique().tolist() == [[0.0, 50.0][r]]
        # mean logged utility equals the run's avg_utility for the trial
        u = log.utility(float(log.rho[0])).mean()
        assert abs(float(u) - result.summary["avg_utility"][r]) < 1e-5
    paths = write_decision_logs(logs, tmp_path / "decisions")
    back = load_decisions(paths[1])
    assert back.request_ids == logs[1].request_ids
    assert torch.allclose(back.probabilities, logs[1].probabilities)
    assert back.learner[0] == "squarecb"
