"""Input checks of the router: one-line errors naming the argument and what was expected."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from torchroute.errors import DuplicateModelError as DuplicateModelError
from torchroute.errors import InputError, ScoreRangeError
from torchroute.errors import UnknownModelError as UnknownModelError


def check_texts(texts: Sequence[str]) -> list[str]:
    """``B >= 1`` query strings."""
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise InputError("texts must be a list of strings")
    if not texts:
        raise InputError("texts is empty: give at least one query")
    return list(texts)


def check_embeddings(embeddings: Tensor | Sequence, dim: int | None, dtype: torch.dtype) -> Tensor:
    """Finite embeddings ``[B >= 1, e = dim]`` as a ``dtype`` tensor."""
    try:
        emb = torch.as_tensor(embeddings, dtype=dtype)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise InputError(f"embeddings must be a [B, e={dim}] array of numbers ({exc})") from exc
    if emb.ndim != 2 or emb.shape[0] == 0 or emb.shape[1] != dim:
        raise InputError(f"embeddings must be [B >= 1, e={dim}], got {tuple(emb.shape)}")
    if not torch.isfinite(emb).all():
        raise InputError("embeddings contain NaN or infinite values")
    return emb


def check_feedback(
    ids: Sequence[str],
    scores: Sequence[float],
    costs: Sequence[float],
    models: Sequence[str] | None,
    served: Sequence[str],
) -> tuple[Tensor, Tensor]:
    """Scores ``[n]`` in ``[0, 1]`` and costs ``[n]`` ``>= 0`` (float64) for ``n`` ids.

    ``models``, when given, must be ``n`` names among ``served``.
    """
    if isinstance(ids, str) or not all(isinstance(i, str) for i in ids):
        raise InputError("request_ids must be a list of strings")
    for name, values in (("scores", scores), ("costs", costs), ("models", models)):
        if values is not None and len(values) != len(ids):
            raise InputError(f"{name} has {len(values)} entries for {len(ids)} request_ids")
    score = torch.as_tensor(list(scores), dtype=torch.float64)
    cost = torch.as_tensor(list(costs), dtype=torch.float64)
    bad = ~(torch.isfinite(score) & (score >= 0) & (score <= 1))
    if bad.any():
        i = int(bad.nonzero()[0])
        raise ScoreRangeError(
            f"scores must be finite numbers in [0, 1], got {score[i].item()} for {ids[i]!r}"
        )
    bad = ~(torch.isfinite(cost) & (cost >= 0))
    if bad.any():
        i = int(bad.nonzero()[0])
        raise InputError(f"costs must be finite and >= 0, got {cost[i].item()} for {ids[i]!r}")
    for name in models or ():
        if name not in served:
            raise UnknownModelError(f"unknown model {name!r}; served: {list(served)}")
    return score, cost
