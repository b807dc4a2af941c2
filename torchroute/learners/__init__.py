"""Online learners: ``nn.Module``s with ``act`` / ``update`` and state batched over trials."""

from torchroute.learners.base import Learner
from torchroute.learners.linear import EpsilonGreedy, FullFeedbackLinUCB, LinTS, LinUCB, SquareCB
from torchroute.learners.ridge_base import RidgeLearner
from torchroute.learners.simple import BestSingleArm, RandomRouter

__all__ = [
    "BestSingleArm",
    "EpsilonGreedy",
    "FullFeedbackLinUCB",
    "Learner",
    "LinTS",
    "LinUCB",
    "RandomRouter",
    "RidgeLearner",
    "SquareCB",
]
