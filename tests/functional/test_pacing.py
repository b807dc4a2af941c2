"""The budget pacer against a hand loop in plain Python floats, a hand computation of the
decaying step and the budget left, and the overspend bound of the module doc."""

from __future__ import annotations

import math

import pytest
import torch

from torchroute.functional.pacing import BudgetPacer, pace_step


def _hand_loop(
    rho: float,
    costs: list[list[float]],
    budget: float,
    eta: float,
    decay_after: int | None = None,
    horizon: int | None = None,
):
    """The documented rule, one trial, plain floats: rho <- max(0, rho + eta_t (c - a_t) / b^2)
    with eta_t = eta sqrt(w / max(t, w)) (or eta) and a_t = min(b, max(0, (b N - spent) /
    (N - n))) (or b)."""
    spent, n = 0.0, 0
    rhos = []
    for t, round_costs in enumerate(costs, start=1):
        rhos.append(rho)
        mean = sum(round_costs) / len(round_costs)
        aim = budget
        if horizon is not None:
            total = horizon * len(round_costs)
            aim = min(budget, max(0.0, (budget * total - spent) / (total - n)))
        step = eta if decay_after is None else eta * math.sqrt(decay_after / max(t, decay_after))
        spent += sum(round_costs)
        n += len(round_costs)
        rho = max(0.0, rho + step * (mean - aim) / budget**2)
    return rho, spent, rhos


def test_pace_step_matches_the_rule_and_projects_at_zero():
    rho = torch.tensor([1.0, 0.01, 0.0], dtype=torch.float64)
    cost = torch.tensor([3.0, 0.0, 5.0], dtype=torch.float64)
    budget = torch.tensor([2.0, 2.0, 4.0], dtype=torch.float64)
    out = pace_step(rho, cost, budget, 0.5)
    # 1 + 0.5 * 1 / 4; 0.01 - 0.5 * 2 / 4 < 0 -> 0; 0 + 0.5 * 1 / 16
    assert out.tolist() == pytest.approx([1.125, 0.0, 0.03125])


def test_a_decaying_step_aiming_at_the_budget_left_by_hand():
    """Budgets 2, 2, 1, start 1, eta 0.5, decay after 2 rounds, 4 rounds of one request.
    Steps: 0.5, 0.5, 0.5 sqrt(2/3), 0.5 sqrt(1/2). Targets min(b, max(0, left / rounds left)).
    Trial 0 (costs 3, 3, 1, 0): targets 2, 5/3, 1, 1: rho 1 + 1/8 = 9/8; + 0.5 (4/3) / 4 =
    31/24; + 0 (cost 1 = target 1); - sqrt(1/2) / 2 / 4 = 31/24 - sqrt(2)/16.
    Trial 1 (costs 0, 0, 5, 5, spending less): targets stay at b = 2 (not 8/3, 4, 3):
    3/4, 1/2, 1/2 + sqrt(2/3) 3/8 = 1/2 + sqrt(6)/8, + 3 sqrt(2)/16.
    Trial 2 (b = 1, costs 5, 0, 0, 2: the whole budget 4 spent in round 1): targets 1, 0, 0,
    0: rho 1 + 0.5 * 4 = 3, 3, 3, 3 + sqrt(1/2) 2 / 2 = 3 + sqrt(2)/2."""
    budget = torch.tensor([2.0, 2.0, 1.0], dtype=torch.float64)
    pacer = BudgetPacer(budget, rho=1.0, eta=0.5, decay_after=2, horizon=4)
    costs = torch.tensor([[3.0, 0.0, 5.0], [3.0, 0.0, 0.0], [1.0, 5.0, 0.0], [0.0, 5.0, 2.0]])
    r2, r6 = math.sqrt(2), math.sqrt(6)
    expected = [
        [9 / 8, 3 / 4, 3.0],
        [31 / 24, 1 / 2, 3.0],
        [31 / 24, 1 / 2 + r6 / 8, 3.0],
        [31 / 24 - r2 / 16, 1 / 2 + r6 / 8 + 3 * r2 / 16, 3 + r2 / 2],
    ]
    for t in range(4):
        pacer.update(costs[t].double())
        assert pacer.rho.tolist() == pytest.approx(expected[t], rel=1e-12), t
    assert pacer.step.tolist() == pytest.approx([0.5 * math.sqrt(0.5)] * 3, rel=1e-12)


