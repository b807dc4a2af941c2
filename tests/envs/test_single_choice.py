from __future__ import annotations

import pytest
import torch

from tests.conftest import make_table
from torchroute.envs import SingleChoiceEnv
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
    torch.testing.assert_close(out.utility[:, 0], chosen)
    torch.testing.assert_close(out.best_utility[:, 0], util.max(1).values)
    assert fb.observed.sum().item() == 3 and fb.observed[torch.arange(3), 0, action[:, 0]].all()
    torch.testing.assert_close(fb.reward[:, 0], util * fb.observed[:, 0])
    full, _ = env.step(ctx, Decision(probs, action), full=True)
    assert full.observed.all()
    torch.testing.assert_close(full.reward[:, 0], util)


def test_train_mean_utility_uses_the_train_split(tiny_table):
    env = _env(tiny_table)
    rows = tiny_table.rows("train")
    expected = tiny_table.utility(500.0)[rows].mean(0)
    torch.testing.assert_close(env.train_mean_utility()[1], expected)


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
    from dataclasses import replace

    bare = replace(table, embeddings=None)
    with pytest.raises(ValueError, match="no embeddings"):
        SingleChoiceEnv(bare, rho=[0.0], seeds=[0])
    env = SingleChoiceEnv(bare, rho=[0.0], seeds=[0], features=torch.ones(60, 2))
    assert env.dim == 2
