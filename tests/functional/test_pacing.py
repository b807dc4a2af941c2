"""The budget pacer against a hand loop in plain Python floats."""

from __future__ import annotations

import pytest
import torch

from torchroute.functional.pacing import BudgetPacer, pace_step


def _hand_loop(rho: float, costs: list[list[float]], budget: float, eta: float):
    """The documented rule, one trial, plain floats: rho_{t+1} = max(0, rho + eta (c - b) / b^2)."""
    spent = 0.0
    rhos = []
    for round_costs in costs:
        rhos.append(rho)
        mean = sum(round_costs) / len(round_costs)
        spent += sum(round_costs)
        rho = max(0.0, rho + eta * (mean - budget) / budget**2)
    return rho, spent, rhos


def test_pace_step_matches_the_rule_and_projects_at_zero():
    rho = torch.tensor([1.0, 0.01, 0.0], dtype=torch.float64)
    cost = torch.tensor([3.0, 0.0, 5.0], dtype=torch.float64)
    budget = torch.tensor([2.0, 2.0, 4.0], dtype=torch.float64)
    out = pace_step(rho, cost, budget, 0.5)
    # 1 + 0.5 * 1 / 4; 0.01 - 0.5 * 2 / 4 < 0 -> 0; 0 + 0.5 * 1 / 16
    assert out.tolist() == pytest.approx([1.125, 0.0, 0.03125])


def test_pacer_follows_a_hand_loop_for_each_trial():
    g = torch.Generator().manual_seed(0)
    r, b, rounds = 3, 2, 40
    costs = torch.rand(rounds, r, b, generator=g, dtype=torch.float64) * 1e-3  # dollars
    budget = torch.tensor([2e-4, 5e-4, 8e-4], dtype=torch.float64)
    eta = torch.tensor([0.05, 0.2, 1.0], dtype=torch.float64)
    rho0 = torch.tensor([100.0, 0.0, 2000.0], dtype=torch.float64)
    pacer = BudgetPacer(budget, rho=rho0, eta=eta)
    seen = []
    for t in range(rounds):
        seen.append(pacer.rho.clone())
        pacer.update(costs[t])
    assert pacer.rounds == rounds and pacer.requests == rounds * b
    for i in range(r):
        rho, spent, rhos = _hand_loop(
            float(rho0[i]), costs[:, i].tolist(), float(budget[i]), float(eta[i])
        )
        assert float(pacer.rho[i]) == pytest.approx(rho, rel=1e-12, abs=1e-12)
        assert float(pacer.spent[i]) == pytest.approx(spent, rel=1e-12)
        assert [float(s[i]) for s in seen] == pytest.approx(rhos, rel=1e-12, abs=1e-12)
        assert float(pacer.mean_cost[i]) == pytest.approx(spent / (rounds * b), rel=1e-12)


def test_eta_is_unit_free_the_same_run_in_cents_and_dollars():
    """Costs x 100 (cents): rho / 100 at every round, with the same eta."""
    g = torch.Generator().manual_seed(1)
    costs = torch.rand(30, 2, generator=g, dtype=torch.float64) * 1e-3
    dollars = BudgetPacer(torch.full((2,), 4e-4, dtype=torch.float64), rho=500.0, eta=0.3)
    cents = BudgetPacer(torch.full((2,), 4e-2, dtype=torch.float64), rho=5.0, eta=0.3)
    for t in range(30):
        dollars.update(costs[t])
        cents.update(costs[t] * 100)
        torch.testing.assert_close(cents.rho * 100, dollars.rho)


def test_state_dict_round_trip_continues_identically():
    costs = torch.linspace(0, 1, 20, dtype=torch.float64).reshape(10, 2)
    a = BudgetPacer(torch.tensor([0.5, 0.3], dtype=torch.float64), rho=1.0, eta=0.1)
    for t in range(5):
        a.update(costs[t])
    b = BudgetPacer(torch.tensor([0.5, 0.3], dtype=torch.float64), rho=7.0, eta=0.1)
    b.load_state_dict(a.state_dict())
    for t in range(5, 10):
        a.update(costs[t])
        b.update(costs[t])
    assert torch.equal(a.rho, b.rho) and torch.equal(a.spent, b.spent)
    assert a.rounds == b.rounds == 10


@pytest.mark.parametrize(
    "kwargs",
    [
        {"budget": 0.0, "rho": 1.0, "eta": 0.1},
        {"budget": -1.0, "rho": 1.0, "eta": 0.1},
        {"budget": float("nan"), "rho": 1.0, "eta": 0.1},
        {"budget": 1.0, "rho": -1.0, "eta": 0.1},
        {"budget": 1.0, "rho": 1.0, "eta": -0.1},
    ],
)
def test_bad_values_are_refused(kwargs):
    with pytest.raises(ValueError, match="BudgetPacer"):
        BudgetPacer(**kwargs)
