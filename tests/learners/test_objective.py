"""``objective: quality_cost``: the ridge learners learn the quality and decide
``y - rho c`` for any request's ``rho``; ``objective: utility`` is the learner of before.

References: a numpy ridge on the scores, hand upper confidence bounds and inverse-gap
weights with known prices, hand argmaxes for another rho, and the actions recorded from
the code before the option existed (``MAIN_ACTIONS``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import make_table
from torchroute.envs import SingleChoiceEnv
from torchroute.errors import InputError, OptionError
from torchroute.learners import (
    BestSingleArm,
    EpsilonGreedy,
    KNNRouter,
    LinTS,
    LinUCB,
    ResidualLinUCB,
    SquareCB,
)
from torchroute.learners.discounted import DiscountedLinTS, DiscountedLinUCB
from torchroute.learners.sliding_window import SlidingWindowLinTS, SlidingWindowLinUCB
from torchroute.learners.warm_options import WarmStart
from torchroute.loop import check_compatible, simulate
from torchroute.run.warm import apply_warm_start
from torchroute.types import Context, Decision, Feedback, Problem

F64 = torch.float64
R, K, D = 2, 3, 4
PRICES = torch.tensor([1e-4, 6e-4, 2e-3]).double()  # float32 values: learners are built in float32
RIDGE = (LinUCB, LinTS, SquareCB, DiscountedLinUCB, DiscountedLinTS)
FORGETTING = (SlidingWindowLinUCB, SlidingWindowLinTS)


def _problem(rho=(0.0, 500.0)) -> Problem:
    return Problem(R, K, D, rho=torch.tensor(rho, dtype=F64), arm_names=("a", "b", "c"),
                   prices=PRICES, dtype=F64)  # fmt: skip


def _stream(n: int, seed: int = 0):
    """``n`` rounds: contexts ``[n, R, 1, D]``, played arms ``[n, R]``, scores ``[n, R, K]``
    and utilities far from them (so a learner of the wrong target is seen)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, R, 1, D, generator=g, dtype=F64)
    arms = torch.randint(K, (n, R), generator=g)
    score = torch.rand(n, R, K, generator=g, dtype=F64)
    reward = 1.0 - score
    return x, arms, score, reward


def _feed(learner, n: int = 30, seed: int = 0):
    """Bandit feedback of :func:`_stream` on the given arms; returns the stream."""
    x, arms, score, reward = _stream(n, seed)
    for t in range(n):
        action = arms[t][:, None]
        observed = torch.nn.functional.one_hot(action, K).bool()
        probs = observed.to(F64)
        fb = Feedback(reward=torch.where(observed, reward[t][:, None], 0.0), observed=observed,
                      score=torch.where(observed, score[t][:, None], 0.0))  # fmt: skip
        learner.update(Context(x=x[t]), Decision(probs=probs, action=action), fb)
    return x, arms, score, reward


def _hand_ridge(x, arms, target, lam: float = 1.0):
    """numpy ``A_k = lam I + sum x x^T`` and ``theta_k = A_k^{-1} sum y x`` of the rounds
    that played ``k``: ``[R, K, D, D]`` and ``[R, K, D]``."""
    a = np.zeros((R, K, D, D))
    theta = np.zeros((R, K, D))
    for r in range(R):
        for k in range(K):
            rows = (arms[:, r] == k).numpy()
            xs = x[rows, r, 0].numpy()
            ys = target[rows, r, k].numpy()
            a[r, k] = lam * np.eye(D) + xs.T @ xs
            theta[r, k] = np.linalg.solve(a[r, k], xs.T @ ys)
    return a, theta


