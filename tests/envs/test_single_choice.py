from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tests.conftest import make_table
from torchroute.envs import SingleChoiceEnv
from torchroute.learners import BestSingleArm
from torchroute.types import Decision


def _env(table, **kw):
    kw.setdefault("rho", [0.0, 500.0, 0.0])
    kw.setdefault("seeds", [0, 0, 1])
    return SingleChoiceEnv(table, dtype=torch.float64, **kw)


def test_stream_is_a_per_seed_permutation_of_the_split(tiny_table):
    env = _env(tiny_table)
    test_rows = set(tiny_table.rows("test").tolist())
    stream = torch.stack([env.context(t).index[:, 0] for t in range(env.horizon)], 1)  # [R, T]
    for row in stream.tolist():
        assert sorted(row) == sorted(test_rows)
    assert torch.equal(stream[0], stream[1])  # same seed, same order whatever rho
    assert not torch.equal(stream[0], stream[2])
    # the order of a seed does not depend on the other trials
    alone = _env(tiny_table, rho=[1.0], seeds=[1])
    assert torch.equal(
        torch.stack([alone.context(t).index[0, 0] for t in range(env.horizon)]), stream[2]
    )


def test_step_rewards_and_outcome_match_the_closed_form(tiny_table):
    env = _env(tiny_table)
    ctx = env.context(3)
    action = torch.tensor([[0], [2], [3]])
    probs = torch.nn.functional.one_hot(action, 4).double()
    fb, out = env.step(ctx, Decision(probs, action))
    rows = ctx.index[:, 0]
    rho = torch.tensor([0.0, 500.0, 0.0], dtype=torch.float64)
    util = (tiny_table.scores[rows] - rho[:, None] * tiny_table.costs[rows]).clamp(0, 1)
    chosen = util[torch.arange(3), action[:, 0]]
    torch.testing.assert_close(out["utility"][:, 0], chosen)
    torch.testing.assert_close(out["regret"][:, 0], util.max(1).values - chosen)
    torch.testing.assert_close(out["score"][:, 0], tiny_table.scores[rows, action[:, 0]])
    torch.testing.assert_close(out["cost"][:, 0], tiny_table.costs[rows, action[:, 0]])
    assert fb.only_played
    assert fb.observed.sum().item() == 3 and fb.observed[torch.arange(3), 0, action[:, 0]].all()
    torch.testing.assert_close(fb.reward[:, 0], util * fb.observed[:, 0])
    full_env = _env(tiny_table, feedback="full")
    full, _ = full_env.step(ctx, Decision(probs, action))
    assert full.observed.all() and not full.only_played
    torch.testing.assert_close(full.reward[:, 0], util)
    torch.testing.assert_close(full.score[:, 0], tiny_table.scores[rows])


def test_env_reveals_the_played_arm_and_the_requested_ones(tiny_table):
    env = _env(tiny_table)
    ctx = env.context(0)
    action = torch.tensor([[1], [1], [0]])
    probs = torch.nn.functional.one_hot(action, 4).double()
    observe = torch.zeros(3, 1, 4, dtype=torch.bool)
    observe[0, 0, 3] = True  # trial 0 asks for arm 3 too
    fb, _ = env.step(ctx, Decision(probs, action, observe=observe))
    expected = torch.nn.functional.one_hot(action, 4).bool() | observe
    assert torch.equal(fb.observed, expected) and not fb.only_played
    util = env.utilities(ctx.index)
    torch.testing.assert_close(fb.reward, torch.where(expected, util, 0.0))


def test_mismatched_decisions_are_one_line_errors(tiny_table):
    env = _env(tiny_table)
    ctx = env.context(0)
    subset = torch.zeros(3, 1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match=r"one arm.*\[R, B, m\]"):
        env.step(ctx, Decision(torch.full((3, 1, 4), 0.25), subset))
    with pytest.raises(ValueError, match=r"K=4 arms.*\(3, 1, 5\)"):
        env.step(ctx, Decision(torch.full((3, 1, 5), 0.2), torch.zeros(3, 1, dtype=torch.long)))
    with pytest.raises(ValueError, match=r"arms outside 0..3"):
        env.step(ctx, Decision(torch.full((3, 1, 4), 0.25), torch.full((3, 1), 4)))
    with pytest.raises(ValueError, match=r"Decision.observe must be \[R, B, K\]"):
        Decision(
            torch.full((3, 1, 4), 0.25),
            torch.zeros(3, 1, dtype=torch.long),
            observe=torch.ones(3, 1, 3, dtype=torch.bool),
        )


def test_problem_exposes_the_train_split_and_prices(tiny_table):
    env = _env(tiny_table)
    problem = env.problem()
    rows = tiny_table.rows("train")
    assert (problem.num_trials, problem.num_arms, problem.dim) == (3, 4, 6)
    assert problem.arm_names == tiny_table.arm_names and problem.embed_dim == 6
    torch.testing.assert_close(problem.train.scores, tiny_table.scores[rows])
    torch.testing.assert_close(problem.prices, tiny_table.costs[rows].mean(0))
    # independent reference: the table's own float64 utility on the train rows
    expected = tiny_table.utility(500.0)[rows].mean(0)
    torch.testing.assert_close(problem.train_mean_utility()[1], expected)
    no_train = replace(tiny_table, split=("test",) * tiny_table.num_queries)
    with pytest.raises(ValueError, match="BestSingleArm needs a train split"):
        BestSingleArm.from_problem(_env(no_train).problem())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rho": [-1.0], "seeds": [0]}, "rho must be finite and >= 0"),
        ({"rho": [0.0, 1.0], "seeds": [0]}, "rho has 2 entries"),
        ({"horizon": 1000}, "rounds=1000 but split 'test'"),
        ({"split": "nope"}, "unknown split"),
        ({"feedback": "partial"}, "feedback must be"),
    ],
)
def test_bad_arguments_are_named(tiny_table, kwargs, message):
    with pytest.raises(ValueError, match=message):
        _env(tiny_table, **kwargs)


def test_table_without_embeddings_needs_features():
    table = make_table()
    bare = replace(table, embeddings=None)
    with pytest.raises(ValueError, match="no embeddings"):
        SingleChoiceEnv(bare, rho=[0.0], seeds=[0])
    env = SingleChoiceEnv(bare, rho=[0.0], seeds=[0], features=torch.ones(60, 2))
    assert env.dim == 2


def test_summarize_divides_each_sum_by_the_rounds(tiny_table):
    """Hand-made sums over 4 rounds: every column is its own sum / 4 (0 rounds count as 1)."""
    env = _env(tiny_table)
    sums = {
        "utility": torch.tensor([2.0, 1.0, 0.5], dtype=torch.float64),
        "regret": torch.tensor([0.4, 0.0, 1.2], dtype=torch.float64),
        "score": torch.tensor([3.0, 1.5, 0.25], dtype=torch.float64),
        "cost": torch.tensor([0.004, 0.0, 0.002], dtype=torch.float64),
    }
    out = env.summarize(sums, rounds=4)
    assert list(out) == ["avg_utility", "avg_regret", "accuracy", "avg_cost"]
    expected = {
        "avg_utility": [0.5, 0.25, 0.125],
        "avg_regret": [0.1, 0.0, 0.3],
        "accuracy": [0.75, 0.375, 0.0625],
        "avg_cost": [0.001, 0.0, 0.0005],
    }
    for name, values in expected.items():
        torch.testing.assert_close(out[name], torch.tensor(values, dtype=torch.float64))
    empty = env.summarize(sums, rounds=0)
    torch.testing.assert_close(empty["accuracy"], sums["score"])
