"""``cost_model: ridge``: a ``quality_cost`` learner decides by each query's predicted cost.

References: a numpy ridge of the train costs on ``[x, 1]`` (the costs ``c_k(x)``), a numpy
ridge of the observed scores (``y_k``), a brute-force loop over requests and arms for the
argmax of ``y_k - rho c_k(x)``, and the price rule ``c p_now / p_ref`` worked by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchroute.errors import InputError, OptionError
from torchroute.learners import LinTS, LinUCB, SquareCB
from torchroute.learners.discounted import DiscountedLinTS, DiscountedLinUCB
from torchroute.learners.sliding_window import SlidingWindowLinTS, SlidingWindowLinUCB
from torchroute.types import Context, Decision, Feedback, Problem, TrainSplit

F64 = torch.float64
R, K, D, N = 2, 3, 4, 50
LEARNERS = (
    LinUCB,
    LinTS,
    SquareCB,
    DiscountedLinUCB,
    DiscountedLinTS,
    SlidingWindowLinUCB,
    SlidingWindowLinTS,
)


def _train() -> TrainSplit:
    """``N`` train rows whose costs depend on the query: model ``k``'s cost is linear in
    ``x`` with its own slope, plus noise (so no model has one price)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, D, generator=g, dtype=F64)
    slope = torch.randn(D, K, generator=g, dtype=F64) * 2e-3
    costs = (5e-3 + x @ slope + 1e-4 * torch.randn(N, K, generator=g, dtype=F64)).clamp_min(0)
    scores = torch.rand(N, K, generator=g, dtype=F64)
    return TrainSplit(features=x, scores=scores, costs=costs)


def _problem(rho=(0.0, 500.0), train: TrainSplit | None = None, prices=None) -> Problem:
    train = _train() if train is None else train
    prices = train.costs.mean(0) if prices is None else prices
    return Problem(R, K, D, rho=torch.tensor(rho, dtype=F64), arm_names=("a", "b", "c"),
                   prices=prices, train=train, dtype=F64)  # fmt: skip


def _hand_cost_ridge(train: TrainSplit, xq: np.ndarray) -> np.ndarray:
    """numpy ``c_k(x) = [x, 1] W``, ``W = (X^T X + I)^{-1} X^T C`` with ``X = [x, 1]``."""
    xs = np.hstack([train.features.numpy(), np.ones((N, 1))])
    w = np.linalg.solve(xs.T @ xs + np.eye(D + 1), xs.T @ train.costs.numpy())
    return np.concatenate([xq, np.ones((*xq.shape[:-1], 1))], -1) @ w


def _build(cls, problem: Problem, cost_model: str = "ridge", **hp):
    hp |= {"window": 100} if cls in (SlidingWindowLinUCB, SlidingWindowLinTS) else {}
    return cls.from_problem(problem, objective="quality_cost", cost_model=cost_model, **hp)


@pytest.mark.parametrize("cls", LEARNERS)
def test_the_predicted_costs_are_a_numpy_ridge_of_the_train_costs(cls):
    problem = _problem()
    learner = _build(cls, problem)
    assert learner.cost_w.dtype == F64 and tuple(learner.cost_w.shape) == (D + 1, K)
    xq = torch.randn(R, 5, D, generator=torch.Generator().manual_seed(1), dtype=F64)
    costs = learner.decision_costs(Context(x=xq))
    hand = _hand_cost_ridge(problem.train, xq.numpy())
    np.testing.assert_allclose(costs.numpy(), hand, rtol=0, atol=1e-9)
    assert np.ptp(hand, axis=1).min() > 1e-3  # the costs vary with the query


def _feed(learner, n: int = 40):
    """Bandit feedback of random scores on random arms; returns ``x [n, R, D]``, the
    played arms ``[n, R]`` and the scores ``[n, R, K]``."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(n, R, D, generator=g, dtype=F64)
    arms = torch.randint(K, (n, R), generator=g)
    score = torch.rand(n, R, K, generator=g, dtype=F64)
    for t in range(n):
        action = arms[t][:, None]
        observed = torch.nn.functional.one_hot(action, K).bool()
        fb = Feedback(reward=torch.zeros(R, 1, K, dtype=F64), observed=observed,
                      score=torch.where(observed, score[t][:, None], 0.0))  # fmt: skip
        ctx = Context(x=x[t][:, None])
        learner.update(ctx, Decision(probs=observed.to(F64), action=action), fb)
    return x, arms, score


def _hand_scores(x, arms, score, xq: np.ndarray) -> np.ndarray:
    """``y_k`` of a numpy ridge (``lam = 1``) of each trial's observed scores, ``[R, B, K]``."""
    y = np.zeros((R, xq.shape[1], K))
    for r in range(R):
        for k in range(K):
            rows = (arms[:, r] == k).numpy()
            xs, ys = x[rows, r].numpy(), score[rows, r, k].numpy()
            theta = np.linalg.solve(np.eye(D) + xs.T @ xs, xs.T @ ys)
            y[r, :, k] = xq[r] @ theta
    return y


