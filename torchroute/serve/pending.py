"""Requests waiting for feedback: stacked for the router's checkpoint, batched for the learner."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch
from torch import Tensor

from torchroute.functional.utility import utility
from torchroute.serve.arms import pad_arms
from torchroute.types import Context, Decision, Feedback


def pack_pending(pending: OrderedDict[str, dict[str, Any]], num_arms: int) -> dict[str, Any]:
    """``P`` pending requests -> ``{ids, x [P, d], embedding [P, e], arm [P], probs [P, K]}``.

    Probabilities of requests routed before a model was added are zero-padded to ``K``.
    With ``P = 0`` only ``ids`` is stored.
    """
    items = list(pending.values())
    if not items:
        return {"ids": []}
    return {
        "ids": list(pending),
        "x": torch.stack([it["x"] for it in items]),
        "embedding": torch.stack([it["embedding"] for it in items]),
        "arm": torch.tensor([it["arm"] for it in items], dtype=torch.long),
        "probs": torch.stack([pad_arms(it["probs"], num_arms) for it in items]),
    }


def unpack_pending(packed: dict[str, Any]) -> OrderedDict[str, dict[str, Any]]:
    """The inverse of :func:`pack_pending`, in the original order."""
    out: OrderedDict[str, dict[str, Any]] = OrderedDict()
    for i, rid in enumerate(packed["ids"]):
        row: dict[str, Tensor | int] = {
            "x": packed["x"][i],
            "embedding": packed["embedding"][i],
            "arm": int(packed["arm"][i]),
            "probs": packed["probs"][i],
        }
        out[rid] = row
    return out


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
        score: ``[n]`` qualities; cost: ``[n]`` costs.
        rho: the cost sensitivity of the utility ``clip(score - rho cost, 0, 1)``.
        num_arms: ``K`` now (probabilities of older decisions are zero-padded).

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
