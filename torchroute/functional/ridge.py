"""Batched ridge regression per arm, kept as an inverse Gram matrix (Sherman–Morrison).

State for ``R`` trials and ``K`` arms: ``A_inv [R, K, d, d]`` (the inverse of
``lambda I + sum w x x^T``) and ``theta [R, K, d]`` (``= A_inv b``). ``theta`` is updated
together with ``A_inv`` so that predictions never solve a system.
"""

from __future__ import annotations

import torch
from torch import Tensor


def ridge_init(
    num_trials: int,
    num_arms: int,
    dim: int,
    lam: float,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor]:
    """Prior state: ``A_inv = I / lam`` ``[R, K, d, d]`` and ``theta = 0`` ``[R, K, d]``."""
    if lam <= 0:
        raise ValueError(f"ridge lambda must be > 0, got {lam}")
    eye = torch.eye(dim, dtype=dtype, device=device) / lam
    a_inv = eye.expand(num_trials, num_arms, dim, dim).clone()
    theta = torch.zeros(num_trials, num_arms, dim, dtype=dtype, device=device)
    return a_inv, theta


def ridge_predict(theta: Tensor, x: Tensor) -> Tensor:
    """Point predictions ``x^T theta_k``: theta ``[R, K, d]``, x ``[R, B, d]`` -> ``[R, B, K]``."""
    return torch.einsum("rkd,rbd->rbk", theta, x)


def ridge_width(a_inv: Tensor, x: Tensor) -> Tensor:
    """Confidence widths ``sqrt(x^T A_k^{-1} x)``: ``[R, K, d, d]``, ``[R, B, d]`` -> ``[R, B, K]``.

    One pass over ``A_inv`` (a batched matrix product), the memory-bound part of LinUCB.
    """
    r, k, d, _ = a_inv.shape
    b = x.shape[1]
    # [R, K*d, d] @ [R, d, B] reads every A_k once for all B contexts (the fastest of the
    # forms compared in benchmarks/linucb_throughput.py).
    ax = torch.bmm(a_inv.reshape(r, k * d, d), x.transpose(1, 2)).reshape(r, k, d, b)
    quad = torch.einsum("rkdb,rbd->rbk", ax, x)
    return quad.clamp_min(0.0).sqrt()


def sherman_morrison(
    a_inv: Tensor, theta: Tensor, x: Tensor, y: Tensor, w: Tensor
) -> tuple[Tensor, Tensor]:
    """One weighted observation per matrix: ``A <- A + w x x^T``, ``b <- b + w y x``.

    ``A_inv' = A_inv - (A_inv x)(A_inv x)^T / (1/w + x^T A_inv x)`` and
    ``theta' = theta + w A_inv' x (y - x^T theta)``. Rows with ``w = 0`` are unchanged.

    Args:
        a_inv: ``[..., d, d]`` symmetric inverse Gram matrices.
        theta: ``[..., d]``.
        x: ``[..., d]`` features.
        y: ``[...]`` targets.
        w: ``[...]`` non-negative sample weights.

    Returns:
        ``(a_inv', theta')`` with the input shapes.
    """
    ax, u, theta_step = _sherman_morrison_terms(a_inv, theta, x, y, w)
    # One fused pass a_inv - u ax^T: addcmul broadcasts the outer product without
    # materialising it (see benchmarks/linucb_throughput.py for the alternatives timed).
    a_inv_new = torch.addcmul(a_inv, u[..., :, None], ax[..., None, :], value=-1.0)
    return a_inv_new, theta + theta_step


