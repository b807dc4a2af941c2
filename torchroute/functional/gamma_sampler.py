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

The second stage has two equal forms: *dense*, every trial's ``budget(n)`` slots (fixed
shapes, no host sync: the form on accelerators), and *sparse*, only the elements that need
it (a data-dependent size: the CPU's form, where it skips about 30% of the uniforms).
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
from torch import Tensor

FIRST = 2
SECOND = 10


class Uniforms(Protocol):
    """Uniforms of one draw call at given positions of the trials' streams."""

    def __call__(self, positions: Tensor, rows: Tensor | None = None) -> Tensor:
        """float64 uniforms in ``(0, 1]``: with ``rows=None``, ``positions [R or 1, m]``
        (int64) -> ``[R, m]``, every trial at those positions; with ``rows [m]``,
        ``positions [m, w]`` -> ``[m, w]``, trial ``rows[i]`` at ``positions[i]``."""
        ...


def budget(n: int) -> int:
    """Second-stage slots per trial for ``n`` elements per trial."""
    return min(n, n // 16 + 8)


def _normals(u: Tensor) -> Tensor:
    """``[..., 2 m]`` uniforms in ``(0, 1]`` -> ``[..., 2 m]`` normals (Box–Muller pairs)."""
    m = u.shape[-1] // 2
    radius = torch.sqrt(-2.0 * torch.log(u[..., :m]))
    angle = (2.0 * math.pi) * u[..., m:]
    return torch.cat([radius * torch.cos(angle), radius * torch.sin(angle)], -1)


def _proposal(d: Tensor, x: Tensor, log_u: Tensor) -> tuple[Tensor, Tensor]:
    """One Marsaglia–Tsang proposal, elementwise: ``(v, ok)`` (``v`` clamped positive)."""
    v = 1.0 + x * torch.rsqrt(9.0 * d)
    v = v * v * v
    safe = v.clamp_min(1e-300)
    ok = (v > 0) & (log_u < 0.5 * x * x + d * (1.0 - safe + torch.log(safe)))
    return safe, ok


def _first_accepted(d: Tensor, x: Tensor, log_u: Tensor) -> tuple[Tensor, Tensor]:
    """Marsaglia–Tsang over proposals on the last dim: ``d [..., 1]``, ``x, log_u [..., P]``
    -> ``(v [...], accepted [...])`` with ``v`` of the first accepted proposal (else 1)."""
    safe, ok = _proposal(d, x, log_u)
    first = ok & (ok.cumsum(-1) == 1)
    accepted = ok.any(-1)
    return torch.where(accepted, (safe * first).sum(-1), 1.0), accepted


def _first_stage(d: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
    """The :data:`FIRST` proposals of every element: ``d [R, n]``, ``u [R, 2 FIRST + 1, n]``
    -> ``(v [R, n], accepted [R, n])`` (one proposal at a time: no reduction over a short
    last dimension)."""
    m = FIRST // 2  # Box–Muller: radii from rows 0..m-1, angles from rows m..FIRST-1
    radius = torch.sqrt(-2.0 * torch.log(u[:, :m]))
    angle = (2.0 * math.pi) * u[:, m:FIRST]
    x = torch.cat([radius * torch.cos(angle), radius * torch.sin(angle)], 1)  # [R, FIRST, n]
    v = torch.ones_like(d)
    accepted = torch.zeros_like(d, dtype=torch.bool)
    for k in reversed(range(FIRST)):  # the first accepted proposal wins
        safe, ok = _proposal(d, x[:, k], u[:, FIRST + k].log())
        v = torch.where(ok, safe, v)
        accepted |= ok
    return v, accepted


def _dense_second_stage(
    d: Tensor, v: Tensor, accepted: Tensor, uniforms: Uniforms, offset: int
) -> Tensor:
    """Every trial's :func:`budget` slots: the first rejected elements in index order, then
    accepted ones (kept as they are). ``d, v, accepted [R, n]`` -> ``v [R, n]``."""
    r, n = d.shape
    s = budget(n)
    # a stable argsort of `accepted` cut at s: the s smallest keys, each unique
    key = accepted.to(torch.long) * n + torch.arange(n, device=d.device)
    idx = key.topk(s, dim=1, largest=False, sorted=True).indices  # [R, s]
    k = torch.arange(2 * SECOND, device=d.device)
    pos = offset + idx[..., None] * (2 * SECOND) + k  # [R, s, 2 SECOND]
    u2 = uniforms(pos.reshape(r, -1)).reshape(r, s, 2 * SECOND)
    x2, log_u2 = _normals(u2[..., :SECOND]), u2[..., SECOND:].log()
    v2, accepted2 = _first_accepted(d.gather(1, idx)[..., None], x2, log_u2)
    kept = accepted.gather(1, idx)
    return v.scatter(1, idx, torch.where(kept, v.gather(1, idx), torch.where(accepted2, v2, 1.0)))


def _sparse_second_stage(
    d: Tensor, v: Tensor, accepted: Tensor, uniforms: Uniforms, offset: int
) -> Tensor:
    """As :func:`_dense_second_stage`, for the rejected elements within the budget only."""
    n = d.shape[1]
    rejected = ~accepted
    chosen = rejected & (rejected.cumsum(1) <= budget(n))
    rows, cols = chosen.nonzero(as_tuple=True)  # [m] each
    k = torch.arange(2 * SECOND, device=d.device)
    u2 = uniforms(offset + cols[:, None] * (2 * SECOND) + k, rows)  # [m, 2 SECOND]
    x2, log_u2 = _normals(u2[:, :SECOND]), u2[:, SECOND:].log()
    v2, accepted2 = _first_accepted(d[rows, cols, None], x2, log_u2)
    return v.index_put((rows, cols), torch.where(accepted2, v2, 1.0))


def sample_gamma(alpha: Tensor, uniforms: Uniforms, sparse: bool | None = None) -> Tensor:
    """``Gamma(alpha, 1)`` for ``alpha [R, ...] > 0`` (float64 inside, ``alpha``'s dtype out).

    Args:
        alpha: ``[R, ...]`` shapes.
        uniforms: the draw call's uniforms at given positions (:class:`Uniforms`).
        sparse: the second stage's form (the values are the same); ``None``: sparse on
            the CPU, dense elsewhere.
    """
    r = alpha.shape[0]
    a = alpha.to(torch.float64).reshape(r, -1)  # [R, n]
    n = a.shape[1]
    boost = a < 1
    d = torch.where(boost, a + 1.0, a) - 1.0 / 3.0
    width = 2 * FIRST + 1
    u = uniforms(torch.arange(width * n, device=a.device)[None]).reshape(r, width, n)
    v, accepted = _first_stage(d, u)
    if sparse is None:
        sparse = a.device.type == "cpu"
    second = _sparse_second_stage if sparse else _dense_second_stage
    v = second(d, v, accepted, uniforms, width * n)
    value = d * v
    value = torch.where(boost, value * u[:, -1] ** (1.0 / a), value)
    return value.reshape(alpha.shape).to(alpha.dtype)


__all__ = ["FIRST", "SECOND", "Uniforms", "budget", "sample_gamma"]