@pytest.mark.parametrize("cls", RIDGE + FORGETTING)
def test_quality_cost_learns_a_ridge_on_the_scores(cls):
    hp = {"gamma": 1.0} if cls in (DiscountedLinUCB, DiscountedLinTS) else {}
    hp = {"window": 100} if cls in FORGETTING else hp
    learner = cls.from_problem(_problem(), objective="quality_cost", **hp).double()
    x, arms, score, _ = _feed(learner)
    a, theta = _hand_ridge(x, arms, score)
    if hasattr(learner, "a_inv"):
        np.testing.assert_allclose(learner.theta.numpy(), theta, atol=1e-10)
        np.testing.assert_allclose(learner.a_inv.numpy(), np.linalg.inv(a), atol=1e-10)
    else:  # Gram statistics: G = A - lam I, and the ridge mean of the posterior
        np.testing.assert_allclose(learner.gram.numpy(), a - np.eye(D), atol=1e-10)
        mean, _, _ = learner.posterior(x[0])
        hand = np.einsum("rkd,rd->rk", theta, x[0, :, 0].numpy())
        np.testing.assert_allclose(mean[:, 0].numpy(), hand, atol=1e-10)


def test_utility_objective_learns_the_reward():
    learner = LinUCB.from_problem(_problem()).double()
    x, arms, _, reward = _feed(learner)
    _, theta = _hand_ridge(x, arms, reward)
    np.testing.assert_allclose(learner.theta.numpy(), theta, atol=1e-10)


@pytest.mark.parametrize("rho", [0.0, 250.0, 1000.0, 5000.0])
def test_ucb_scores_are_the_hand_bounds_minus_rho_times_the_known_price(rho):
    learner = LinUCB.from_problem(_problem(), alpha=0.7, objective="quality_cost").double()
    x, arms, score, _ = _feed(learner)
    a, theta = _hand_ridge(x, arms, score)
    xq = torch.randn(R, 2, D, generator=torch.Generator().manual_seed(5), dtype=F64)
    req = torch.full((R, 2), rho, dtype=F64)
    decision = learner.act(Context(x=xq, rho=req))
    xn = xq.numpy()
    mean = np.einsum("rkd,rbd->rbk", theta, xn)
    width = np.sqrt(np.einsum("rbd,rkde,rbe->rbk", xn, np.linalg.inv(a), xn))
    hand = mean + 0.7 * width - rho * PRICES.numpy()
    np.testing.assert_allclose(decision.scores.numpy(), hand, atol=1e-10)
    assert (decision.action.numpy() == hand.argmax(-1)).all()
    # the trial's rho when the context carries none; Context.prices replace the known ones
    plain = learner.act(Context(x=xq)).scores.numpy()
    trial = np.array([0.0, 500.0])[:, None, None]
    np.testing.assert_allclose(plain, mean + 0.7 * width - trial * PRICES.numpy(), atol=1e-10)
    new_prices = torch.tensor([3e-3, 1e-4, 1e-4], dtype=F64).expand(R, 2, K)
    priced = learner.act(Context(x=xq, rho=req, prices=new_prices)).scores.numpy()
    np.testing.assert_allclose(priced, mean + 0.7 * width - rho * new_prices.numpy(), atol=1e-10)


@pytest.mark.parametrize("cls", [LinUCB, LinTS, DiscountedLinUCB, SlidingWindowLinUCB])
def test_a_learner_fitted_at_one_rho_decides_argmax_y_minus_rho_c_at_another(cls):
    zero = {"alpha": 0.0} if cls in (LinUCB, DiscountedLinUCB, SlidingWindowLinUCB) else {"v": 0.0}
    zero |= {"gamma": 1.0} if cls is DiscountedLinUCB else {}
    learner = cls.from_problem(_problem(rho=(0.0, 0.0)), objective="quality_cost", **zero).double()
    x, arms, score, _ = _feed(learner, n=40)
    _, theta = _hand_ridge(x, arms, score)
    xq = torch.randn(R, 16, D, generator=torch.Generator().manual_seed(7), dtype=F64)
    req = torch.tensor([0.0, 100.0, 400.0, 1000.0], dtype=F64).repeat(4)[None].expand(R, 16)
    action = learner.act(Context(x=xq, rho=req)).action.numpy()
    value = np.einsum("rkd,rbd->rbk", theta, xq.numpy()) - req.numpy()[..., None] * PRICES.numpy()
    assert (action == value.argmax(-1)).all()
    # what it plays moves with rho: not every request gets the same arm as at rho = 0
    at_zero = np.einsum("rkd,rbd->rbk", theta, xq.numpy()).argmax(-1)
    assert (action != at_zero).any()


