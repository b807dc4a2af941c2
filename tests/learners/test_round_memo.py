"""RoundMemo: a round's ``update`` reads what its ``act`` computed for the same context.

The memo is checked by counting calls (one computation per context object, a new one after
an in-place change, another object or another stamp); the learners on a fitted router
(residual, neural-linear) run their router's forward pass once per round, and a learner
that acted first ends in the same state, bit for bit, as one that only updated (which
computes everything afresh) -- also when the update's context is not the act's.
"""

from __future__ import annotations

import pytest
import torch

from tests.learners.test_residual import D, K, R, _base, _features
from torchroute.learners.neural_linear import NeuralLinearTS, NeuralLinearUCB
from torchroute.learners.residual import ResidualLinTS, ResidualLinUCB
from torchroute.learners.residual_squarecb import ResidualSquareCB
from torchroute.learners.round_memo import RoundMemo
from torchroute.types import Context, Decision, Feedback, TrainSplit

F64 = torch.float64


def _counter():
    calls = []

    def compute():
        calls.append(1)
        return torch.tensor(float(len(calls)))

    return calls, compute


def _context(seed: int) -> Context:
    return Context(x=_features(R, torch.Generator().manual_seed(seed)).view(R, 1, D))


def test_the_same_context_is_computed_once():
    memo, (calls, compute) = RoundMemo(), _counter()
    context = _context(0)
    first = memo.get(context, compute)
    assert memo.get(context, compute) is first
    assert len(calls) == 1


def test_another_object_an_in_place_change_or_another_stamp_computes_again():
    memo, (calls, compute) = RoundMemo(), _counter()
    context = _context(0)
    memo.get(context, compute)
    twin = Context(x=context.x.clone())  # equal numbers, another object
    assert float(memo.get(twin, compute)) == 2.0
    twin.x.mul_(2.0)  # changed in place: its version moves
    assert float(memo.get(twin, compute)) == 3.0
    assert float(memo.get(twin, compute, stamp=("other",))) == 4.0
    assert float(memo.get(twin, compute, stamp=("other",))) == 4.0
    memo.clear()
    assert float(memo.get(twin, compute, stamp=("other",))) == 5.0
    assert len(calls) == 5


def _train(n: int, seed: int) -> TrainSplit:
    g = torch.Generator().manual_seed(seed)
    x = _features(n, g)
    scores = torch.sigmoid(x @ torch.randn(D, K, generator=g, dtype=F64))
    costs = torch.tensor([0.1, 0.2, 0.4, 0.8], dtype=F64).expand(n, K).clone()
    return TrainSplit(x.float(), scores.float(), costs.float())


BUILDERS = {
    "residual_ucb": lambda: ResidualLinUCB(R, K, D, _base("mlp"), alpha=1.0, lam=1.0),
    "residual_ts": lambda: ResidualLinTS(R, K, D, _base("mlp"), v=0.5, gamma=0.9),
    "residual_squarecb": lambda: ResidualSquareCB(
        R, K, D, _base("mlp"), _train(40, 1), igw_gamma=30.0, projection=2
    ),
    "neural_linear_ucb": lambda: NeuralLinearUCB(
        R, K, D, _base("mlp"), _train(40, 1), _train(20, 2), head_weight=[0.1, 1.0], alpha=0.5
    ),
    "neural_linear_ts": lambda: NeuralLinearTS(
        R, K, D, _base("mlp"), _train(40, 1), head_weight=0.5, v=0.5, window=4
    ),
}


def _feedback(context: Context, arm: torch.Tensor, seed: int) -> tuple[Decision, Feedback]:
    score = torch.rand(R, 1, K, generator=torch.Generator().manual_seed(seed), dtype=F64)
    observed = torch.nn.functional.one_hot(arm, K).bool()
    feedback = Feedback(
        reward=torch.zeros(R, 1, K, dtype=F64),
        observed=observed,
        score=torch.where(observed, score, 0.0),
        only_played=True,
    )
    return Decision(probs=observed.to(F64), action=arm), feedback


def _count_forward(learner) -> list[int]:
    """Count the base router's forward passes (its candidates' scores or representation)."""
    calls = []
    base = learner.base
    for name in ("candidate_scores", "candidate_representation"):
        method = getattr(base, name)

        def counted(x, method=method):
            calls.append(1)
            return method(x)

        setattr(base, name, counted)
    return calls


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_an_update_after_act_runs_the_routers_forward_pass_once(name):
    learner = BUILDERS[name]()
    calls = _count_forward(learner)
    g = torch.Generator().manual_seed(0)
    for t in range(5):
        context = _context(10 + t)
        decision = learner.act(context, g)
        learner.update(context, *_feedback(context, decision.action, t))
    assert len(calls) == 5  # one per round (without the memo: two)


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("late", [False, True], ids=["same", "late"])
def test_acting_first_leaves_the_state_of_a_fresh_update(name, late):
    """``late``: each update gets the previous round's context (feedback one round late),
    which the memo must not mistake for the act's."""
    acting, updating = BUILDERS[name](), BUILDERS[name]()
    g = torch.Generator().manual_seed(0)
    previous = _context(99)
    for t in range(30):
        context = _context(10 + t)
        acting.act(context, g)
        seen = previous if late else context
        arm = ((torch.arange(R) + t) % K)[:, None]
        acting.update(seen, *_feedback(seen, arm, t))
        updating.update(seen, *_feedback(seen, arm, t))
        previous = context
    mine, fresh = acting.state_dict(), updating.state_dict()
    assert mine.keys() == fresh.keys()
    for key in mine:
        assert torch.equal(mine[key], fresh[key]), key


def test_trial_groups_hand_each_group_the_context_of_its_act():
    """Two residual learners side by side (:class:`TrialGroups`, as a choice on validation
    replays its candidates): each group's update reads the rows its act cut, so each
    group's router runs once per round (cutting them again for the update: twice)."""
    from torchroute.learners.trial_groups import TrialGroups

    groups = [ResidualLinUCB(R, K, D, _base("mlp"), lam=1.0), ResidualLinUCB(R, K, D, _base("mlp"))]
    calls = [_count_forward(learner) for learner in groups]
    index = [torch.arange(R), torch.arange(R, 2 * R)]
    both = TrialGroups(groups, index)
    g = torch.Generator().manual_seed(0)
    for t in range(4):
        x = torch.cat([_context(10 + t).x, _context(20 + t).x])  # [2R, 1, D]
        context = Context(x=x)
        decision = both.act(context, g)
        score = torch.rand(2 * R, 1, K, generator=torch.Generator().manual_seed(t), dtype=F64)
        observed = torch.nn.functional.one_hot(decision.action, K).bool()
        feedback = Feedback(
            reward=torch.zeros(2 * R, 1, K, dtype=F64),
            observed=observed,
            score=torch.where(observed, score, 0.0),
            only_played=True,
        )
        both.update(context, decision, feedback)
    assert [len(c) for c in calls] == [4, 4]
