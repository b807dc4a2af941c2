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
        items: ``n`` pending requests (``x [d]``, ``embedding [e]``, ``arm``, ``probs [K']``).
        score: ``[n]`` qualities.
        cost: ``[n]`` costs.
        rho: the cost sensitivity of the utility ``clip(score - rho cost, 0, 1)``.
        num_arms: ``K`` now (probabilities of older decisions are zero-padded).
        dtype: the dtype of the batch's tensors.

    Returns:
        ``Context(x [1, n, d], embedding [1, n, e])``, ``Decision(probs [1, n, K],
        action [1, n])`` and ``Feedback`` ``[1, n, K]`` observed on the routed arm only.
    """
    x = torch.stack([it["x"] for it in items])[None]  # [1, n, d]
    emb = torch.stack([it["embedding"] for it in items])[None]  # [1, n, e]
    arm = torch.tensor([it["arm"] for it in items])[None]  # [1, n]
    probs = torch.stack([pad_arms(it["probs"], num_arms) for it in items])[None]  # [1, n, K]
    observed = torch.nn.functional.one_hot(arm, num_arms).bool()  # [1, n, K]
    u = utility(score, cost, rho).to(dtype)[None, :, None]  # [1, n, 1]
    feedback = Feedback(
        reward=torch.where(observed, u, 0.0),
        observed=observed,
        score=torch.where(observed, score.to(dtype)[None, :, None], 0.0),
        cost=torch.where(observed, cost.to(dtype)[None, :, None], 0.0),
        only_played=True,
    )
    return Context(x=x, embedding=emb), Decision(probs=probs, action=arm), feedback