def test_squarecb_weights_the_gaps_of_y_minus_rho_c():
    learner = SquareCB.from_problem(_problem(), gamma=4.0, eps_floor=0.0,
                                    objective="quality_cost").double()  # fmt: skip
    x, arms, score, _ = _feed(learner)
    _, theta = _hand_ridge(x, arms, score)
    xq = torch.randn(R, 1, D, generator=torch.Generator().manual_seed(3), dtype=F64)
    req = torch.tensor([[300.0], [900.0]], dtype=F64)
    probs = learner.act(Context(x=xq, rho=req)).probs.numpy()[:, 0]
    value = np.einsum("rkd,rd->rk", theta, xq[:, 0].numpy()) - req.numpy() * PRICES.numpy()
    for r in range(R):
        best = value[r].argmax()
        p = 1.0 / (K + 4.0 * (value[r, best] - value[r]))
        p[best] = 0.0
        p[best] = 1.0 - p.sum()
        np.testing.assert_allclose(probs[r], p, atol=1e-12)


def test_lints_draws_are_draws_of_y_minus_rho_c():
    learner = LinTS.from_problem(_problem(), v=0.5, objective="quality_cost").double()
    x, arms, score, _ = _feed(learner)
    a, theta = _hand_ridge(x, arms, score)
    xq = torch.randn(R, 1, D, generator=torch.Generator().manual_seed(3), dtype=F64)
    req = torch.tensor([[800.0], [50.0]], dtype=F64)
    action = learner.act(Context(x=xq, rho=req), torch.Generator().manual_seed(11)).action
    noise = torch.randn(R, 1, K, generator=torch.Generator().manual_seed(11), dtype=F64)
    xn = xq.numpy()
    mean = np.einsum("rkd,rbd->rbk", theta, xn)
    width = np.sqrt(np.einsum("rbd,rkde,rbe->rbk", xn, np.linalg.inv(a), xn))
    hand = mean + 0.5 * width * noise.numpy() - req.numpy()[..., None] * PRICES.numpy()
    assert (action.numpy() == hand.argmax(-1)).all()


def test_quality_cost_needs_the_score():
    learner = LinUCB.from_problem(_problem(), objective="quality_cost")
    ctx = Context(x=torch.randn(R, 1, D))
    observed = torch.ones(R, 1, K, dtype=torch.bool)
    with pytest.raises(InputError, match=r"LinUCB \(objective: quality_cost\).*Feedback.score"):
        learner.update(ctx, learner.act(ctx), Feedback(torch.zeros(R, 1, K), observed))


def test_an_unknown_objective_is_refused():
    with pytest.raises(OptionError, match="LinTS: objective must be one of"):
        LinTS(R, K, D, objective="quality")


@pytest.mark.parametrize(
    "build",
    [
        lambda p: LinUCB.from_problem(p),
        lambda p: LinUCB.from_problem(p, kernel="auto"),
        lambda p: LinTS.from_problem(p),
        lambda p: SquareCB.from_problem(p),
        lambda p: EpsilonGreedy.from_problem(p),
        lambda p: DiscountedLinUCB.from_problem(p),
        lambda p: SlidingWindowLinTS.from_problem(p),
    ],
)
def test_a_utility_learner_refuses_a_request_rho_that_differs_from_its_trials(build):
    learner = build(_problem())
    x = torch.randn(R, 1, D)
    learner.act(Context(x=x, rho=torch.tensor([[0.0], [500.0]])))  # its own rho: served
    with pytest.raises(InputError, match=r"decides for each trial's own rho.*quality_cost"):
        learner.act(Context(x=x, rho=torch.tensor([[0.0], [1000.0]])))
    assert not learner.per_request_rho


