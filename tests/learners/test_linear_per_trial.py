"""Per-trial hyper-parameters of the linear learners: ``R`` values instead of one number."""

from __future__ import annotations

import pytest
import torch

from torchroute.envs import SingleChoiceEnv
from torchroute.learners import EpsilonGreedy, FullFeedbackLinUCB, LinTS, LinUCB, SquareCB
from torchroute.loop import simulate

RHOS, SEEDS = [0.0, 500.0], [0, 1]

# (class, grid points): each point's float values; the learner gets them per trial.
CASES = [
    (LinUCB, [{"alpha": 0.1, "lam": 1.0}, {"alpha": 2.0, "lam": 1.0}, {"alpha": 0.5, "lam": 7.3}]),
    (FullFeedbackLinUCB, [{"alpha": 0.0, "lam": 1.0}, {"alpha": 5.0, "lam": 0.1}]),
    (LinTS, [{"v": 0.2, "lam": 3.0}, {"v": 1.5, "lam": 0.7}]),
    (EpsilonGreedy, [{"eps0": 1.0, "lam": 10.0}, {"eps0": 0.1, "lam": 0.3}]),
    (SquareCB, [{"lam": 0.1}, {"lam": 9.0}]),
]


def _layout(points: int) -> tuple[list[float], list[int], list[int]]:
    """Every (rho, seed) trial repeated once per grid point: rhos, seeds, point of each."""
    rows = [(r, g, s) for r in RHOS for g in range(points) for s in SEEDS]
    return [r for r, _, _ in rows], [s for _, _, s in rows], [g for _, g, _ in rows]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("cls", "points"), CASES, ids=[c[0].__name__ for c in CASES])
def test_per_trial_values_give_each_trial_the_numbers_of_its_float_run(
    cls, points, dtype, tiny_table
):
    """The batched grid equals, slice by slice, a float run on the same trials and seed."""
    rhos, seeds, point = _layout(len(points))
    env = SingleChoiceEnv(tiny_table, rho=rhos, seeds=seeds, dtype=dtype)
    per_trial = {k: [points[g][k] for g in point] for k in points[0]}
    batched = simulate(cls.from_problem(env.problem(), **per_trial), env, seed=5, progress=False)
    utilities = []
    for g, values in enumerate(points):
        alone = simulate(cls.from_problem(env.problem(), **values), env, seed=5, progress=False)
        rows = [i for i, p in enumerate(point) if p == g]
        assert batched.summary.iloc[rows].equals(alone.summary.iloc[rows])
        utilities.append(alone.summary["avg_utility"].tolist())
    assert utilities[0] != utilities[1]  # the values matter: a mix-up would be seen


def test_per_trial_lam_sets_each_trials_prior():
    learner = LinUCB(3, 2, 4, lam=torch.tensor([1.0, 4.0, 0.5]))
    expected = torch.stack([torch.eye(4) / lam for lam in (1.0, 4.0, 0.5)])
    for k in range(2):
        torch.testing.assert_close(learner.a_inv[:, k], expected, rtol=0, atol=0)
    assert learner.per_trial_hparams == ("alpha", "lam")
    assert isinstance(LinUCB(3, 2, 4, alpha=0.5).alpha, float)  # a number stays a number


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: LinUCB(3, 2, 4, alpha=[1.0, 2.0]), r"LinUCB: alpha must be a number or R=3"),
        (lambda: LinUCB(3, 2, 4, alpha=[1.0, -1.0, 2.0]), r"LinUCB: alpha must be .* >= 0"),
        (lambda: LinTS(2, 2, 4, lam=[1.0, 0.0]), r"LinTS: lam must be .* > 0, got 0.0"),
        (lambda: EpsilonGreedy(2, 2, 4, eps0=[0.5, 1.5]), r"eps0 must be .* <= 1, got 1.5"),
        (lambda: EpsilonGreedy(2, 2, 4, eps0=[0.5, 0.005]), r"eps_min must be .* <= 0.005"),
    ],
)
def test_bad_per_trial_values_are_named(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_per_trial_values_are_checkpointed_and_numbers_are_not():
    learner = EpsilonGreedy(2, 4, 6, eps0=[0.5, 0.2], lam=[1.0, 3.0])
    state = learner.state_dict()
    assert state["eps0"].tolist() == [0.5, 0.2] and state["lam"].tolist() == [1.0, 3.0]
    assert not {"eps0", "lam"} & set(EpsilonGreedy(2, 4, 6).state_dict())
