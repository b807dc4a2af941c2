"""Online learners: ``nn.Module``s with ``act`` / ``update`` and state batched over trials."""

from torchroute.learners.base import Learner
from torchroute.learners.cabs_c import CABSC
from torchroute.learners.cabs_d import CABSD, NeuralSquareCB
from torchroute.learners.hpg import HPG, ParameterFreeHPG
from torchroute.learners.linear import EpsilonGreedy, FullFeedbackLinUCB, LinTS, LinUCB, SquareCB
from torchroute.learners.neural import FullFeedbackNeuralUCB, NeuralUCB
from torchroute.learners.neural_linear import NeuralLinearTS, NeuralLinearUCB
from torchroute.learners.omd import ContextualOMDApproachability, OMDApproachability
from torchroute.learners.policy_baselines import (
    EXP3,
    EuclideanQuadPG,
    FlattenedNPG,
    LogLinearPG,
)
from torchroute.learners.residual import ResidualLinTS, ResidualLinUCB
from torchroute.learners.residual_squarecb import ResidualSquareCB
from torchroute.learners.ridge_base import RidgeLearner
from torchroute.learners.simple import BestSingleArm, RandomRouter
from torchroute.learners.static import KNNRouter, RegressorRouter
from torchroute.learners.subset_base import SubsetLearner
from torchroute.learners.subset_baselines import (
    CBwKSubset,
    CUCBSubset,
    GreedySubset,
    MoEGating,
    RandomSubset,
    TSBwKSubset,
    TSSubset,
)

__all__ = [
    "CABSC",
    "CABSD",
    "EXP3",
    "HPG",
    "BestSingleArm",
    "CBwKSubset",
    "CUCBSubset",
    "ContextualOMDApproachability",
    "EpsilonGreedy",
    "EuclideanQuadPG",
    "FlattenedNPG",
    "FullFeedbackLinUCB",
    "FullFeedbackNeuralUCB",
    "GreedySubset",
    "KNNRouter",
    "Learner",
    "LinTS",
    "LinUCB",
    "LogLinearPG",
    "MoEGating",
    "NeuralLinearTS",
    "NeuralLinearUCB",
    "NeuralSquareCB",
    "NeuralUCB",
    "OMDApproachability",
    "ParameterFreeHPG",
    "RandomRouter",
    "RandomSubset",
    "RegressorRouter",
    "ResidualLinTS",
    "ResidualLinUCB",
    "ResidualSquareCB",
    "RidgeLearner",
    "SquareCB",
    "SubsetLearner",
    "TSBwKSubset",
    "TSSubset",
]