def _table_env(**kw) -> SingleChoiceEnv:
    return SingleChoiceEnv(make_table(), rho=[0.0, 500.0], seeds=[0, 1], dtype=F64, **kw)


def test_static_routers_honour_the_request_rho_and_best_single_refuses_it():
    env = _table_env()
    problem = env.problem()
    knn = KNNRouter.from_problem(problem, k=3).double()
    ctx = env.context(0)
    req = torch.tensor([[1000.0], [0.0]], dtype=F64)
    action = knn.act(Context(x=ctx.x, index=ctx.index, rho=req)).action
    train = problem.train
    unit = torch.nn.functional.normalize(train.features, dim=-1)
    for r in range(R):
        sim = torch.nn.functional.normalize(ctx.x[r, 0], dim=-1) @ unit.T
        near = sim.topk(3).indices
        value = train.scores[near].mean(0) - req[r, 0] * train.costs[near].mean(0)
        assert int(action[r, 0]) == int(value.argmax())
    assert knn.per_request_rho
    best = BestSingleArm.from_problem(problem)
    assert not best.per_request_rho
    best.act(Context(x=ctx.x, rho=torch.tensor([[0.0], [500.0]], dtype=F64)))
    with pytest.raises(InputError, match="BestSingleArm decides for each trial's own rho"):
        best.act(Context(x=ctx.x, rho=req))


def test_a_residual_learner_decides_with_the_request_rho():
    env = _table_env()
    learner = ResidualLinUCB.from_problem(env.problem(), base="knn_val")
    ctx = env.context(2)
    req = torch.tensor([[1000.0], [0.0]], dtype=F64)
    decision = learner.act(Context(x=ctx.x, index=ctx.index, rho=req))
    y_hat, c_hat = learner.base.predict(ctx)
    value = y_hat.double() - req[..., None] * c_hat.double()
    assert torch.equal(decision.action, value.argmax(-1))  # no update yet: the base's choice


def test_quality_cost_warm_start_is_a_ridge_on_the_train_scores():
    env = SingleChoiceEnv(make_table(n=90, k=3, d=4), rho=[0.0, 300.0], seeds=[0, 1], dtype=F64)
    problem = env.problem()
    learner = LinUCB.from_problem(problem, lam=2.0, objective="quality_cost")
    apply_warm_start(learner, problem, WarmStart(source="train"), "learners.linucb")
    train = problem.train
    xs, ys = train.features.numpy(), train.scores.numpy()
    a = 2.0 * np.eye(4) + xs.T @ xs
    hand = np.linalg.solve(a, xs.T @ ys).T  # [K, d], the same for every trial
    for r in range(2):
        np.testing.assert_allclose(learner.theta[r].double().numpy(), hand, rtol=1e-4, atol=1e-5)
    gram = DiscountedLinUCB.from_problem(problem, objective="quality_cost")
    apply_warm_start(gram, problem, WarmStart(source="train"), "learners.d")
    moment = np.einsum("nk,nd->kd", ys, xs)
    np.testing.assert_allclose(gram.prior_target[1].double().numpy(), moment, rtol=1e-5)


def test_the_env_computes_each_requests_utility_at_its_rho():
    table = make_table()
    env = _table_env(request_rhos=[0, 500, 1000])
    other = _table_env(request_rhos=[0, 500, 1000])
    seen = []
    for t in range(env.horizon):
        ctx = env.context(t)
        assert ctx.rho is not None and ctx.rho.shape == (R, 1)
        assert torch.equal(ctx.rho, other.context(t).rho)  # the same stream for everyone
        seen.append(ctx.rho[:, 0])
        action = torch.tensor([[t % K], [(t + 1) % K]])
        _, out = env.step(ctx, Decision(torch.nn.functional.one_hot(action, 4).double(), action))
        row = ctx.index[:, 0]
        u = (table.scores[row].double() - ctx.rho * table.costs[row].double()).clamp(0, 1)
        torch.testing.assert_close(out["utility"][:, 0], u[torch.arange(R), action[:, 0]])
    assert set(torch.stack(seen).flatten().tolist()) == {0.0, 500.0, 1000.0}


