"""Known prices: ``Context.prices`` from a price event, read by every single-choice learner.

References are hand computations and brute-force loops over a hand-built 3-model table
whose costs are constant per model (each model's price): a price cut of the dearest model
must move a static router's and a warm LinUCB's choice on the very round it takes effect.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from torchroute.data.table import RoutingTable
from torchroute.envs import SingleChoiceEnv
from torchroute.functional.prices import costs_at, reference_utility, utility_shift
from torchroute.learners import (
    BestSingleArm,
    KNNRouter,
    Learner,
    LinUCB,
    RegressorRouter,
)
from torchroute.learners.anchors import MLPScoreRouter
from torchroute.run.classes import learner_class
from torchroute.types import Context, Feedback

#: each model's score and price: cheap, mid, dear
SCORE = (0.5, 0.6, 0.95)
PRICE = (0.001, 0.002, 0.01)
CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "learner"


def _table(n: int = 60) -> RoutingTable:
    """``n`` queries of 3 models, scores and costs constant per model; features: 3 random
    columns and a bias (30 train, 12 val, the rest test)."""
    g = torch.Generator().manual_seed(0)
    emb = torch.cat([torch.randn(n, 3, generator=g), torch.ones(n, 1)], 1)
    split = ["train"] * 30 + ["val"] * 12 + ["test"] * (n - 42)
    return RoutingTable(
        scores=torch.tensor(SCORE).expand(n, 3).clone(),
        costs=torch.tensor(PRICE).expand(n, 3).clone(),
        arm_names=["cheap", "mid", "dear"],
        query_ids=[f"q{i}" for i in range(n)],
        split=split,
        embeddings=emb,
        text=[f"query {i}" for i in range(n)],
    )


def _env(factor: float | None, rho: float = 50.0, scenario=None) -> SingleChoiceEnv:
    """Two trials of the test split; a price event ``factor`` on ``dear`` at round 9."""
    if factor is not None:
        scenario = [{"kind": "price", "arm": "dear", "at": 0.5, "factor": factor}]
    return SingleChoiceEnv(_table(), rho=[rho, rho], seeds=[0, 1], split="test", scenario=scenario)


def _brute_force_best(t: int, start: int, factor: float, rho: float) -> int:
    """The arm of largest ``y - rho c`` at round ``t`` (costs cut by ``factor`` on ``dear``
    from ``start`` on), by a loop over the arms."""
    values = []
    for k in range(3):
        cost = PRICE[k] * (factor if k == 2 and t >= start else 1.0)
        values.append(SCORE[k] - rho * cost)
    return max(range(3), key=values.__getitem__)


# ------------------------------------------------------------------ the pure rules
def test_costs_at_scales_by_the_price_ratio_and_shifts_a_free_model():
    costs = torch.tensor([[[2.0, 1.0, 0.5]]])
    ref = torch.tensor([4.0, 0.0, 1.0])
    now = torch.tensor([[[1.0, 3.0, 1.0]]])
    # 2 * 1/4; a reference price 0: 1 + (3 - 0); an unchanged price: the cost itself
    assert costs_at(costs, ref, now).tolist() == [[[0.5, 4.0, 0.5]]]
    assert torch.equal(costs_at(costs, ref, ref.expand_as(costs)), costs)


def test_utility_shift_and_reference_utility_by_hand():
    ref, now = torch.tensor([0.01, 0.002]), torch.tensor([0.001, 0.002])
    shift = utility_shift(ref, now, 50.0)
    assert shift[0].item() == pytest.approx(0.45)  # -50 (0.001 - 0.01)
    assert shift[1].item() == 0.0
    # observed at 0.1 of the dear model's price: reward 0.95 - 0.05; at its reference price
    # the same query costs 0.01, so 0.95 - 0.5 (and the unchanged model keeps its reward)
    reward = torch.tensor([0.95 - 50 * 0.001, 0.6 - 50 * 0.002])
    target = reference_utility(reward, torch.tensor([0.001, 0.002]), ref, now, 50.0)
    assert target.tolist() == pytest.approx([0.95 - 50 * 0.01, 0.6 - 50 * 0.002])
    assert target[1].item() == reward[1].item()
    # clipped at neither price but below 0 at the reference: 0.95 - 200 * 0.01, not clipped
    reward = torch.tensor([0.95 - 200 * 0.001])
    target = reference_utility(reward, torch.tensor([0.001]), ref[:1], now[:1], 200.0)
    assert target.item() == pytest.approx(0.95 - 200 * 0.01)
    # a model priced 0 now is charged its reference price
    free = reference_utility(torch.tensor([0.9]), torch.tensor([0.0]), torch.tensor([0.004]),
                             torch.tensor([0.0]), 100.0)  # fmt: skip
    assert free.item() == pytest.approx(0.9 - 0.4)


# ------------------------------------------------------------------ the env
def test_context_prices_follow_the_price_event():
    env = _env(0.1)
    start = env.scenario.starts[0]
    ref = [sum([PRICE[k]] * 30) / 30 for k in range(3)]  # mean train cost, a loop
    for t in (0, start - 1, start, env.horizon - 1):
        prices = env.context(t).prices
        assert prices.shape == (2, 1, 3)
        want = [ref[0], ref[1], ref[2] * (0.1 if t >= start else 1.0)]
        assert prices[:, 0].tolist() == [pytest.approx(want)] * 2
    assert torch.equal(env.context(0).prices[0, 0], env.problem().prices)  # the same bits
    sub = env.select_trials([1])
    assert sub.context(start).prices.shape == (1, 1, 3)


@pytest.mark.parametrize(
    "scenario", [None, [{"kind": "drift", "arm": "dear", "at": 0.5, "score_shift": -0.2}]]
)
def test_no_price_event_publishes_no_prices(scenario):
    env = _env(None, scenario=scenario)
    assert all(env.context(t).prices is None for t in range(env.horizon))


# ------------------------------------------------------------------ the flip on the round
def _warm_linucb(env: SingleChoiceEnv) -> LinUCB:
    """Greedy LinUCB fed every train row at the train prices (full feedback), then frozen."""
    problem = env.problem()
    learner = LinUCB.from_problem(problem, alpha=0.0)
    train = problem.train
    x = train.features[None].expand(2, -1, -1)
    reward = (train.scores - 50.0 * train.costs).clamp(0, 1)[None].expand(2, -1, -1)
    observed = torch.ones_like(reward, dtype=torch.bool)
    action = torch.zeros(2, x.shape[1], dtype=torch.long)
    learner.fit_weighted(Context(x=x), action, reward, observed.float())
    return learner


def _routers(env: SingleChoiceEnv) -> dict[str, Learner]:
    problem = env.problem()
    regressor = RegressorRouter(
        2, 3, problem.rho, predicted_scores=env.table.scores, predicted_costs=env.table.costs
    ).keep_prices(problem)
    return {
        "best_single": BestSingleArm.from_problem(problem),
        "knn": KNNRouter.from_problem(problem, k=3),
        "mlp_router": MLPScoreRouter.from_problem(problem, weight_decay=1e-5, steps=300),
        "regressor": regressor,
        "linucb_warm": _warm_linucb(env),
    }


def test_a_price_cut_moves_the_choice_on_the_round_it_takes_effect():
    env = _env(0.1)
    start = env.scenario.starts[0]
    learners = _routers(env)
    g = torch.Generator().manual_seed(0)
    for t in range(env.horizon):  # act only: nothing is updated
        context = env.context(t)
        want = _brute_force_best(t, start, 0.1, 50.0)
        for name, learner in learners.items():
            action = learner.act(context, g).action
            assert action.tolist() == [[want], [want]], (name, t)
    # the reference really flips: mid before the cut, dear from its round on
    assert _brute_force_best(start - 1, start, 0.1, 50.0) == 1
    assert _brute_force_best(start, start, 0.1, 50.0) == 2


def test_without_prices_the_routers_keep_the_train_choice():
    """The same stream with the prices taken away: no flip (what the test above adds)."""
    env = _env(0.1)
    g = torch.Generator().manual_seed(0)
    for name, learner in _routers(env).items():
        context = replace(env.context(env.horizon - 1), prices=None)
        assert learner.act(context, g).action.tolist() == [[1], [1]], name


# ------------------------------------------------------------------ the update target
def test_update_learns_the_utility_at_the_reference_prices():
    env = _env(0.1)
    problem = env.problem()
    learner = LinUCB.from_problem(problem)
    reference = LinUCB.from_problem(problem)
    x = torch.tensor([[[0.3, -0.2, 0.5, 1.0]]]).expand(2, 1, 4)
    prices = problem.prices * torch.tensor([1.0, 1.0, 0.1])
    context = Context(x=x, prices=prices.expand(2, 1, 3))
    observed = torch.tensor([False, False, True]).expand(2, 1, 3)
    cost = torch.where(observed, 0.001, 0.0)  # the dear model at 0.1 of its price
    score = torch.where(observed, 0.3, 0.0)  # a query it does badly
    reward = torch.where(observed, 0.3 - 50 * 0.001, 0.0)  # what the env reveals now
    feedback = Feedback(reward=reward, observed=observed, score=score, cost=cost)
    decision = replace(learner.act(context), action=torch.full((2, 1), 2))
    learner.update(context, decision, feedback)
    # at the train price the query costs 0.01: 0.3 - 0.5, below 0 (not clipped there: the
    # clip is the one of the prices in force, so the quality is not lost)
    hand = 0.3 - 50.0 * PRICE[2]
    plain = Feedback(reward=torch.where(observed, hand, 0.0), observed=observed)
    reference.update(Context(x=x), decision, plain)
    torch.testing.assert_close(learner.theta, reference.theta)
    torch.testing.assert_close(learner.a_inv, reference.a_inv)
    target = learner.reference_feedback(context, feedback).reward
    assert target[:, 0, 2].tolist() == pytest.approx([hand, hand])
    assert target[:, 0, :2].tolist() == [[0.0, 0.0]] * 2  # unobserved cells untouched


# ------------------------------------------------------------------ every learner
def _single_choice_configs() -> dict[str, type[Learner]]:
    out = {}
    for path in sorted(CONFIGS.glob("*.yaml")):
        cls = learner_class(OmegaConf.to_container(OmegaConf.load(path)))
        if cls is not None and cls.protocol == "single":
            out[path.stem] = cls
    return out


def test_every_single_choice_learner_reads_prices_or_says_why_not():
    classes = _single_choice_configs()
    assert {"linucb", "knn_val", "mlp_router", "residual_linucb", "best_single"} <= set(classes)
    for name, cls in classes.items():
        assert cls.reads_prices or cls.prices_unread.strip(), name
        assert not (cls.reads_prices and cls.prices_unread), name


def _node(name: str) -> dict:
    """The learner config ``name`` (its runner keys dropped; fitting steps cut to 20, a
    router's fit does not change how it reads prices)."""
    node = OmegaConf.to_container(OmegaConf.load(CONFIGS / f"{name}.yaml"))
    node.pop("warm_start", None)
    if "steps" in node:
        node["steps"] = 20
    if isinstance(node.get("base"), str):
        node["base"] = _node(node["base"])
    return node


def _build(name: str, problem) -> Learner:
    torch.manual_seed(0)  # NeuralUCB's initial weights
    return instantiate({**_node(name), "_partial_": True})(problem)


#: readers built from their configs (the regressor needs an oracle: built by hand above)
READERS = sorted(
    n for n, c in _single_choice_configs().items() if c.reads_prices and n != "regressor"
)


def _run(learner: Learner, env: SingleChoiceEnv, drop_prices: bool):
    g = torch.Generator().manual_seed(0)
    actions = []
    for t in range(env.horizon):
        context = env.context(t)
        if drop_prices:
            context = replace(context, prices=None)
        decision = learner.act(context, g)
        feedback, _ = env.step(context, decision)
        learner.update(context, decision, feedback, g)
        actions.append(decision.action)
    return torch.cat(actions, 1), learner.state_dict()


@pytest.mark.parametrize("name", READERS)
def test_unchanged_prices_change_no_bit(name):
    """A price event of factor 1: the prices are read every round and equal the reference;
    actions and the final state are those of the same stream without prices, bit for bit."""
    env = _env(1.0)
    assert env.context(0).prices is not None
    learner = _build(name, env.problem())
    twin = copy.deepcopy(learner)
    actions, state = _run(learner, env, drop_prices=False)
    actions_none, state_none = _run(twin, env, drop_prices=True)
    assert torch.equal(actions, actions_none)
    assert state.keys() == state_none.keys()
    for key, value in state.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, state_none[key]), key


@pytest.mark.parametrize("name", READERS)
def test_every_reader_moves_to_a_model_whose_price_falls(name):
    """At ``rho = 2000`` the price cut of ``dear`` is worth ``2000 * 0.009 = 18`` in utility:
    whatever it learned (cold or fitted), a learner that reads prices plays ``dear`` most."""
    env = _env(0.1, rho=2000.0)
    learner = _build(name, env.problem())
    context = env.context(env.horizon - 1)
    g = torch.Generator().manual_seed(0)
    decision = learner.act(context, g)
    # the routing distribution (Monte Carlo over its draws for a posterior sampler)
    probs = learner.routing_probs(context, decision, torch.Generator().manual_seed(1))
    assert probs.argmax(-1).tolist() == [[2], [2]], probs
