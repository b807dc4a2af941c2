"""Hypentropy mirror descent on symmetric matrices kept as low-rank eigendecompositions.

docs/papers/hpg.md (HPG, paper 000). A model's *mirror iterate* is
``Theta = U diag(theta) U^T`` with ``U [..., d, k]`` (orthonormal active columns, zero
inactive ones) and ``theta [..., k]`` (zero where inactive); the policy matrix is
``W = U diag(beta sinh theta) U^T`` (same eigenvectors). Every function is batched over
any leading dimensions (trials x models), keeps static shapes and never syncs with the host.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from torchroute.functional.secular import rank_one_eigh


def mirror_map(lam: Tensor, beta: Tensor | float) -> Tensor:
    """``grad Phi_beta`` on eigenvalues: ``asinh(lambda / beta)`` (``W`` -> mirror space)."""
    return torch.asinh(lam / beta)


def inverse_mirror_map(theta: Tensor, beta: Tensor | float) -> Tensor:
    """The inverse of :func:`mirror_map`: ``beta sinh(theta)`` (mirror space -> ``W``)."""
    return beta * torch.sinh(theta)


def basis_coordinates(U: Tensor, q: Tensor) -> Tensor:
    """``q U``: the queries' coordinates in the basis, ``[..., b, k]`` for ``U [..., d, k]``
    and ``q [..., b, d]``. One read of ``U``, shared by :func:`quadratic_form` and the
    mirror step (their ``proj`` argument) when both see the same ``U`` and ``q``."""
    return q @ U


def quadratic_form(
    U: Tensor, theta: Tensor, beta: Tensor | float, q: Tensor, proj: Tensor | None = None
) -> Tensor:
    """``q^T W q = sum_i beta sinh(theta_i) (u_i^T q)^2`` in ``O(d k)``.

    Args:
        U: ``[..., d, k]`` eigenvectors.
        theta: ``[..., k]`` mirror eigenvalues.
        beta: hypentropy scale, a float or a tensor ``[...]``.
        q: ``[..., b, d]`` queries.
        proj: ``basis_coordinates(U, q)`` when already computed (then ``U`` is not read).

    Returns:
        ``[..., b]``.
    """
    proj = basis_coordinates(U, q) if proj is None else proj  # [..., b, k]
    lam = inverse_mirror_map(theta, _expand(beta, theta))  # [..., k]
    return (proj.square() * lam[..., None, :]).sum(-1)


def _expand(beta: Tensor | float, like: Tensor) -> Tensor | float:
    """``beta [...]`` -> ``[..., 1]`` to broadcast against ``like [..., k]``."""
    return beta[..., None] if isinstance(beta, Tensor) else beta


def _complement(
    U: Tensor, active: Tensor, q: Tensor, proj: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Classical Gram-Schmidt of ``q [..., b, d]`` against ``U [..., d, k]``, twice.

    ``active [..., 1, k]`` (1 on the active columns), ``proj = q U [..., b, k]``; reads
    ``U`` twice more. (Taking the norm of the complement by Pythagoras would save one of
    them, but its rounding then depends on the trial's place in the batch: a trial run
    alone must give the bits it gives among others.)

    Returns:
        ``(z [..., k, b], r [..., b, b], Q_perp [..., d, b])`` with ``q^T = U z + Q_perp r``.
    """
    z = proj * active  # [..., b, k]; row vectors (q @ U reads U faster than U^T @ q^T)
    perp = q - z @ U.transpose(-1, -2)
    z2 = (perp @ U) * active  # re-orthogonalise ("twice is enough")
    perp = (perp - z2 @ U.transpose(-1, -2)).transpose(-1, -2)  # [..., d, b]
    z = (z + z2).transpose(-1, -2)  # [..., k, b]
    if perp.shape[-1] == 1:  # one direction: its norm (QR's sign is a free choice)
        r = perp.norm(dim=-2, keepdim=True)  # [..., 1, 1]
        return z, r, perp / torch.where(r > 0, r, torch.ones_like(r))
    basis_perp, r = torch.linalg.qr(perp)  # [..., d, b], [..., b, b]
    return z, r, basis_perp


