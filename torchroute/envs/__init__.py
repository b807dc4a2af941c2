"""Environments: the data and the randomness of the world, batched over trials."""

from torchroute.envs.base import Env
from torchroute.envs.low_rank_experts import LowRankExperts
from torchroute.envs.single_choice import SingleChoiceEnv
from torchroute.envs.subset import SubsetEnv, SubsetProblem, table_subset_env, trec_subset_env

__all__ = [
    "Env",
    "LowRankExperts",
    "SingleChoiceEnv",
    "SubsetEnv",
    "SubsetProblem",
    "table_subset_env",
    "trec_subset_env",
]
