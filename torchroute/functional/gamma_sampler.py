"""Gamma draws for per-trial streams: Marsaglia–Tsang in two vectorised stages.

The sampler reads uniforms at fixed positions of a trial's stream (one draw call of a
:class:`~torchroute.functional.random.TrialRNG`), so an element's value depends only on its
trial's key, the call and its index ``j``:

1. every element makes :data:`FIRST` proposals (uniforms at ``k n + j``, ``k < 2 FIRST + 1``:
   the proposals' normals by Box–Muller, their acceptance uniforms, the ``alpha < 1`` boost);
2. in each trial the first :func:`budget` ``(n)`` elements whose proposals were all rejected
   (in index order) make :data:`SECOND` more (uniforms at ``(2 FIRST + 1) n + 2 SECOND j + k``).

One proposal is accepted with probability at least 0.9515 (the worst case, shape 1 after the
boost), so an element gets no value only if its 12 proposals are all rejected (probability
``0.0485^12 < 3e-16``) or its trial has more than ``budget(n) >= n / 16`` first-stage
rejections (each with probability ``< 0.0024``; a binomial tail below ``1e-20`` for every
``n``). Such an element is ``d = alpha - 1/3`` (times the boost), close to the mean.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

FIRST = 2
SECOND = 10


def budget(n: int) -> int:
    """Second-stage slots per trial for ``n`` elements per trial."""
    return min(n, n // 16 + 8)


def _normals(u: Tensor) -> Tensor:
    """``[..., 2 m]`` uniforms in ``(0, 1]`` -> ``[..., 2 m]`` normals (Box–Muller pairs)."""
    m = u.shape[-1] // 2
    radius = torch.sqrt(-2.0 * torch.log(u[..., :m]))
    angle = (2.0 * math.pi) * u[..., m:]
    return torch.cat([radius * torch.cos(angle), radius * torch.sin(angle)], -1)


def _first_accepted(d: Tensor, x: Tensor, log_u: Tensor) -> tuple[Tensor, Tensor]:
    """Marsaglia–Tsang over proposals on the last dim: ``d [..., 1]``, ``x, log_u [..., P]``
    -> ``(v [...], accepted [...])`` with ``v`` of the first accepted proposal (else 1)."""
    v = 1.0 + x * torch.rsqrt(9.0 * d)
    v = v * v * v
    safe = v.clamp_min(1e-300)
    ok = (v > 0) & (log_u < 0.5 * x * x + d * (1.0 - safe + torch.log(safe)))
    first = ok & (ok.cumsum(-1) == 1)
    accepted = ok.any(-1)
    return torch.where(accepted, (safe * first).sum(-1), 1.0), accepted


def sample_gamma(alpha: Tensor, uniforms: Callable[[Tensor], Tensor]) -> Tensor:
    """``Gamma(alpha, 1)`` for ``alpha [R, ...] > 0`` (float64 inside, ``alpha``'s dtype out).

    Args:
        alpha: ``[R, ...]`` shapes.
        uniforms: ``positions [R or 1, m] (int64) -> [R, m]`` float64 uniforms in ``(0, 1]``
            at those positions of each trial's stream (one draw call).
    """
    r = alpha.shape[0]
    a = alpha.to(torch.float64).reshape(r, -1)  # [R, n]
    n = a.shape[1]
    boost = a < 1
    d = torch.where(boost, a + 1.0, a) - 1.0 / 3.0
    width = 2 * FIRST + 1
    u = uniforms(torch.arange(width * n, device=a.device)[None]).reshape(r, width, n)
    u = u.transpose(1, 2)  # [R, n, 2 FIRST + 1]
    v, accepted = _first_accepted(d[..., None], _normals(u[..., :FIRST]), u[..., FIRST:-1].log())
    s = budget(n)
    # the first s rejected elements in index order, then accepted ones (a stable argsort of
    # `accepted` cut at s): the s smallest keys, each unique
    key = accepted.to(torch.long) * n + torch.arange(n, device=a.device)
    idx = key.topk(s, dim=1, largest=False, sorted=True).indices
    k = torch.arange(2 * SECOND, device=a.device)
    pos = width * n + idx[..., None] * (2 * SECOND) + k  # [R, s, 2 SECOND]
    u2 = uniforms(pos.reshape(r, -1)).reshape(r, s, 2 * SECOND)
    x2, log_u2 = _normals(u2[..., :SECOND]), u2[..., SECOND:].log()
    v2, accepted2 = _first_accepted(d.gather(1, idx)[..., None], x2, log_u2)
    kept = accepted.gather(1, idx)
    v = v.scatter(1, idx, torch.where(kept, v.gather(1, idx), torch.where(accepted2, v2, 1.0)))
    value = d * v
    value = torch.where(boost, value * u[..., -1] ** (1.0 / a), value)
    return value.reshape(alpha.shape).to(alpha.dtype)


__all__ = ["FIRST", "SECOND", "budget", "sample_gamma"]
