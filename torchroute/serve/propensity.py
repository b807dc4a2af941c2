"""Honest routing probabilities of a served learner: what each model's chance really was.

A learner's ``Decision.probs`` is its distribution only when ``act`` samples the action
from it (SquareCB, the softmax policies, CABS, random routing). Argmax rules report a
one-hot vector although ties are broken at random, and Thompson sampling reports the arm
its posterior draw picked with probability 1. :func:`routing_probs` gives, for each
query, the probability of every model under the rule actually applied:

- sampled from the reported distribution: that distribution;
- LinUCB (and its full-feedback variant): uniform over the arms tied at the top score;
- LinTS: estimated from ``draws`` further draws of the same posterior plus the draw
  that was taken (``(count + 1[chosen]) / (draws + 1)``: never 0 for the chosen arm, a
  resolution of ``1 / (draws + 1)``; the vector averages to the rule's distribution over
  decisions, and the chosen arm's entry to ``(draws p + 1) / (draws + 1)`` given the choice);
- any other learner: the same Monte-Carlo estimate with ``draws`` further ``act`` calls on
  the same contexts (a deterministic rule gives exactly 1).
"""

from __future__ import annotations

import torch
from torch import Tensor

from torchroute.functional.random import normal
from torchroute.functional.ridge import ridge_predict, ridge_width
from torchroute.learners.base import Learner
from torchroute.learners.cabs_c import CABSC
from torchroute.learners.cabs_d import CABSD, NeuralSquareCB
from torchroute.learners.linear import FullFeedbackLinUCB, LinTS, LinUCB, SquareCB
from torchroute.learners.policy_baselines import SoftmaxPolicy
from torchroute.learners.simple import RandomRouter
from torchroute.types import Context, Decision

#: ``act`` methods that draw the action from the ``probs`` they return
_SAMPLED = {
    SquareCB.act,
    RandomRouter.act,
    SoftmaxPolicy.act,
    CABSC.act,
    CABSD.act,
    NeuralSquareCB.act,
}


def _scale(value: float | Tensor, like: Tensor) -> float | Tensor:
    return value if not isinstance(value, Tensor) else value.to(like.dtype)[:, None, None]


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
        generator: the source of the Monte-Carlo draws (not the one ``act`` used).
        draws: Monte-Carlo draws for rules without a closed-form distribution.

    Returns:
        ``(probs [B, K] float64, method)`` with ``method`` one of ``"sampled"``, ``"ties"``,
        ``"posterior draws"``, ``"monte carlo"``.
    """
    act = type(learner).act
    probs = decision.probs[0].double()  # [B, K]
    action = decision.action[0]  # [B]
    chosen = torch.nn.functional.one_hot(action, learner.num_arms).double()  # [B, K]
    if act in _SAMPLED:
        return probs, "sampled"
    if act in (LinUCB.act, FullFeedbackLinUCB.act) and learner.kernel == "torch":
        x = context.x.to(learner.theta.dtype)
        scores = ridge_predict(learner.theta, x)  # [1, B, K]
        if isinstance(learner.alpha, Tensor) or learner.alpha != 0:
            scores = scores + _scale(learner.alpha, x) * ridge_width(learner.a_inv, x)
        tied = (scores[0] >= scores[0].amax(-1, keepdim=True)).double()  # [B, K]
        if bool((tied * chosen).sum(-1).ge(1).all()):
            return tied / tied.sum(-1, keepdim=True), "ties"
        return chosen, "ties"  # the fused kernel rounded differently: its own argmax
    if act is LinTS.act:
        x = context.x.to(learner.theta.dtype)
        mean = ridge_predict(learner.theta, x)[0]  # [B, K]
        width = (_scale(learner.v, x) * ridge_width(learner.a_inv, x))[0]  # [B, K]
        noise = normal(generator, (draws, *mean.shape), dtype=mean.dtype)  # [M, B, K]
        picks = (mean + width * noise).argmax(-1)  # [M, B]
        counts = torch.nn.functional.one_hot(picks, learner.num_arms).double().sum(0)
        return (counts + chosen) / (draws + 1), "posterior draws"
    b = context.x.shape[1]
    many = Context(
        x=context.x.repeat(1, draws, 1),
        embedding=None if context.embedding is None else context.embedding.repeat(1, draws, 1),
    )
    with torch.no_grad():
        picks = learner.act(many, generator).action[0].view(draws, b)  # [M, B]
    counts = torch.nn.functional.one_hot(picks, learner.num_arms).double().sum(0)
    return (counts + chosen) / (draws + 1), "monte carlo"
