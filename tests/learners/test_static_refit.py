"""static_refit: the changed train split against a change applied by hand, and the router it
plays before and after the change against routers fitted by hand on those splits."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.conftest import make_priced_table, naive_best_arms
from torchroute.envs import SingleChoiceEnv
from torchroute.envs.scenario import ScenarioError
from torchroute.learners.anchors import KNNScoreRouter
from torchroute.learners.refit import StaticRefit
from torchroute.loop import simulate
from torchroute.types import TrainSplit

KNN = {"_target_": "torchroute.learners.anchors.KNNScoreRouter.from_problem", "k": 3}


def _env(table, scenario, rho=(0.0, 500.0, 0.0), seeds=(0, 0, 1)):
    return SingleChoiceEnv(
        table, rho=list(rho), seeds=list(seeds), dtype=torch.float64, scenario=scenario
    )


def _rows(table, split):
    return torch.as_tensor(table.rows(split))


def _priciest_by_hand(table) -> int:
    rows = table.rows("train")
    means = [float(table.costs[rows, k].mean()) for k in range(table.num_arms)]
    return max(range(len(means)), key=means.__getitem__)


def _by_trial(changed):
    """``{trial: problem}`` from the groups of an AfterChange."""
    return {int(t): part for trials, part in changed.groups for t in trials}


def test_drift_shifts_each_trials_best_model_in_its_train_split():
    table = make_priced_table(n=90)
    env = _env(table, [{"kind": "drift", "arm": "best", "at": 0.5, "score_shift": -0.3}])
    best = naive_best_arms(table, [0.0, 500.0, 0.0])
    changed = env.after_change()
    assert changed.change == env.horizon // 2
    parts = _by_trial(changed)
    assert sorted(parts) == [0, 1, 2]
    for split, name in (("train", "train"), ("val", "validation")):
        rows = _rows(table, split)
        for r in range(3):
            want = table.scores[rows].double().clone()
            for i in range(len(rows)):  # by hand: the best model's scores -0.3, clipped at 0
                want[i, best[r]] = max(0.0, float(want[i, best[r]]) - 0.3)
            got = getattr(parts[r], name)
            torch.testing.assert_close(got.scores, want)
            torch.testing.assert_close(got.costs, table.costs[rows].double())
    # trials of one best model share one group (and one problem with their rhos)
    same = [sorted(int(t) for t in trials) for trials, _ in changed.groups]
    want_groups = {}
    for r in range(3):
        want_groups.setdefault(best[r], []).append(r)
    assert sorted(same) == sorted(want_groups.values())
    for trials, part in changed.groups:
        assert part.rho.tolist() == [[0.0, 500.0, 0.0][int(t)] for t in trials]
        assert part.num_trials == len(trials) and part.hidden_arms is None


def test_price_scales_the_priciest_models_costs_and_the_prices():
    table = make_priced_table(n=90)
    env = _env(table, [{"kind": "price", "arm": "priciest", "at": 0.5, "factor": 0.1}])
    k = _priciest_by_hand(table)
    (trials, part), *rest = env.after_change().groups
    assert not rest and trials.tolist() == [0, 1, 2]  # one model for every trial
    rows = _rows(table, "train")
    want = table.costs[rows].double().clone()
    want[:, k] = want[:, k] * 0.1
    torch.testing.assert_close(part.train.costs, want)
    torch.testing.assert_close(part.train.scores, table.scores[rows].double())
    torch.testing.assert_close(part.prices, want.mean(0))
    # the env's own problem keeps the table's prices
    torch.testing.assert_close(env.problem().train.costs, table.costs[rows].double())


def test_a_new_models_train_rows_are_visible_after_the_change():
    table = make_priced_table(n=90)
    env = _env(table, [{"kind": "new_model", "arm": "arm1", "at": 0.5}])
    rows = _rows(table, "train")
    assert bool((env.problem().train.scores[:, 1] == 0).all())  # hidden from the run
    (_, part), *_ = env.after_change().groups
    torch.testing.assert_close(part.train.scores, table.scores[rows].double())
    assert part.hidden_arms is None
    assert bool((env.problem().train.scores[:, 1] == 0).all())  # and still hidden


def test_priciest_needs_costs():
    table = make_priced_table(n=90)
    free = dataclasses.replace(table, costs=torch.zeros_like(table.costs))
    with pytest.raises(ScenarioError, match=r"priciest.*costs"):
        _env(free, [{"kind": "price", "arm": "priciest", "at": 0.5, "factor": 0.1}])


def _hand_problem(env, arm: int, shift: float):
    """The env's problem with ``arm``'s train and validation scores shifted by hand."""
    problem = env.problem()

    def shifted(split: TrainSplit) -> TrainSplit:
        scores = split.scores.clone()
        scores[:, arm] = (scores[:, arm] + shift).clamp(0.0, 1.0)
        return TrainSplit(split.features, scores, split.costs)

    return dataclasses.replace(
        problem, train=shifted(problem.train), validation=shifted(problem.validation)
    )


def test_it_plays_the_router_before_and_the_refitted_router_after_the_change():
    table = make_priced_table(n=120)
    scenario = [{"kind": "drift", "arm": "arm2", "at": 0.5, "score_shift": -0.6}]
    env = _env(table, scenario, rho=(0.0, 0.0), seeds=(0, 1))
    refit = StaticRefit.from_problem(env.problem(), base=KNN, after_change=env.after_change())
    plain = KNNScoreRouter.from_problem(env.problem(), k=3)
    by_hand = KNNScoreRouter.from_problem(_hand_problem(env, 2, -0.6), k=3)
    got = simulate(refit, env, progress=False, seed=0).summary
    before = simulate(plain, env, progress=False, seed=0).summary
    after = simulate(by_hand, env, progress=False, seed=0).summary
    torch.testing.assert_close(
        torch.tensor(got["avg_utility_before"].values),
        torch.tensor(before["avg_utility_before"].values),
    )
    torch.testing.assert_close(
        torch.tensor(got["avg_utility_after"].values),
        torch.tensor(after["avg_utility_after"].values),
    )
    # the drift makes the refit differ from the stale router after the change
    assert not torch.equal(
        torch.tensor(got["avg_utility_after"].values),
        torch.tensor(before["avg_utility_after"].values),
    )


def test_without_a_scenario_it_is_its_base_router():
    table = make_priced_table(n=90)
    env = SingleChoiceEnv(table, rho=[0.0, 500.0], seeds=[0, 1], dtype=torch.float64)
    assert env.after_change() is None
    refit = StaticRefit.from_problem(env.problem(), base=KNN)
    plain = KNNScoreRouter.from_problem(env.problem(), k=3)
    a = simulate(refit, env, progress=False, seed=3).summary["avg_utility"]
    b = simulate(plain, env, progress=False, seed=3).summary["avg_utility"]
    assert a.tolist() == b.tolist()
    assert StaticRefit.role == "reference" and StaticRefit.refits_after_change
    assert not StaticRefit.learns_online


def test_a_bad_base_names_it():
    table = make_priced_table(n=90)
    env = SingleChoiceEnv(table, rho=[0.0], seeds=[0], dtype=torch.float64)
    with pytest.raises(ValueError, match="base must name a static router config"):
        StaticRefit.from_problem(env.problem(), base="no_such_router")
    with pytest.raises(ValueError, match="base must be a static router"):
        StaticRefit.from_problem(env.problem(), base="random")


def test_a_run_hands_the_changed_problems_to_static_refit(tmp_path):
    from tests.conftest import tiny_run_config
    from torchroute.run import run_config

    knn = {**KNN, "_partial_": True}
    target = f"{StaticRefit.__module__}.StaticRefit.from_problem"
    learners = {"knn": knn, "refit": {"_target_": target, "_partial_": True, "base": knn}}
    scenario = "+env.scenario=[{kind: drift, arm: best, at: 0.5, score_shift: -1.0}]"
    results = run_config(tiny_run_config(tmp_path / "run", learners, scenario, "rhos=[0]"))
    by = results.set_index("learner")
    assert by.loc["refit", "avg_utility_before"] == by.loc["knn", "avg_utility_before"]
    # the best model scores 0 after the change: the stale router keeps routing to it, the
    # refit (which without the changed problems would be the kNN router) does not
    assert by.loc["refit", "avg_utility_after"] > by.loc["knn", "avg_utility_after"] + 0.1


def test_each_change_group_keeps_its_trials_budgets():
    """A paced run's trials carry their budgets (``Problem.budget``) into the problems after
    the change, each group its own trials'."""
    table = make_priced_table(n=90)
    env = _env(table, [{"kind": "drift", "arm": "best", "at": 0.5, "score_shift": -0.3}])
    budget = torch.tensor([1e-3, 2e-3, 3e-3], dtype=torch.float64)
    changed = env.with_rho(env.rho, budget).after_change()
    for trials, part in changed.groups:
        assert part.budget.tolist() == [budget[int(t)].item() for t in trials]
    assert all(part.budget is None for _, part in env.after_change().groups)