@pytest.mark.parametrize("cls", [LinUCB, DiscountedLinUCB, SlidingWindowLinUCB])
def test_the_action_is_the_brute_force_argmax_of_y_minus_rho_times_the_predicted_cost(cls):
    problem = _problem()
    hp = {"alpha": 0.0} | ({"gamma": 1.0} if cls is DiscountedLinUCB else {})
    learner = _build(cls, problem, **hp).double()
    x, arms, score = _feed(learner)
    xq = torch.randn(R, 24, D, generator=torch.Generator().manual_seed(3), dtype=F64)
    req = torch.tensor([0.0, 30.0, 100.0, 300.0], dtype=F64).repeat(6)[None].expand(R, 24)
    action = learner.act(Context(x=xq, rho=req)).action.numpy()
    y = _hand_scores(x, arms, score, xq.numpy())
    c = _hand_cost_ridge(problem.train, xq.numpy())
    prices = problem.prices.numpy()
    by_price = np.zeros((R, 24), dtype=int)
    for r in range(R):
        for b in range(24):
            rho = float(req[r, b])
            best, best_value = -1, -np.inf
            for k in range(K):
                value = y[r, b, k] - rho * c[r, b, k]
                if value > best_value:
                    best, best_value = k, value
            assert action[r, b] == best, (r, b)
            by_price[r, b] = int(np.argmax(y[r, b] - rho * prices))
    # the per-query cost decides some requests otherwise than each model's mean price
    assert (action != by_price).any()
    price_learner = _build(cls, problem, cost_model="price", **hp).double()
    _feed(price_learner)
    assert (price_learner.act(Context(x=xq, rho=req)).action.numpy() == by_price).all()


def test_a_price_event_scales_each_prediction_by_its_models_price_ratio():
    # powers of 2 (the reference prices are kept in the learner's float32); model c has
    # no ratio (a reference price of 0), so its costs are shifted by the price instead
    ref = torch.tensor([2.0**-8, 2.0**-7, 0.0], dtype=F64)
    problem = _problem(prices=ref)
    learner = _build(LinUCB, problem, alpha=0.0).double()
    xq = torch.randn(R, 3, D, generator=torch.Generator().manual_seed(4), dtype=F64)
    now = torch.tensor([2.0**-7, 2.0**-9, 2e-3], dtype=F64).expand(R, 3, K)
    costs = learner.decision_costs(Context(x=xq, prices=now)).numpy()
    c = _hand_cost_ridge(problem.train, xq.numpy())
    hand = np.stack([c[..., 0] * 2.0, c[..., 1] / 4.0, c[..., 2] + 2e-3], -1)
    np.testing.assert_allclose(costs, hand, rtol=1e-12, atol=1e-15)
    # the scores take them: y - rho c with the trial's rho (untrained: y = 0)
    scores = learner.act(Context(x=xq, prices=now)).scores.numpy()
    np.testing.assert_allclose(scores, -np.array([0.0, 500.0])[:, None, None] * hand, atol=1e-12)
    # prices as at the reference: the predictions themselves, bit for bit
    same = learner.decision_costs(Context(x=xq, prices=ref.expand(R, 3, K)))
    assert torch.equal(same, learner.decision_costs(Context(x=xq)))


def test_the_price_model_decides_by_the_known_prices():
    problem = _problem()
    learner = _build(LinUCB, problem, cost_model="price").double()
    assert learner.cost_w is None  # nothing fitted
    xq = torch.randn(R, 2, D, generator=torch.Generator().manual_seed(7), dtype=F64)
    prices = problem.prices.float().double().numpy()  # kept in the learner's float32
    costs = learner.decision_costs(Context(x=xq)).expand(R, 2, K).numpy()
    np.testing.assert_array_equal(costs, np.broadcast_to(prices, (R, 2, K)))


