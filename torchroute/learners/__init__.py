"""Online learners: ``nn.Module``s with ``act`` / ``update`` and state batched over trials."""

from torchroute.learners.base import Learner
from torchroute.learners.linear import EpsilonGreedy, FullFeedbackLinUCB, LinTS, LinUCB, SquareCB
from torchroute.learners.neural import FullFeedbackNeuralUCB, NeuralUCB
from torchroute.learners.ridge_base import RidgeLearner
from torchroute.learners.simple import BestSingleArm, RandomRouter
from torchroute.learners.static import KNNRouter, RegressorRouter

__all__ = [
    "BestSingleArm",
    "EpsilonGreedy",
    "FullFeedbackLinUCB",
    "FullFeedbackNeuralUCB",
    "KNNRouter",
    "Learner",
    "LinTS",
    "LinUCB",
    "NeuralUCB",
    "RandomRouter",
    "RegressorRouter",
    "RidgeLearner",
    "SquareCB",
]
