"""Oracle-based learners refuse an oracle trained for other arms or embeddings (by name)."""

from __future__ import annotations

import pytest
import torch

from torchroute.envs import SingleChoiceEnv
from torchroute.learners import RegressorRouter
from torchroute.models import MultiHeadOracle


def _oracle(arm_names, embed_dim=6):
    return MultiHeadOracle(embed_dim, len(arm_names), feature_dim=4, hidden=8, arm_names=arm_names)


def test_regressor_router_checks_arms_and_embedding_size(tiny_table):
    problem = SingleChoiceEnv(tiny_table, rho=[0.0, 500.0], seeds=[0, 1]).problem()
    router = RegressorRouter.from_problem(problem, oracle=_oracle(tiny_table.arm_names))
    env = SingleChoiceEnv(tiny_table, rho=[0.0, 500.0], seeds=[0, 1])
    decision = router.act(env.context(0), torch.Generator().manual_seed(0))
    assert decision.action.shape == (2, 1)
    renamed = ["other0", *tiny_table.arm_names[1:]]  # same count, another arm
    with pytest.raises(ValueError, match=r"trained for arms .*'other0'.*not in the oracle"):
        RegressorRouter.from_problem(problem, oracle=_oracle(renamed))
    reordered = list(reversed(tiny_table.arm_names))
    with pytest.raises(ValueError, match="arm sets and order must match"):
        RegressorRouter.from_problem(problem, oracle=_oracle(reordered))
    with pytest.raises(ValueError, match=r"reads 8-d embeddings.*6-d"):
        RegressorRouter.from_problem(problem, oracle=_oracle(tiny_table.arm_names, 8))