def _small_eigenproblem(
    U: Tensor, theta: Tensor, mask: Tensor, q: Tensor, c: Tensor, proj: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The ``(k + b) x (k + b)`` eigenproblem of :func:`low_rank_eig_update`.

    Reads ``U`` twice (three times without ``proj = q U``) and never writes a
    ``[..., d, k]`` tensor; the columns of ``U`` outside ``mask`` are never used (any value
    there is fine).

    Returns:
        ``(vals [..., k + b], vecs [..., k + b, k + b], Q_perp [..., d, b],
        keep [..., k + b])``: the eigenvalues (in no particular order), eigenvectors in the
        basis ``[U, Q_perp]`` (rows of inactive slots zeroed) and the eigenvalues above the
        round-off level of the update.
    """
    active = mask.to(U.dtype)[..., None, :]  # [..., 1, k]
    z, r, basis_perp = _complement(U, active, q, basis_coordinates(U, q) if proj is None else proj)
    theta = torch.where(mask, theta, torch.zeros_like(theta))
    a = torch.cat([z, r], dim=-2)  # [..., k + b, b]
    # diag(theta, 0) + sum_j c_j a_j a_j^T, one rank-one update at a time (b is a shape)
    vals = torch.cat([theta, torch.zeros_like(c)], dim=-1)  # [..., k + b]
    vecs = None
    for j in range(a.shape[-1]):
        col = a[..., j] if vecs is None else (a[..., j, None].transpose(-1, -2) @ vecs)[..., 0, :]
        vals, step = rank_one_eigh(vals, col, c[..., j])
        vecs = step if vecs is None else vecs @ step
    rows = torch.cat([mask, torch.ones_like(c, dtype=torch.bool)], dim=-1)  # [..., k + b]
    vecs = vecs.mul_(rows[..., :, None])
    eps = torch.finfo(vals.dtype).eps
    scale = vals.abs().amax(-1, keepdim=True) + (c.abs() * q.square().sum(-1)).amax(
        -1, keepdim=True
    )
    keep = vals.abs() > (4 * vals.shape[-1]) * eps * scale
    return vals, vecs, basis_perp, keep


def _rotate(U: Tensor, basis_perp: Tensor, vecs: Tensor, out: Tensor | None = None) -> Tensor:
    """``[U, basis_perp] @ vecs`` without concatenating ``U``: ``[..., d, n]`` for
    ``U [..., d, k]``, ``basis_perp [..., d, b]``, ``vecs [..., k + b, n]``.

    One read of ``U`` and one write of the result, into ``out`` when given (it must not
    overlap ``U``; a fresh tensor of that size costs its page faults every call); the
    rank-``b`` tail is added in place.
    """
    k = U.shape[-1]
    out = torch.matmul(U, vecs[..., :k, :], out=out)
    for j in range(basis_perp.shape[-1]):  # b, a shape
        out.addcmul_(basis_perp[..., :, j, None], vecs[..., k + j, None, :])
    return out


def low_rank_eig_update(
    U: Tensor, theta: Tensor, mask: Tensor, q: Tensor, c: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Eigendecomposition of ``U diag(theta) U^T + sum_j c_j q_j q_j^T`` (HPG mirror step 2).

    The updated matrix lives in the span of ``[U, Q_perp]`` with ``Q_perp`` an orthonormal
    basis of the part of the ``q_j`` orthogonal to ``U`` (classical Gram-Schmidt twice,
    then QR, or a normalisation for ``b = 1``). In that basis it is the small matrix
    ``S = diag(theta) + A diag(c) A^T`` with ``A = [U^T Q; R]``, diagonalised by ``eigh``
    in ``O((k + b)^3)``; the new basis is ``[U, Q_perp] V`` (``O(d (k + b)^2)``). Never a
    ``d x d`` eigendecomposition. Directions with negligible ``rho`` (``q`` already in the
    span, always the case at full rank) give eigenvalues at round-off level, which leave the
    active set (the exact value there is zero).

    Args:
        U: ``[..., d, k]``, orthonormal on the active columns (any value elsewhere).
        theta: ``[..., k]`` eigenvalues (ignored where inactive).
        mask: ``[..., k]`` bool, the active columns.
        q: ``[..., b, d]`` update directions.
        c: ``[..., b]`` coefficients (any sign).

    Returns:
        ``(U' [..., d, k + b], theta' [..., k + b], mask' [..., k + b])``, inactive entries
        zeroed; the ``k + b`` slots are in ascending eigenvalue order (not compacted).
    """
    vals, vecs, basis_perp, keep = _small_eigenproblem(U, theta, mask, q, c)
    vals, perm = vals.sort(-1)
    keep = keep.gather(-1, perm)
    vecs = vecs.gather(-1, perm[..., None, :].expand_as(vecs)) * keep[..., None, :]
    new_theta = torch.where(keep, vals, torch.zeros_like(vals))
    return _rotate(U, basis_perp, vecs), new_theta, keep


def projected_eig_step(
    U: Tensor,
    theta: Tensor,
    mask: Tensor,
    q: Tensor,
    c: Tensor,
    project: Callable[[Tensor], Tensor],
    capacity: int,
    proj: Tensor | None = None,
    out: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`low_rank_eig_update`, a projection of the eigenvalues, then :func:`compact`,
    with the projection and the compaction done on the small eigenproblem: ``U`` is read
    three times (twice with ``proj``) and the new basis written once
    (``[U, Q_perp] V_kept``).

    Args:
        U: ``[..., d, k]`` eigenvectors (any value in inactive columns).
        theta: ``[..., k]`` eigenvalues.
        mask: ``[..., k]`` bool, the active slots.
        q: ``[..., b, d]`` update directions.
        c: ``[..., b]`` their coefficients.
        project: ``[..., k + b] -> [..., k + b]`` on the eigenvalues (zeros stay zero).
        capacity: the slots kept.
        proj: ``q U [..., b, k]`` (:func:`basis_coordinates`) when the caller has it already.
        out: ``[..., d, capacity]``, written with the new basis and returned (it must not
            overlap ``U``); a new tensor when ``None``.

    Returns:
        ``(U [..., d, capacity], theta [..., capacity], mask [..., capacity], dropped [...])``
        as :func:`compact`; inactive slots are zero in ``U`` and ``theta``.
    """
    vals, vecs, basis_perp, keep = _small_eigenproblem(U, theta, mask, q, c, proj)
    new_theta = project(torch.where(keep, vals, torch.zeros_like(vals)))
    keep = keep & (new_theta != 0)
    idx, new_theta, new_mask, dropped = _top_slots(new_theta, keep, capacity)
    kept = vecs.gather(-1, idx[..., None, :].expand(*vecs.shape[:-1], capacity))
    kept = kept * new_mask[..., None, :].to(kept.dtype)
    new_theta = torch.where(new_mask, new_theta, torch.zeros_like(new_theta))
    return _rotate(U, basis_perp, kept, out), new_theta, new_mask, dropped


def rank_one_eig_update(
    U: Tensor, theta: Tensor, mask: Tensor, q: Tensor, c: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Eigendecomposition of ``U diag(theta) U^T + c q q^T`` (HPG mirror step 2).

    Args:
        U: ``[..., d, k]`` eigenvectors.
        theta: ``[..., k]`` eigenvalues (zero where inactive).
        mask: ``[..., k]`` bool, the active columns.
        q: ``[..., d]`` the update direction.
        c: ``[...]`` its coefficient (any sign).

    Returns:
        ``(U' [..., d, k + 1], theta' [..., k + 1], mask' [..., k + 1])``; see
        :func:`low_rank_eig_update` (this is its ``b = 1`` case).
    """
    return low_rank_eig_update(U, theta, mask, q[..., None, :], c[..., None])


def nuclear_projection(theta: Tensor, tau: Tensor | float, beta: Tensor | float) -> Tensor:
    """Bregman (hypentropy) projection onto ``{W : ||W||_* <= tau}`` on eigenvalues (step 3).

    The soft-threshold in mirror space ``theta'_i = sign(theta_i) max(|theta_i| - nu, 0)``
    with ``nu = 0`` when ``sum_i beta sinh|theta_i| <= tau`` and otherwise the unique
    ``nu > 0`` with ``sum_i beta sinh(max(|theta_i| - nu, 0)) = tau``. For the ``j``
    largest ``|theta|`` the closed form is ``e^nu = E+ / (C + sqrt(C^2 + E+ E-))``
    (``E+-`` = sums of ``exp(+-|theta|)``, ``C = tau / beta``), evaluated in log space; the
    right ``j`` is the largest with ``|theta|_(j) > nu_j``. Zeros stay zero.

    Args:
        theta: ``[..., k]`` mirror eigenvalues.
        tau: radius, ``> 0`` (float or ``[...]``).
        beta: hypentropy scale, ``> 0`` (float or ``[...]``).

    Returns:
        ``[..., k]`` projected mirror eigenvalues.
    """
    a = theta.abs()
    sorted_a, _ = a.sort(dim=-1, descending=True)  # [..., k]
    log_ep = torch.logcumsumexp(sorted_a, dim=-1)
    log_em = torch.logcumsumexp(-sorted_a, dim=-1)
    log_c = torch.log(torch.as_tensor(tau, dtype=theta.dtype, device=theta.device)) - torch.log(
        torch.as_tensor(beta, dtype=theta.dtype, device=theta.device)
    )
    log_c = log_c[..., None] if log_c.ndim else log_c
    # log(C + sqrt(C^2 + E+ E-)) in log space
    log_root = 0.5 * torch.logaddexp(2 * log_c, log_ep + log_em)
    nu_j = log_ep - torch.logaddexp(log_c.expand_as(log_root), log_root)  # [..., k]
    valid = sorted_a > nu_j
    idx = torch.arange(1, a.shape[-1] + 1, device=a.device)
    j = (valid * idx).amax(-1, keepdim=True)  # [..., 1], 0 if none (all zero)
    nu = nu_j.gather(-1, (j - 1).clamp_min(0)).clamp_min(0.0)
    nu = torch.where(j > 0, nu, torch.zeros_like(nu))
    return theta.sign() * (a - nu).clamp_min(0.0)


def compact(
    U: Tensor, theta: Tensor, mask: Tensor, capacity: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Keep the ``capacity`` largest ``|theta|`` slots (static shapes).

    Exact whenever at most ``capacity`` slots are active; otherwise it is the top-``k``
    truncation of docs/papers/hpg.md (an approximation), and ``dropped`` counts the lost slots.

    Args:
        U: ``[..., d, k]`` eigenvectors.
        theta: ``[..., k]`` eigenvalues.
        mask: ``[..., k]`` bool, the active slots.
        capacity: the slots kept, ``<= k``.

    Returns:
        ``(U [..., d, capacity], theta [..., capacity], mask [..., capacity], dropped [...])``.
    """
    idx, new_theta, new_mask, dropped = _top_slots(theta, mask & (theta != 0), capacity)
    new_u = U.gather(-1, idx[..., None, :].expand(*U.shape[:-1], capacity))
    return new_u, new_theta, new_mask, dropped


def _top_slots(theta: Tensor, mask: Tensor, capacity: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The ``capacity`` active slots of largest ``|theta|``: ``(idx, theta, mask)``, each
    ``[..., capacity]``, and ``dropped [...]``."""
    key = torch.where(mask, theta.abs(), torch.full_like(theta, -1.0))
    _, idx = key.topk(capacity, dim=-1)  # [..., capacity]
    new_mask = mask.gather(-1, idx)
    dropped = mask.sum(-1) - new_mask.sum(-1)
    return idx, theta.gather(-1, idx), new_mask, dropped


def mirror_step(
    U: Tensor,
    theta: Tensor,
    mask: Tensor,
    q: Tensor,
    c: Tensor,
    tau: Tensor | float,
    beta: Tensor | float,
    capacity: int,
    proj: Tensor | None = None,
    out: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One HPG round in mirror space: eigen-update, nuclear projection, compaction.

    Args:
        U: ``[..., d, capacity]`` eigenvectors.
        theta: ``[..., capacity]`` mirror eigenvalues.
        mask: ``[..., capacity]`` bool, the active slots.
        q: ``[..., b, d]`` update directions.
        c: ``[..., b]`` their coefficients.
        tau: nuclear-norm radius, a float or ``[...]``.
        beta: hypentropy scale, a float or ``[...]``.
        capacity: the slots kept after the step.
        proj: ``q U [..., b, k]`` when the caller has it already (as :func:`projected_eig_step`).
        out: ``[..., d, capacity]`` for the new basis (as :func:`projected_eig_step`).

    Returns:
        ``(U, theta, mask, dropped)`` as :func:`compact`.
    """
    return projected_eig_step(
        U,
        theta,
        mask,
        q,
        c,
        lambda vals: nuclear_projection(vals, tau, beta),
        capacity,
        proj,
        out,
    )


def dense_mirror_step(
    theta_dense: Tensor, q: Tensor, c: Tensor, tau: Tensor | float, beta: Tensor | float
) -> Tensor:
    """The reference/fallback path: a full ``d x d`` ``eigh`` per model (``O(d^3)``).

    Args:
        theta_dense: ``[..., d, d]`` symmetric mirror iterate.
        q: ``[..., b, d]`` update directions.
        c: ``[..., b]`` their coefficients.
        tau: nuclear-norm radius, a float or ``[...]``.
        beta: hypentropy scale, a float or ``[...]``.

    Returns:
        ``[..., d, d]``, the projected mirror iterate.
    """
    upd = theta_dense + (q.transpose(-1, -2) * c[..., None, :]) @ q
    vals, vecs = torch.linalg.eigh(0.5 * (upd + upd.transpose(-1, -2)))
    vals = nuclear_projection(vals, tau, beta)
    return (vecs * vals[..., None, :]) @ vecs.transpose(-1, -2)
