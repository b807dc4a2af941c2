"""Arms that do not exist this round (``Context.available``): masking scores and decisions."""

from __future__ import annotations

import torch
from torch import Tensor

from torchroute.functional.random import Source
from torchroute.functional.sampling import sample_categorical
from torchroute.types import Decision


def mask_scores(scores: Tensor, available: Tensor | None) -> Tensor:
    """``scores [..., K]`` with unavailable arms at ``-inf`` (unchanged when ``None``).

    An argmax (or softmax) over the result never picks an unavailable arm.
    """
    if available is None:
        return scores
    return scores.masked_fill(~available, float("-inf"))


def restrict_probs(probs: Tensor, available: Tensor) -> Tensor:
    """``probs [..., K]`` conditioned on the available arms ``[..., K]`` (bool).

    Unavailable arms get exactly 0 and the rest is renormalised; a row whose whole mass
    sat on unavailable arms becomes uniform over the available ones.
    """
    kept = torch.where(available, probs, 0.0)
    total = kept.sum(-1, keepdim=True)
    uniform = available.to(probs.dtype) / available.sum(-1, keepdim=True).to(probs.dtype)
    return torch.where(total > 0, kept / total.clamp_min(torch.finfo(probs.dtype).tiny), uniform)


def played_probs(probs: Tensor, available: Tensor | None) -> Tensor:
    """The probabilities a restricted ``act`` sampled from: ``probs [..., K]`` restricted to
    ``available [..., K]`` (:func:`restrict_probs`), or ``probs`` itself when ``None``.

    An update that importance-weights by (or takes the gradient of) its own routing
    probabilities uses these, so that its weights are right while an arm is masked.
    """
    return probs if available is None else restrict_probs(probs, available)


def restrict_decision(decision: Decision, available: Tensor, generator: Source = None) -> Decision:
    """``decision`` with no mass and no action on an unavailable arm.

    ``probs`` becomes :func:`restrict_probs`; an action on an unavailable arm is redrawn
    from those probabilities (an available action is kept, so the action is distributed
    as the restricted ``probs``: ``p_k + (1 - S) p_k / S = p_k / S``). One draw is made
    every call, whatever the actions, so the number of draws does not depend on the data.
    ``observe`` loses the unavailable arms, and ``scores`` (an argmax rule's) get them
    masked. Shapes: ``probs, available [R, B, K]``, ``action [R, B]``.
    """
    probs = restrict_probs(decision.probs, available)
    redraw = sample_categorical(probs, generator)  # [R, B]
    playable = available.gather(-1, decision.action[..., None])[..., 0]
    action = torch.where(playable, decision.action, redraw)
    observe = None if decision.observe is None else decision.observe & available
    scores = None if decision.scores is None else mask_scores(decision.scores, available)
    return Decision(probs=probs, action=action, observe=observe, scores=scores)