def _sherman_morrison_terms(
    a_inv: Tensor, theta: Tensor, x: Tensor, y: Tensor, w: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``(A_inv x, w A_inv x / (1 + w x^T A_inv x), theta' - theta)``, all ``[..., d]``."""
    ax = torch.matmul(a_inv, x[..., None])[..., 0]  # [..., d]; one read of a_inv (bmm)
    denom = 1.0 + w * (ax * x).sum(-1)  # w (1/w + x^T A_inv x)
    scale = w / denom
    residual = y - (theta * x).sum(-1)
    # A_inv' x = A_inv x / (1 + w x^T A_inv x)
    theta_step = (scale * residual)[..., None] * ax
    return ax, scale[..., None] * ax, theta_step


def sherman_morrison_shared(
    a_inv: Tensor, theta: Tensor, x: Tensor, y: Tensor
) -> tuple[Tensor, Tensor]:
    """:func:`sherman_morrison` for ``K`` models that share one inverse Gram matrix.

    With full feedback every model (arm) of a trial sees the same context with weight 1, so
    their Gram matrices stay equal and only ``b_k`` differs: the shared matrix is updated
    once (one ``d x d`` read instead of ``K``), each ``theta_k`` with its own target. The
    operations are those of :func:`sherman_morrison` on the ``K`` copies (the same numbers,
    broadcast), so the result is theirs.

    Args:
        a_inv: ``[..., 1, d, d]`` the shared inverse Gram matrix.
        theta: ``[..., K, d]``.
        x: ``[..., 1, d]`` the context every model sees.
        y: ``[..., K]`` each model's target (weight 1 each).

    Returns:
        ``(a_inv' [..., 1, d, d], theta' [..., K, d])``.
    """
    w = torch.ones_like(y)
    ax, u, theta_step = _sherman_morrison_terms(a_inv, theta, x, y, w)  # ax [..., 1, d]
    u = u[..., :1, :]  # the K rows are equal
    a_inv_new = torch.addcmul(a_inv, u[..., :, None], ax[..., None, :], value=-1.0)
    return a_inv_new, theta + theta_step


def sherman_morrison_(a_inv: Tensor, theta: Tensor, x: Tensor, y: Tensor, w: Tensor) -> None:
    """In-place :func:`sherman_morrison`: overwrites ``a_inv [..., d, d]`` and ``theta [..., d]``.

    Same arguments and result as :func:`sherman_morrison`. The bandit update applies it to a
    gathered copy of the played arms' matrices, which then stays in the last-level cache
    between the matrix-vector product and the rank-one update instead of a second,
    freshly allocated ``[..., d, d]`` being written.
    """
    ax, u, theta_step = _sherman_morrison_terms(a_inv, theta, x, y, w)
    a_inv.addcmul_(u[..., :, None], ax[..., None, :], value=-1.0)
    theta.add_(theta_step)


def woodbury(
    a_inv: Tensor, theta: Tensor, x: Tensor, y: Tensor, w: Tensor
) -> tuple[Tensor, Tensor]:
    """A batch of ``B`` weighted observations per matrix at once (Woodbury identity).

    ``A' = A + X^T W X``; with ``Z = W^{1/2} X``:
    ``A_inv' = A_inv - A_inv Z^T (I + Z A_inv Z^T)^{-1} Z A_inv`` and
    ``theta' = A_inv' (b + X^T W y)``, computed as ``theta + A_inv' X^T W (y - X theta)``.

    Args:
        a_inv: ``[..., d, d]`` the inverse design matrix.
        theta: ``[..., d]`` the ridge estimate.
        x: ``[..., B, d]`` the new contexts.
        y: ``[..., B]`` their targets.
        w: ``[..., B]`` their weights (0 drops an observation).

    Returns:
        ``(a_inv', theta')``. For ``B = 1`` this equals :func:`sherman_morrison`.
    """
    if x.shape[-2] == 1:
        return sherman_morrison(a_inv, theta, x[..., 0, :], y[..., 0], w[..., 0])
    z = w.sqrt()[..., None] * x  # [..., B, d]
    az = torch.einsum("...ij,...bj->...bi", a_inv, z)  # [..., B, d] = (A_inv Z^T)^T
    eye = torch.eye(z.shape[-2], dtype=z.dtype, device=z.device)
    gram = eye + torch.einsum("...bi,...ci->...bc", z, az)  # [..., B, B]
    a_inv_new = a_inv - az.transpose(-1, -2) @ torch.linalg.solve(gram, az)
    residual = w * (y - torch.einsum("...bd,...d->...b", x, theta))  # [..., B]
    theta_new = theta + torch.einsum(
        "...ij,...j->...i", a_inv_new, torch.einsum("...bd,...b->...d", x, residual)
    )
    return a_inv_new, theta_new
