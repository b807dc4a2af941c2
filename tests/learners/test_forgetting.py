"""Discounted and sliding-window LinUCB / LinTS against naive references, the new-arm bonus,
and adding an arm mid-stream: a scenario in simulation and ``/models`` in serve agree."""

from __future__ import annotations

import pytest
import torch
from fastapi.testclient import TestClient

from tests.conftest import make_table
from tests.learners.helpers import LinearProblem, feedback_for, forced_decision
from torchroute.envs import SingleChoiceEnv
from torchroute.learners import LinTS, LinUCB
from torchroute.learners.discounted import DiscountedLinTS, DiscountedLinUCB
from torchroute.learners.sliding_window import SlidingWindowLinTS, SlidingWindowLinUCB
from torchroute.serve import Router
from torchroute.serve.app import create_app
from torchroute.types import Context, Decision

R, K, D = 3, 4, 5
F64 = torch.float64


def _play(learner, rounds: int, b_of=lambda t: 1, seed: int = 0):
    """Forced round-robin arms; returns the history ``[(x [R, B, d], arm [R, B], y [R, B, K])]``."""
    problem = LinearProblem(R, K, D, seed=seed)
    history = []
    for t in range(rounds):
        context = problem.context(b_of(t))
        b = context.x.shape[1]
        arm = (torch.arange(R)[:, None] * 2 + t + torch.arange(b)) % K
        decision = forced_decision(arm, K)
        reward = problem.reward(context)
        learner.update(context, decision, feedback_for(learner, decision, reward))
        history.append((context.x, arm, reward))
    return history


def _naive_stats(history, weight_of):
    """``G [R, K, d, d]``, ``b [R, K, d]`` as sums over single observations with the weight
    ``weight_of(t, j)`` of the ``j``-th context of round ``t`` (a loop, in float64)."""
    gram, target = torch.zeros(R, K, D, D, dtype=F64), torch.zeros(R, K, D, dtype=F64)
    for t, (x, arm, y) in enumerate(history):
        for r in range(R):
            for j in range(x.shape[1]):
                w, k, v = weight_of(r, t, j), int(arm[r, j]), x[r, j]
                gram[r, k] += w * torch.outer(v, v)
                target[r, k] += w * y[r, j, k] * v
    return gram, target


def test_discounted_statistics_and_ucb_scores_match_the_closed_form():
    gamma, lam, alpha, rounds = 0.9, 0.7, 0.8, 12
    learner = DiscountedLinUCB(R, K, D, gamma=gamma, alpha=alpha, lam=lam).double()
    history = _play(learner, rounds, b_of=lambda t: 1 + t % 2)
    gram, target = _naive_stats(history, lambda r, t, j: gamma ** (rounds - 1 - t))
    gram2, _ = _naive_stats(history, lambda r, t, j: gamma ** (2 * (rounds - 1 - t)))
    torch.testing.assert_close(learner.gram, gram)
    torch.testing.assert_close(learner.gram2, gram2)
    torch.testing.assert_close(learner.target, target)
    x = LinearProblem(R, K, D, seed=9).context(2).x
    eye = torch.eye(D, dtype=F64)
    v_inv = torch.linalg.inv(gram + lam * eye)
    theta = torch.einsum("rkde,rke->rkd", v_inv, target)
    m = torch.einsum("rkde,rbe->rbkd", v_inv, x)  # V^-1 x
    width = torch.einsum("rbkd,rkde,rbke->rbk", m, gram2 + lam * eye, m).sqrt()
    expected = torch.einsum("rkd,rbd->rbk", theta, x) + alpha * width
    torch.testing.assert_close(learner._scores(x, None), expected)
    action = learner.act(Context(x=x), torch.Generator().manual_seed(0)).action
    assert torch.equal(action, expected.argmax(-1))


def test_discount_one_is_linucb():
    """``gamma = 1``: the statistics never forget and the score is LinUCB's."""
    plain = LinUCB(R, K, D, alpha=1.3, lam=0.5).double()
    disc = DiscountedLinUCB(R, K, D, gamma=1.0, alpha=1.3, lam=0.5).double()
    _play(plain, 9)
    _play(disc, 9)
    x = LinearProblem(R, K, D, seed=5).context(3).x
    mean = torch.einsum("rkd,rbd->rbk", plain.theta, x)
    width = torch.einsum("rbd,rkde,rbe->rbk", x, plain.a_inv, x).sqrt()
    torch.testing.assert_close(disc._scores(x, None), mean + 1.3 * width)


@pytest.mark.parametrize("window", [2, 4, 7])
def test_sliding_window_matches_a_refit_on_the_last_w_contexts(window):
    lam, rounds = 0.6, 23
    learner = SlidingWindowLinUCB(R, K, D, window=window, alpha=0.9, lam=lam).double()
    history = _play(learner, rounds, b_of=lambda t: 1 + (t % 3 == 1))
    total = sum(x.shape[1] for x, _, _ in history)
    index, ages = 0, {}
    for t, (x, _, _) in enumerate(history):
        for j in range(x.shape[1]):
            ages[(t, j)] = total - 1 - index  # 0: the newest context
            index += 1
    gram, target = _naive_stats(history, lambda r, t, j: float(ages[(t, j)] < window))
    torch.testing.assert_close(learner.gram, gram)
    torch.testing.assert_close(learner.target, target)
    x = LinearProblem(R, K, D, seed=3).context(1).x
    v_inv = torch.linalg.inv(gram + lam * torch.eye(D, dtype=F64))
    mean = torch.einsum("rkde,rke,rbd->rbk", v_inv, target, x)
    width = torch.einsum("rbd,rkde,rbe->rbk", x, v_inv, x).sqrt()
    torch.testing.assert_close(learner._scores(x, None), mean + 0.9 * width)