def test_a_warm_start_choice_compares_values_at_the_predicted_costs():
    problem = _problem()
    learner = _build(LinUCB, problem)
    y = torch.rand(R, 6, K, generator=torch.Generator().manual_seed(5), dtype=F64)
    xq = torch.randn(6, D, generator=torch.Generator().manual_seed(6), dtype=F64)
    values = learner._trial_values(y, xq).numpy()
    c = _hand_cost_ridge(problem.train, xq.numpy()[None])[0]  # [6, K]
    hand = y.numpy() - np.array([0.0, 500.0])[:, None, None] * c[None]
    np.testing.assert_allclose(values, hand, atol=1e-9)


@pytest.mark.parametrize("cls", LEARNERS)
def test_bad_cost_models_are_refused_in_one_line(cls):
    with pytest.raises(OptionError, match=r"cost_model must be one of \['price', 'ridge'\]"):
        cls.check_options(objective="quality_cost", cost_model="linear")
    with pytest.raises(OptionError, match="cost_model: ridge needs objective: quality_cost"):
        cls.check_options(cost_model="ridge")
    with pytest.raises(OptionError, match="objective must be one of"):
        cls.check_options(objective="cost")
    cls.check_options(objective="quality_cost", cost_model="ridge")  # accepted
    with pytest.raises(OptionError, match="cost_model: ridge needs objective: quality_cost"):
        cls.from_problem(_problem(), cost_model="ridge", **_extra(cls))


def _extra(cls) -> dict:
    return {"window": 10} if cls in (SlidingWindowLinUCB, SlidingWindowLinTS) else {}


def test_the_ridge_needs_a_train_split():
    problem = Problem(R, K, D, rho=torch.zeros(R, dtype=F64), arm_names=("a", "b", "c"))
    with pytest.raises(InputError, match=r"LinUCB \(cost_model: ridge\) needs a train split"):
        LinUCB.from_problem(problem, objective="quality_cost", cost_model="ridge")


def test_a_run_refuses_a_bad_cost_model_before_writing(tmp_path):
    from tests.conftest import LINUCB_NODE, tiny_run_config
    from torchroute.errors import ConfigError
    from torchroute.run import run_config

    out = tmp_path / "run"
    node = {**LINUCB_NODE, "cost_model": "ridge"}
    with pytest.raises(ConfigError, match=r"^learners.linucb: LinUCB: cost_model: ridge needs"):
        run_config(tiny_run_config(out, {"linucb": node}))
    assert not out.exists() or not any(out.iterdir())
    node = {**LINUCB_NODE, "objective": "quality_cost", "cost_model": "per_token"}
    with pytest.raises(ConfigError, match=r"cost_model must be one of \['price', 'ridge'\]"):
        run_config(tiny_run_config(out, {"linucb": node}))
    assert not out.exists() or not any(out.iterdir())


def test_a_run_with_a_price_change_decides_by_the_repriced_predictions(tmp_path, monkeypatch):
    from tests.conftest import LINUCB_NODE, tiny_run_config
    from torchroute.learners.objective import Objective
    from torchroute.run import run_config

    seen = []
    costs_of = Objective.decision_costs

    def recording(self, context):
        out = costs_of(self, context)
        if context.prices is not None:
            x = context.x.double()
            plain = torch.cat([x, torch.ones_like(x[..., :1])], -1) @ self.cost_w
            seen.append((plain, self.known_prices.double(), context.prices.double(), out))
        return out

    monkeypatch.setattr(Objective, "decision_costs", recording)
    node = {**LINUCB_NODE, "objective": "quality_cost", "cost_model": "ridge"}
    cfg = tiny_run_config(tmp_path / "run", {"linucb": node}, "scenario=price", "rhos=[0,500]")
    results = run_config(cfg)
    assert (results["rounds"] == 20).all()
    changed = 0
    for plain, ref, now, out in seen:  # c_k(x) p_now / p_ref, model by model
        ratio = (now / ref[:, None]).numpy()
        changed += int((ratio != 1).any())
        np.testing.assert_allclose(out.numpy(), plain.numpy() * ratio, rtol=1e-6, atol=0)
    assert changed >= 5  # the rounds after the price change (half of 20) read new prices