def test_results_break_the_utility_down_per_request_rho():
    env = _table_env(request_rhos=[0, 1000])
    learner = KNNRouter.from_problem(env.problem(), k=3).double()
    chosen, rhos = [], []

    def record(t, context, decision, feedback):
        rhos.append(context.rho[:, 0].clone())
        row = context.index[:, 0]
        u = env.table.scores[row].double() - context.rho * env.table.costs[row].double()
        chosen.append(u.clamp(0, 1)[torch.arange(R), decision.action[:, 0]])

    summary = simulate(learner, env, progress=False, on_round=record).summary
    rhos, chosen = torch.stack(rhos, 1), torch.stack(chosen, 1)  # [R, T]
    for value in (0.0, 1000.0):
        mask = rhos == value
        hand = (chosen * mask).sum(1) / mask.sum(1)
        np.testing.assert_allclose(summary[f"avg_utility_rho{value:g}"], hand.numpy(), atol=1e-12)
        np.testing.assert_array_equal(summary[f"rounds_rho{value:g}"], mask.sum(1).numpy())
    np.testing.assert_allclose(summary["avg_utility"], chosen.mean(1).numpy(), atol=1e-12)


def test_a_run_refuses_a_utility_learner_on_requests_with_their_own_rho():
    env = _table_env(request_rhos=[0, 1000])
    with pytest.raises(OptionError, match=r"LinUCB decides for each trial's own rho.*\[0.0"):
        check_compatible(LinUCB.from_problem(env.problem()), env)
    check_compatible(LinUCB.from_problem(env.problem(), objective="quality_cost"), env)
    with pytest.raises(ValueError, match="request_rhos must be a non-empty list"):
        _table_env(request_rhos=[])


