"""Honest routing probabilities of a served learner: what each model's chance really was.

A learner's ``Decision.probs`` is its distribution only when ``act`` samples the action
from it; argmax rules report a one-hot vector although ties are broken at random, and
Thompson sampling reports the arm its posterior draw picked with probability 1. The
learner says which rule it applies: :meth:`~torchroute.learners.Learner.routing_probs`
is exact where the learner knows its distribution (the sampling learners, LinUCB's ties,
epsilon-greedy, the best single arm), an estimate from further posterior draws for LinTS,
and a Monte-Carlo estimate from further ``act`` calls otherwise.
"""

from __future__ import annotations

import torch
from torch import Tensor

from torchroute.learners.base import Learner
from torchroute.types import Context, Decision


def routing_probs(
    learner: Learner,
    context: Context,
    decision: Decision,
    generator: torch.Generator,
    draws: int = 200,
) -> tuple[Tensor, str]:
    """The probability of every model for each of ``B`` queries, and how it was obtained.

    Args:
        learner: a one-trial learner (its state is only read).
        context: ``x [1, B, d]`` as given to ``act``.
        decision: what ``act`` returned (``probs [1, B, K]``, ``action [1, B]``).
        generator: the source of any draws (not the one ``act`` used).
        draws: draws of the rules estimated by sampling.

    Returns:
        ``(probs [B, K] float64, method)`` with ``method`` one of ``"sampled"`` (the
        decision's own distribution), ``"learner"`` (the learner's own
        :meth:`~torchroute.learners.Learner.routing_probs`) or ``"monte carlo"``.
    """
    probs = learner.routing_probs(context, decision, generator, draws)[0].double()
    if learner.samples_from_probs:
        method = "sampled"
    elif type(learner).routing_probs is Learner.routing_probs:
        method = "monte carlo"
    else:
        method = "learner"
    return probs, method
