"""Requests waiting for feedback, batched for the learner's update."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from torchroute.functional.utility import utility
from torchroute.serve.arms import pad_arms
from torchroute.types import Context, Decision, Feedback


def feedback_batch(
    items: list[dict[str, Any]],
    score: Tensor,
    cost: Tensor,
    rho: float,
    num_arms: int,
    dtype: torch.dtype,
) -> tuple[Context, Decision, Feedback]:
    """The learner's batch for ``n`` answered requests: bandit feedback on the routed arms.

    Args:
        items: ``n`` pending requests (``x [d]``, ``embedding [e]``, ``arm``, ``probs [K']``,
            optionally ``rho``: the request's own trade-off, ``None`` for the router's).
        score: ``[n]`` qualities.
        cost: ``[n]`` costs.
        rho: the router's cost sensitivity of the utility ``clip(score - rho cost, 0, 1)``
            (a request's own ``rho`` replaces it for that request).
        num_arms: ``K`` now (probabilities of older decisions are zero-padded).
        dtype: the dtype of the batch's tensors.

    Returns:
        ``Context(x [1, n, d], embedding [1, n, e], rho [1, n])`` (``rho`` only when a
        request has its own), ``Decision(probs [1, n, K],
        action [1, n])`` and ``Feedback`` ``[1, n, K]`` observed on the routed arm only.
    """
    x = torch.stack([it["x"] for it in items])[None]  # [1, n, d]
    emb = torch.stack([it["embedding"] for it in items])[None]  # [1, n, e]
    arm = torch.tensor([it["arm"] for it in items])[None]  # [1, n]
    probs = torch.stack([pad_arms(it["probs"], num_arms) for it in items])[None]  # [1, n, K]
    observed = torch.nn.functional.one_hot(arm, num_arms).bool()  # [1, n, K]
    own = [it.get("rho") for it in items]
    if any(r is not None for r in own):  # each request's rho: the utility it was routed for
        rhos = torch.tensor([rho if r is None else r for r in own], dtype=score.dtype)  # [n]
        u = utility(score, cost, rhos).to(dtype)[None, :, None]  # [1, n, 1]
        context = Context(x=x, embedding=emb, rho=rhos.to(dtype)[None])
    else:
        u = utility(score, cost, rho).to(dtype)[None, :, None]  # [1, n, 1]
        context = Context(x=x, embedding=emb)
    feedback = Feedback(
        reward=torch.where(observed, u, 0.0),
        observed=observed,
        score=torch.where(observed, score.to(dtype)[None, :, None], 0.0),
        cost=torch.where(observed, cost.to(dtype)[None, :, None], 0.0),
        only_played=True,
    )
    return context, Decision(probs=probs, action=arm), feedback