#: each learner's actions ``[R, T]`` on ``SingleChoiceEnv(make_table(), rho=[0, 500],
#: seeds=[0, 1])``, ``simulate(seed=0)``, recorded with the code before ``objective`` existed
MAIN_ACTIONS = {
    "linucb": [
        [1, 1, 0, 0, 1, 2, 3, 3, 0, 3, 3, 2, 1, 1, 1, 3, 1, 1, 1, 3],
        [3, 2, 1, 0, 2, 2, 1, 2, 3, 3, 0, 2, 1, 1, 3, 0, 0, 2, 0, 1],
    ],
    "lints": [
        [0, 1, 1, 2, 0, 3, 2, 1, 1, 0, 2, 3, 0, 2, 2, 1, 0, 3, 2, 2],
        [3, 1, 2, 1, 1, 3, 1, 3, 1, 1, 0, 1, 2, 1, 3, 1, 2, 0, 3, 2],
    ],
    "squarecb": [
        [1, 0, 1, 2, 1, 1, 0, 0, 2, 0, 1, 1, 1, 3, 1, 0, 0, 0, 1, 2],
        [3, 0, 2, 3, 2, 2, 0, 1, 3, 0, 3, 3, 2, 0, 2, 3, 1, 0, 3, 3],
    ],
    "eps": [
        [1, 1, 1, 1, 2, 1, 2, 2, 1, 0, 2, 1, 1, 1, 1, 2, 0, 3, 0, 1],
        [3, 2, 1, 1, 2, 1, 3, 1, 0, 1, 2, 1, 0, 2, 0, 0, 2, 0, 2, 1],
    ],
    "dlinucb": [
        [1, 1, 0, 0, 1, 2, 3, 3, 0, 2, 3, 2, 2, 1, 1, 3, 1, 1, 0, 3],
        [3, 2, 1, 0, 2, 0, 1, 2, 3, 3, 0, 2, 1, 1, 1, 0, 3, 0, 3, 1],
    ],
    "dlints": [
        [0, 1, 1, 2, 0, 3, 2, 1, 1, 0, 2, 3, 0, 2, 0, 1, 1, 3, 2, 2],
        [3, 1, 2, 1, 1, 3, 1, 3, 1, 1, 0, 1, 2, 1, 3, 1, 2, 0, 3, 2],
    ],
    "swlinucb": [
        [1, 1, 0, 0, 1, 2, 3, 3, 0, 0, 3, 2, 2, 1, 3, 0, 1, 0, 1, 2],
        [3, 2, 1, 0, 2, 0, 1, 2, 3, 1, 0, 2, 1, 3, 0, 2, 0, 2, 1, 3],
    ],
    "swlints": [
        [0, 1, 1, 2, 0, 3, 2, 1, 1, 0, 2, 3, 0, 2, 0, 1, 1, 3, 2, 2],
        [3, 1, 2, 1, 1, 3, 1, 3, 1, 1, 0, 1, 2, 1, 3, 1, 2, 0, 3, 2],
    ],
    "best_single": [
        [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
    ],
    "knn": [
        [1, 1, 3, 2, 0, 1, 2, 3, 3, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 3],
        [1, 2, 1, 1, 0, 1, 0, 3, 1, 1, 2, 1, 1, 1, 1, 2, 3, 1, 0, 1],
    ],
    "residual": [
        [1, 1, 3, 2, 0, 1, 2, 3, 2, 1, 1, 1, 3, 1, 1, 0, 1, 1, 0, 3],
        [1, 2, 1, 1, 2, 1, 1, 2, 1, 0, 2, 1, 1, 1, 1, 3, 3, 2, 0, 1],
    ],
}

MAIN_BUILDERS = {
    "linucb": lambda p: LinUCB.from_problem(p, alpha=0.5),
    "lints": lambda p: LinTS.from_problem(p, v=0.5),
    "squarecb": lambda p: SquareCB.from_problem(p),
    "eps": lambda p: EpsilonGreedy.from_problem(p),
    "dlinucb": lambda p: DiscountedLinUCB.from_problem(p, gamma=0.9),
    "dlints": lambda p: DiscountedLinTS.from_problem(p, gamma=0.9),
    "swlinucb": lambda p: SlidingWindowLinUCB.from_problem(p, window=5),
    "swlints": lambda p: SlidingWindowLinTS.from_problem(p, window=5),
    "best_single": lambda p: BestSingleArm.from_problem(p),
    "knn": lambda p: KNNRouter.from_problem(p, k=3),
    "residual": lambda p: ResidualLinUCB.from_problem(p, base="knn_val"),
}


@pytest.mark.parametrize("name", sorted(MAIN_BUILDERS))
def test_the_default_objective_plays_what_the_learner_played_before(name):
    env = SingleChoiceEnv(make_table(), rho=[0.0, 500.0], seeds=[0, 1])
    learner = MAIN_BUILDERS[name](env.problem())
    actions = []
    simulate(learner, env, seed=0, progress=False,
             on_round=lambda t, c, d, f: actions.append(d.action[:, 0].tolist()))  # fmt: skip
    assert [list(a) for a in zip(*actions)] == MAIN_ACTIONS[name]


def test_a_run_on_requests_with_their_own_rho_refuses_a_utility_learner_before_writing(tmp_path):
    from tests.conftest import LINUCB_NODE, tiny_run_config
    from torchroute.errors import ConfigError
    from torchroute.run import run_config

    out = tmp_path / "run"
    cfg = tiny_run_config(out, {"linucb": LINUCB_NODE}, "+env.request_rhos=[0,1000]")
    with pytest.raises(ConfigError, match=r"learners.linucb: LinUCB decides for each trial's"):
        run_config(cfg)
    assert not out.exists() or not any(out.iterdir())
    node = {**LINUCB_NODE, "objective": "quality_cost"}
    cfg = tiny_run_config(out, {"linucb": node}, "+env.request_rhos=[0,1000]", "rounds=10")
    results = run_config(cfg)
    assert {"avg_utility_rho0", "avg_utility_rho1000", "rounds_rho0"} <= set(results.columns)
    assert (results["rounds_rho0"] + results["rounds_rho1000"] == 10).all()
