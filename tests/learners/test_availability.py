"""Arm availability (``Context.available``): every learner gives an unavailable arm
probability exactly 0 and never plays it; argmax learners play their best available arm."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from tests.learners.helpers import LEARNERS, LinearProblem, _tiny_oracle, build, feedback_for
from torchroute.learners import LinTS, LinUCB, SubsetLearner
from torchroute.learners.warm_options import WARM_KEYS
from torchroute.types import Context, Problem, TrainSplit

R, K, D = 4, 3, 5
CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "learner"
#: configs that need an embedding oracle (their own tests build them on a table)
NOT_HERE = {"regressor"}


def _single_choice_configs() -> list[str]:
    names = []
    for path in sorted(CONFIGS.glob("*.yaml")):
        target = str(OmegaConf.load(path)["_target_"]).removesuffix(".from_problem")
        if path.stem not in NOT_HERE and not issubclass(get_class(target), SubsetLearner):
            names.append(path.stem)
    return names


def _from_config(stem: str):
    node = OmegaConf.load(CONFIGS / f"{stem}.yaml")
    for key in WARM_KEYS:  # keys of the run's build path, not of the factory
        node.pop(key, None)
    extra = {}
    if "oracle" in node:
        del node["oracle"]
        extra["oracle"] = _tiny_oracle(K, D)
    g = torch.Generator().manual_seed(3)
    train = TrainSplit(
        torch.randn(12, D, generator=g), torch.rand(12, K, generator=g), torch.rand(12, K) * 1e-3
    )
    problem = Problem(
        R, K, D, rho=torch.zeros(R), arm_names=tuple(f"m{i}" for i in range(K)), train=train,
        horizon=40, embed_dim=D,
    )  # fmt: skip
    return instantiate(node, **extra)(problem).double()


CASES = [f"config:{s}" for s in _single_choice_configs()] + sorted(LEARNERS)


def _make(case: str):
    if case.startswith("config:"):
        return _from_config(case.removeprefix("config:"))
    return build(case, R, K, D)


def _mask(t: int) -> torch.Tensor:
    """``[R, 1, K]``: trial r misses arm (r + t) % K (every trial keeps K - 1 arms)."""
    gone = (torch.arange(R) + t) % K
    return ~torch.nn.functional.one_hot(gone, K).bool()[:, None, :]


@pytest.mark.parametrize("case", CASES)
def test_unavailable_arms_get_zero_probability_and_are_never_played(case):
    learner = _make(case)
    problem = LinearProblem(R, K, D, seed=1)
    gen = torch.Generator().manual_seed(0)
    for t in range(12):
        base = problem.context()
        available = _mask(t)
        context = Context(x=base.x, embedding=base.x, available=available)
        decision = learner.act(context, gen)
        assert bool((decision.probs.masked_select(~available) == 0).all()), case
        assert bool(available.gather(-1, decision.action[..., None]).all()), case
        torch.testing.assert_close(
            decision.probs.sum(-1), torch.ones(R, 1, dtype=decision.probs.dtype)
        )
        reward = problem.reward(base).clamp(0, 1)
        feedback = feedback_for(learner, decision, reward)
        learner.update(context, decision, feedback, gen)


@pytest.mark.parametrize("cls", [LinUCB, LinTS])
def test_argmax_learners_play_their_best_available_arm(cls):
    """Against a naive reference: the learner's own scores, the masked arms dropped."""
    learner = cls(R, K, D, lam=1.0).double()
    problem = LinearProblem(R, K, D, seed=2)
    gen = torch.Generator().manual_seed(0)
    for _ in range(10):  # some data so that the arms differ
        context = problem.context()
        decision = learner.act(context, gen)
        learner.update(context, decision, feedback_for(learner, decision, problem.reward(context)))
    context = problem.context()
    if cls is LinUCB:
        x = context.x[:, 0]
        mean = torch.einsum("rkd,rd->rk", learner.theta, x)
        width = torch.einsum("rd,rkde,re->rk", x, learner.a_inv, x).sqrt()
        scores = mean + width
        for t in range(K):
            available = _mask(t)
            action = learner.act(Context(x=context.x, available=available), gen).action[:, 0]
            expected = scores.masked_fill(~available[:, 0], float("-inf")).argmax(-1)
            assert torch.equal(action, expected)
    else:  # LinTS with v = 0 is greedy on the ridge mean
        learner.v = 0.0
        mean = torch.einsum("rkd,rd->rk", learner.theta, context.x[:, 0])
        for t in range(K):
            available = _mask(t)
            action = learner.act(Context(x=context.x, available=available), gen).action[:, 0]
            expected = mean.masked_fill(~available[:, 0], float("-inf")).argmax(-1)
            assert torch.equal(action, expected)


def test_without_a_mask_the_decision_is_unchanged():
    """``available`` all True restricts nothing: the same action as without the mask."""
    learner = LinUCB(R, K, D).double()
    context = LinearProblem(R, K, D, seed=4).context()
    plain = learner.act(context, torch.Generator().manual_seed(5))
    masked = learner.act(
        Context(x=context.x, available=torch.ones(R, 1, K, dtype=torch.bool)),
        torch.Generator().manual_seed(5),
    )
    assert torch.equal(plain.action, masked.action) and torch.equal(plain.probs, masked.probs)
