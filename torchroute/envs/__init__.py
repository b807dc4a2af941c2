"""Environments: the data and the randomness of the world, batched over trials."""

from torchroute.envs.base import Env
from torchroute.envs.single_choice import SingleChoiceEnv

__all__ = ["Env", "SingleChoiceEnv"]
