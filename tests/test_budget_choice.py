"""A static router's candidate for a spend target: the cost-quality curves against loops in
numpy, the curve read at a budget against a hand interpolation, the one-standard-error rule
on hand-made gains, and a paced router's choice against a numpy reimplementation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from tests.test_budgets import three_model_table
from torchroute.envs import SingleChoiceEnv
from torchroute.errors import InputError
from torchroute.functional.budget_choice import (
    budget_bracket,
    budget_rho_grid,
    choose_for_budget,
    cost_quality_curves,
    quality_at_budget,
)
from torchroute.learners.anchors import KNNScoreRouter
from torchroute.run.saved import problem_from_state, problem_state, trial_problem


def _random_case(seed: int = 0, c: int = 3, m: int = 40, k: int = 4):
    g = torch.Generator().manual_seed(seed)
    predicted = torch.rand(c, m, k, generator=g)
    priced = torch.tensor([1e-4, 5e-4, 2e-3, 8e-3]).expand(m, k)[:, :k].clone()
    scores = (torch.rand(m, k, generator=g) < 0.6).float()
    costs = priced * (0.5 + torch.rand(m, k, generator=g))  # the truth differs from the prices
    return predicted, priced, scores, costs


def _numpy_curves(predicted, priced, scores, costs, rho):
    p, c_hat, y, c = (t.double().numpy() for t in (predicted, priced, scores, costs))
    cost = np.zeros((p.shape[0], len(rho)))
    quality = np.zeros_like(cost)
    for ci in range(p.shape[0]):
        for gi, r in enumerate(rho.tolist()):
            arms = [int(np.argmax(p[ci, q] - r * c_hat[q])) for q in range(p.shape[1])]
            cost[ci, gi] = np.mean([c[q, a] for q, a in enumerate(arms)])
            quality[ci, gi] = np.mean([y[q, a] for q, a in enumerate(arms)])
    return cost, quality


def test_the_curves_are_the_mean_cost_and_score_of_each_rho_s_argmax():
    predicted, priced, scores, costs = _random_case()
    rho = budget_rho_grid(torch.tensor([3e-4, 2e-3]), points=37)
    cost, quality = cost_quality_curves(predicted, priced, scores, costs, rho, chunk=5)
    want_cost, want_quality = _numpy_curves(predicted, priced, scores, costs, rho)
    np.testing.assert_allclose(cost.numpy(), want_cost, rtol=1e-12)
    np.testing.assert_allclose(quality.numpy(), want_quality, rtol=1e-12)
    assert rho[0] == 0 and bool((rho.diff() > 0).all())
    assert rho[1] == pytest.approx(1e-4 / 2e-3) and rho[-1] == pytest.approx(1e3 / 3e-4)


def test_the_curve_read_at_a_budget_is_linear_in_cost_between_the_crossing_points():
    predicted, priced, scores, costs = _random_case(1)
    rho = budget_rho_grid(torch.tensor([2e-4, 1e-3, 4e-3]), points=41)
    cost, quality = cost_quality_curves(predicted, priced, scores, costs, rho)
    budgets = torch.tensor([1e-5, 2e-4, 1e-3, 4e-3, 1.0], dtype=torch.float64)
    bracket = budget_bracket(cost, budgets)
    per_query = quality_at_budget(predicted, priced, scores, rho, bracket)
    c, q = cost.numpy(), quality.numpy()
    for ci in range(c.shape[0]):
        for ni, b in enumerate(budgets.tolist()):
            within = [g for g in range(c.shape[1]) if c[ci, g] <= b]
            if not within:  # the cheapest point spends more: infeasible, read at the last rho
                assert not bool(bracket[3][ci, ni])
                want = q[ci, -1]
            elif within[0] == 0:
                want = q[ci, 0]
            else:
                j = within[0]
                w = (b - c[ci, j]) / (c[ci, j - 1] - c[ci, j])
                want = q[ci, j] + w * (q[ci, j - 1] - q[ci, j])
                assert c[ci, j - 1] > b >= c[ci, j]
            assert float(per_query[ci, ni].mean()) == pytest.approx(want, abs=1e-12)
    assert not bool(bracket[3][:, 0].any())  # 1e-5 is below every model's cost
    assert bool(bracket[3][:, -1].all()) and bool((bracket[0][:, -1] == 0).all())


def test_small_blocks_give_the_same_curves_and_readings(monkeypatch):
    """The rhos and budgets are decided in blocks of at most BLOCK_ELEMENTS elements: a
    block of one rho or one budget at a time gives the same numbers."""
    from torchroute.functional import budget_choice

    predicted, priced, scores, costs = _random_case(2)
    rho = budget_rho_grid(torch.tensor([2e-4, 1e-3, 4e-3]), points=23)
    budgets = torch.tensor([2e-4, 1e-3, 4e-3], dtype=torch.float64)

    def everything():
        cost, quality = cost_quality_curves(predicted, priced, scores, costs, rho)
        bracket = budget_bracket(cost, budgets)
        return cost, quality, quality_at_budget(predicted, priced, scores, rho, bracket)

    whole = everything()
    monkeypatch.setattr(budget_choice, "BLOCK_ELEMENTS", 1)
    for want, got in zip(whole, everything(), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_the_incumbent_stays_unless_another_is_better_by_one_standard_error():
    m = 100
    flat = torch.full((m,), 0.5, dtype=torch.float64)
    noisy = flat + torch.tensor([0.3, -0.3] * (m // 2), dtype=torch.float64)  # mean 0.5
    slight = flat.clone()
    slight[:3] = 1.0  # +0.015 on the mean, SE about 0.0086: better by more than one SE
    tiny = flat.clone()
    tiny[:3] = torch.tensor([1.0, 1.0, 0.0])  # +0.005 on the mean, SE about 0.0087: kept
    cheapest = torch.tensor([1.0, 2.0, 3.0])
    feasible = torch.ones(3, 1, dtype=torch.bool)
    budget_of = torch.zeros(2, dtype=torch.long)
    incumbent = torch.tensor([0, 1])

    def pick(*rows, ok=feasible, inc=incumbent):
        return choose_for_budget(torch.stack(rows)[:, None], ok, cheapest, inc, budget_of).tolist()

    assert pick(flat, noisy, tiny) == [0, 1]  # no gain beyond one SE: both keep theirs
    # a clear gain over `flat` is taken; over `noisy` the paired gains swing by 0.3 a query
    # (SE about 0.03), so the same 0.015 is not clear there
    assert pick(flat, noisy, slight) == [2, 1]
    infeasible_incumbent = torch.tensor([[False], [True], [True]])
    assert pick(flat, flat, tiny, ok=infeasible_incumbent) == [2, 1]  # trial 0 must move
    none = torch.zeros(3, 1, dtype=torch.bool)
    assert pick(flat, noisy, slight, ok=none) == [0, 0]  # none can keep it: the cheapest


def test_a_router_built_for_a_budget_takes_the_candidate_of_a_numpy_reimplementation():
    """KNNScoreRouter with ``Problem.budget``: for each budget, the candidates' curves and
    paired gains computed in numpy from the router's own predictions (one loop per
    candidate, rho and query), the incumbent its choice at the starting rho."""
    table = three_model_table()
    budgets = [2e-4, 1.5e-3, 6e-3]
    env = SingleChoiceEnv(table, rho=[5000.0] * 3, seeds=[0, 0, 0], horizon=50)
    plain = KNNScoreRouter.from_problem(env.problem(), k=[3, 30, 100])
    paced_env = env.with_rho(env.rho, torch.tensor(budgets, dtype=torch.float64))
    problem = paced_env.problem()
    assert problem.budget is not None and problem.budget.tolist() == budgets
    router = KNNScoreRouter.from_problem(problem, k=[3, 30, 100])
    val = problem.validation
    x = val.features.float()
    predicted = plain.candidate_scores(x)
    priced = plain.costs(x)
    rho = budget_rho_grid(torch.tensor(budgets))
    cost, _ = _numpy_curves(predicted, priced, val.scores, val.costs, rho)
    y, c_hat, p = val.scores.double().numpy(), priced.double().numpy(), predicted.double().numpy()
    want = []
    for trial, b in enumerate(budgets):
        per_query = []
        for ci in range(p.shape[0]):
            within = [g for g in range(cost.shape[1]) if cost[ci, g] <= b]
            assert within  # every candidate can keep these budgets
            j = within[0]
            w = 0.0 if j == 0 else (b - cost[ci, j]) / (cost[ci, j - 1] - cost[ci, j])

            def scores_at(g, ci=ci):
                r = float(rho[g])
                return np.array([y[q, np.argmax(p[ci, q] - r * c_hat[q])] for q in range(len(y))])

            at = scores_at(j)
            per_query.append(at + w * (scores_at(max(j - 1, 0)) - at))
        inc = int(plain.choice[trial])
        gains = [pq - per_query[inc] for pq in per_query]
        best = int(np.argmax([g.mean() for g in gains]))
        se = gains[best].std(ddof=1) / np.sqrt(len(y))
        want.append(best if gains[best].mean() > se else inc)
    assert router.choice.tolist() == want
    # what the test shows: at least one budget's candidate is not its start's
    assert want != plain.choice.tolist()


def test_a_budget_travels_with_the_trials_and_is_checked():
    table = three_model_table()
    env = SingleChoiceEnv(table, rho=[0.0, 1.0, 2.0], seeds=[0, 1, 2], horizon=20)
    assert env.problem().budget is None
    paced = env.with_rho(
        torch.tensor([5.0, 6.0, 7.0]), torch.tensor([1e-3, 2e-3, 3e-3], dtype=torch.float64)
    )
    part = paced.select_trials([2, 0])
    assert part.problem().budget.tolist() == [3e-3, 1e-3]
    assert part.problem().rho.tolist() == [7.0, 5.0]
    saved = problem_from_state(problem_state(paced.problem()))
    assert saved.budget.tolist() == [1e-3, 2e-3, 3e-3]
    assert trial_problem(saved, 1).budget.tolist() == [2e-3]
    with pytest.raises(InputError, match=r"Problem.budget must be \[R=3\] values > 0"):
        replace(env.problem(), budget=torch.tensor([1e-3, 0.0, 1e-3]))
    with pytest.raises(ValueError, match="budget must have R=3 entries"):
        env.with_rho(env.rho, torch.tensor([1e-3]))


def test_the_grid_is_replayed_per_budget_only_for_a_learner_that_chooses_for_it(
    tmp_path, monkeypatch
):
    """plan_pacing's first replay (the starting-rho grid) has G x 3 trials per budget for a
    static router (``chooses_for_budget``) and G x 3 in all for LinUCB with ``objective:
    quality_cost``, which decides the same whatever its budget."""
    from omegaconf import OmegaConf

    from tests.conftest import LINUCB_NODE
    from tests.test_budgets import KNN, _config
    from torchroute.learners import LinUCB
    from torchroute.learners.anchors import BestArmClassifier, _FittedRouter
    from torchroute.run import budgets as budgets_module
    from torchroute.run.build import build
    from torchroute.run.options import RunOptions

    assert _FittedRouter.chooses_for_budget and not LinUCB.chooses_for_budget
    assert not BestArmClassifier.chooses_for_budget  # never paced
    seen: list[int] = []
    replay = budgets_module._replay

    def counting(opts, name, built, rho, plan, budget):
        seen.append(len(rho))
        return replay(opts, name, built, rho, plan, budget)

    monkeypatch.setattr(budgets_module, "_replay", counting)
    cfg = _config(tmp_path / "run", "budgets=[0.0015,0.005]", "run_learners=[knn_val,linucb]")
    cfg.learners = OmegaConf.create(
        {"knn_val": KNN, "linucb": {**LINUCB_NODE, "objective": "quality_cost"}}
    )
    opts = RunOptions.from_config(cfg)
    built = build(opts)
    grid = len(budgets_module.rho_grid(opts.budgets))
    for name, copies in (("knn_val", 2), ("linucb", 1)):
        seen.clear()
        budgets_module.plan_pacing(opts, name, built)
        assert seen[0] == grid * 3 * copies