def test_without_decay_or_horizon_the_step_is_the_plain_rule_bit_for_bit():
    """The default pacer takes exactly pace_step(rho, mean cost, budget, eta) every round."""
    g = torch.Generator().manual_seed(3)
    costs = torch.rand(25, 4, 3, generator=g, dtype=torch.float64) * 2e-3
    budget = torch.tensor([1e-4, 5e-4, 1e-3, 3e-3], dtype=torch.float64)
    pacer = BudgetPacer(budget, rho=300.0, eta=0.2)
    rho = torch.full((4,), 300.0, dtype=torch.float64)
    for t in range(25):
        pacer.update(costs[t])
        rho = pace_step(rho, costs[t].mean(-1), budget, 0.2)
        assert torch.equal(pacer.rho, rho)


@pytest.mark.parametrize("horizon", [None, 200])
def test_the_decaying_step_keeps_the_overspend_bound(horizon):
    """Heavy-tailed costs (a request of the dearest model costs 50 budgets): after any
    round t0, sum_{t > t0} (c_t - b) <= b^2 (rho_T / eta_T - rho_t0 / eta_{t0+1})."""
    g = torch.Generator().manual_seed(2)
    rounds, b = 200, 1e-4
    pick = torch.multinomial(torch.tensor([0.7, 0.25, 0.05]), rounds * 2, True, generator=g)
    costs = torch.tensor([2e-5, 2e-4, 5e-3], dtype=torch.float64)[pick].view(rounds, 2, 1)
    pacer = BudgetPacer(
        torch.full((2,), b, dtype=torch.float64),
        rho=torch.tensor([0.0, 5e3], dtype=torch.float64),
        eta=0.3,
        decay_after=10,
        horizon=horizon,
    )
    rhos, steps = [pacer.rho.clone()], []
    for t in range(rounds):
        pacer.update(costs[t])
        rhos.append(pacer.rho.clone())
        steps.append(0.3 * math.sqrt(10 / max(t + 1, 10)))  # the step after round t + 1
    spend = costs[:, :, 0]  # [T, R]
    for t0 in (0, 10, 50, 150):
        over = (spend[t0:] - b).sum(0)
        bound = b**2 * (rhos[-1] / steps[-1] - rhos[t0] / steps[t0])
        assert (over <= bound + 1e-15).all(), (t0, over, bound)
    assert (rhos[-1] > 0).all()  # the bound is not vacuous: rho moved


@pytest.mark.parametrize("options", [(None, None), (5, None), (None, 40), (4, 40)])
def test_pacer_follows_a_hand_loop_for_each_trial(options):
    g = torch.Generator().manual_seed(0)
    r, b, rounds = 3, 2, 40
    costs = torch.rand(rounds, r, b, generator=g, dtype=torch.float64) * 1e-3  # dollars
    budget = torch.tensor([2e-4, 5e-4, 8e-4], dtype=torch.float64)
    eta = torch.tensor([0.05, 0.2, 1.0], dtype=torch.float64)
    rho0 = torch.tensor([100.0, 0.0, 2000.0], dtype=torch.float64)
    pacer = BudgetPacer(budget, rho=rho0, eta=eta, decay_after=options[0], horizon=options[1])
    seen = []
    for t in range(rounds):
        seen.append(pacer.rho.clone())
        pacer.update(costs[t])
    assert pacer.rounds == rounds and pacer.requests == rounds * b
    for i in range(r):
        rho, spent, rhos = _hand_loop(
            float(rho0[i]), costs[:, i].tolist(), float(budget[i]), float(eta[i]), *options
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
        {"budget": 1.0, "rho": 1.0, "eta": 0.1, "decay_after": 0},
        {"budget": 1.0, "rho": 1.0, "eta": 0.1, "decay_after": True},
        {"budget": 1.0, "rho": 1.0, "eta": 0.1, "horizon": 0},
    ],
)
def test_bad_values_are_refused(kwargs):
    with pytest.raises(ValueError, match="BudgetPacer"):
        BudgetPacer(**kwargs)
