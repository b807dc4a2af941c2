"""Arms that do not exist this round (``Context.available``): masking scores and probabilities
(a whole :class:`~torchroute.types.Decision` is restricted by
:func:`torchroute.learners.base.restrict_decision`)."""

from __future__ import annotations

import torch
from torch import Tensor


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
