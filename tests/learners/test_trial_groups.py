"""TrialGroups: learners of different hyper-parameters side by side in one batched run; each
trial's results are those of its own learner run alone (per-trial streams)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import make_table
from torchroute.envs import SingleChoiceEnv
from torchroute.learners.discounted import DiscountedLinUCB
from torchroute.learners.sliding_window import SlidingWindowLinUCB
from torchroute.learners.trial_groups import TrialGroups
from torchroute.loop import simulate

RHO, SEEDS = [0.0, 300.0, 0.0], [0, 1, 2]


def _env(scenario=None, trials=None):
    env = SingleChoiceEnv(make_table(), rho=RHO, seeds=SEEDS, horizon=16, scenario=scenario)
    return env if trials is None else env.select_trials(trials)


def _run(learner, env):
    return simulate(learner, env, seed=3, rng="per_trial", log_every=4, progress=False).summary


@pytest.mark.parametrize("scenario", [None, [{"kind": "new_model", "arm": "best", "at": 0.5}]])
def test_each_trial_runs_as_its_own_learner_alone(scenario):
    """Trials 0 and 2 with gamma 0.9, trial 1 with gamma 1.0 and a new-arm bonus: the
    grouped run's results are, trial by trial, the two learners' runs on their trials."""
    env = _env(scenario)
    d = env.problem().dim

    def first(problem_env):
        problem = problem_env.problem()
        return DiscountedLinUCB(problem.num_trials, 4, d, gamma=0.9, alpha=0.5)

    def second(problem_env):
        return DiscountedLinUCB(1, 4, d, gamma=1.0, alpha=0.5, new_arm_bonus=0.3)

    grouped = TrialGroups(
        [first(_env(scenario, [0, 2])), second(_env(scenario, [1]))],
        [torch.tensor([0, 2]), torch.tensor([1])],
    )
    together = _run(grouped, env)
    alone_a = _run(first(_env(scenario, [0, 2])), _env(scenario, [0, 2]))
    alone_b = _run(second(_env(scenario, [1])), _env(scenario, [1]))
    columns = [c for c in together if c.startswith(("avg_", "accuracy", "share_"))]
    assert columns
    for trial, (frame, row) in {0: (alone_a, 0), 1: (alone_b, 0), 2: (alone_a, 1)}.items():
        for column in columns:
            assert together[column][trial] == pytest.approx(frame[column][row], abs=1e-6), (
                trial,
                column,
            )


def test_groups_must_cover_the_trials_once_and_share_a_class():
    a, b = DiscountedLinUCB(2, 4, 3), DiscountedLinUCB(1, 4, 3)
    with pytest.raises(ValueError, match=r"cover 0\.\.R-1 once"):
        TrialGroups([a, b], [torch.tensor([0, 1]), torch.tensor([1])])
    with pytest.raises(ValueError, match="holds 2 trials, its index 1"):
        TrialGroups([a, b], [torch.tensor([0]), torch.tensor([1, 2])])
    with pytest.raises(ValueError, match="one class"):
        TrialGroups([a, SlidingWindowLinUCB(1, 4, 3)], [torch.tensor([0, 1]), torch.tensor([2])])