@pytest.mark.parametrize("cls", [DiscountedLinTS, SlidingWindowLinTS])
def test_thompson_draws_have_the_posterior_mean_and_scale(cls):
    learner = cls(R, K, D, v=0.5, lam=1.0).double()
    _play(learner, 8)
    x = LinearProblem(R, K, D, seed=4).context(1).x
    mean, _, quad = learner.posterior(x)
    draws = torch.stack([learner._scores(x, torch.Generator().manual_seed(s)) for s in range(4000)])
    torch.testing.assert_close(draws.mean(0), mean, atol=0.05, rtol=0)
    torch.testing.assert_close(draws.std(0), 0.5 * quad.sqrt(), atol=0.05, rtol=0.05)


@pytest.mark.parametrize(
    "make",
    [
        lambda: DiscountedLinUCB(R, K, D, alpha=0.0, new_arm_bonus=5.0),
        lambda: SlidingWindowLinUCB(R, K, D, window=50, alpha=0.0, new_arm_bonus=5.0),
        lambda: LinUCB(R, K, D, alpha=0.0, new_arm_bonus=5.0),
        lambda: LinTS(R, K, D, v=0.0, new_arm_bonus=5.0),
        lambda: DiscountedLinTS(R, K, D, v=0.0, new_arm_bonus=5.0),
    ],
)
def test_new_arm_bonus_favours_the_arms_never_observed(make):
    learner = make().double()
    problem = LinearProblem(R, K, D, seed=1)
    arm = torch.zeros(R, 1, dtype=torch.long)  # arm 0 observed (reward 0.8), the others never
    for _ in range(30):
        context = problem.context()
        decision = forced_decision(arm, K)
        reward = torch.full((R, 1, K), 0.8, dtype=F64)
        learner.update(context, decision, feedback_for(learner, decision, reward))
    x = problem.context().x
    base = torch.einsum("rkd,rbd->rbk", _theta(learner), x)  # the ridge means (alpha = v = 0)
    assert bool((base[:, 0, 0] > 0).all()) and bool((base[:, 0, 1:] == 0).all())
    chosen = learner.act(Context(x=x), torch.Generator().manual_seed(0)).action
    assert not bool((chosen == 0).any())  # 0 + 5 beats the observed arm's score
    learner.new_arm_bonus = 0.0
    assert bool((learner.act(Context(x=x)).action == 0).all())  # without it: the known arm


def _theta(learner):
    if hasattr(learner, "theta"):
        return learner.theta
    eye = torch.eye(D, dtype=F64)
    return torch.linalg.solve(learner.gram + learner.lam * eye, learner.target)


FACTORIES = {
    "LinUCB": lambda p: LinUCB.from_problem(p, lam=0.5).double(),
    "LinTS": lambda p: LinTS.from_problem(p, lam=0.5).double(),
    "LinUCB-bonus": lambda p: LinUCB.from_problem(p, new_arm_bonus=0.5).double(),
    "LinTS-bonus": lambda p: LinTS.from_problem(p, new_arm_bonus=0.5).double(),
    "DiscountedLinUCB": lambda p: DiscountedLinUCB.from_problem(p, gamma=0.9).double(),
    "DiscountedLinTS": lambda p: DiscountedLinTS.from_problem(p, gamma=0.9).double(),
    "SlidingWindowLinUCB": lambda p: SlidingWindowLinUCB.from_problem(
        p, window=5, new_arm_bonus=0.5
    ).double(),
    "SlidingWindowLinTS": lambda p: SlidingWindowLinTS.from_problem(p, window=5).double(),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_adding_an_arm_in_simulation_and_in_serve_gives_the_same_state(name):
    """The same queries and the same routed models: a new_model scenario (the last arm
    masked until round 10) and a live router that gets the model through ``POST /models``
    hold the same learner state before and after the arrival."""
    factory = FACTORIES[name]
    table = make_table(n=60, k=4, d=D)
    rho = 2.0
    env = SingleChoiceEnv(
        table, rho=[rho], seeds=[0], dtype=F64, features=table.embeddings,
        scenario=[{"kind": "new_model", "arm": "arm3", "at": 0.5}],
    )  # fmt: skip
    sim = factory(env.problem())
    router = Router.fresh(factory, ["arm0", "arm1", "arm2"], rho=rho, dim=D, dtype=F64)
    gen = torch.Generator().manual_seed(0)
    with TestClient(create_app(router), base_url="http://localhost") as http:
        for t in range(env.horizon):
            if t == env.scenario.starts[0]:
                price = float(table.costs[:, 3].mean())
                response = http.post("/models", json={"name": "arm3", "price": price})
                assert response.status_code == 200
                _assert_same_state(sim, router.learner)
            context = env.context(t)
            own = sim.act(context, gen)  # the simulation's own decision respects availability
            assert t >= 10 or int(own.action) != 3
            body = {"embeddings": context.x[0].tolist()}
            served = http.post("/route", json=body).json()["decisions"][0]
            arm = router.arm_names.index(served["model"])
            decision = Decision(
                torch.nn.functional.one_hot(torch.tensor([[arm]]), 4).to(F64),
                torch.tensor([[arm]]),
            )
            feedback, _ = env.step(context, decision)
            row = int(context.index[0, 0])
            body = {
                "request_ids": [served["request_id"]],
                "scores": [float(table.scores[row, arm])],
                "costs": [float(table.costs[row, arm])],
            }
            assert http.post("/feedback", json=body).status_code == 200
            sim.update(context, decision, feedback, gen)
    _assert_same_state(sim, router.learner)


def _assert_same_state(a, b) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert set(sa) == set(sb)
    for key in sa:
        torch.testing.assert_close(sa[key], sb[key].to(sa[key].dtype), msg=key)
