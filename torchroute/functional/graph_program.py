"""The SquareCB-G program (CABS Theorem D.1; Zhang et al. 2023), solved exactly and batched.

Minimise over the simplex ``V(p) = p.f + max_a [(1/gamma) sum_i (p_i - 1[i=a])^2 / (G^T p)_i
- f_a]`` (``docs/papers/cabs.md`` (CABS-C) step 3). ``V`` is invariant to shifting ``f`` and
``V(p; s f, gamma / s) = s V(p; f, gamma)``, so the solver works on the scaled losses
``f' = gamma (f - min f)`` with ``gamma' = 1`` (value ``V' = gamma V``).

Method: a batched primal-dual interior-point method (Boyd & Vandenberghe 2004, section 11.7)
in float64 on ``(p, z)`` with the ``K`` convex constraints ``h_a = g_a(p) - f'_a - z <= 0``
(multipliers ``lambda``), ``p >= 0`` (multipliers ``s``) and ``1^T p = 1``, every instance
with its own steps, from ``p = lambda = 1/K``, ``z`` one above the largest ``g_a - f'_a`` and
``s`` that makes the dual residual constant:

* Newton system. With ``w = G^T p`` the Jacobian of ``g`` is ``1 c^T - M``,
  ``M = diag(2/w) + diag((1 - 2p)/w^2) G^T``, and each term of ``sum_a lambda_a g_a``
  depends on ``(p_i, w_i)`` only, so its Hessian is ``T^T Q T`` with ``T = [I; G^T]`` and
  ``Q`` block-diagonal (``2 x 2`` per arm). Eliminating the multipliers and writing
  ``dz - c.dp`` for ``dz`` (``z`` absorbs the ``1 c^T`` part) leaves one symmetric
  positive-definite ``(K + 1) x (K + 1)`` system, built with one batched matrix product and
  solved by Cholesky; a second right-hand side enforces ``1^T dp = 0``.
* Centring ``sigma = 0.1`` (``0.03`` after a full step); the target complementarity never
  drops below ``0.3 tol max(gamma, |V'(p)|) / (2K)``: pushing the gap far below the
  tolerance only makes the eliminated multipliers inaccurate (and the certificate loose).
* Second-order correction: the curvature of ``h`` that the linear model misses at the
  longest step re-enters the complementarity target and is solved with the same factor; the
  iteration takes whichever of the two directions goes further.
* Step length: fraction to the boundary for ``p``, the multipliers and ``s``; then ``-h``
  must stay above 1% of its current value. ``-h`` is concave along the line and ``w`` is
  linear in ``p``, so the chord from 0 to each of a few trial steps (``O(K)`` each) has a
  feasible root; the longest root is taken.
* Certificate. For ``lambda`` in the simplex, ``phi(q) = q.f' + sum_a lambda_a (g_a(q) -
  f'_a) <= V'(q)`` and, by convexity, ``min_q phi >= phi(p) + min_i dphi_i - p.dphi`` over
  the simplex; so ``V'(p)`` minus that bound at the current iterate bounds ``V'(p) - V'*``. An
  instance stops once that is ``<= tol max(gamma, |V'(p)|)``, i.e. ``V(p) - V* <= tol
  max(1, |V(p)|)``.

On the CPU, for ``K <= 32``, the iterations run by default in C++, one instance per work
item (:mod:`torchroute.functional.graph_kernel`: same iteration, the same stopping rule,
results equal to rounding); the eager torch path below is the reference and the fallback
(other devices, larger ``K``, no compiler, ``kernel="torch"``).

On the CPU the eager path's finished instances leave the batch (a host read is free
there); on other devices the batch keeps its shape, finished instances are frozen and a
batch-level flag is read every other iteration. Its iterations run under
``torch.inference_mode`` (the solver is not differentiated; the result is an ordinary
tensor without gradient) and, on the CPU, on one intra-op thread
(:func:`torchroute.functional.threads.single_threaded`): every operator here is small, and
splitting each over threads costs a fork-join that a busy machine turns into a stall.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import torch
from torch import Tensor

from torchroute.functional.graph_kernel import fused_solver_available, graph_squarecb_fused
from torchroute.functional.ridge_kernel import kernel_library
from torchroute.functional.threads import single_threaded

#: centring: each Newton step targets ``sigma`` times the mean complementarity
_SIGMA = 0.1
#: ... and this after a full step (``alpha >= _FULL``)
_SIGMA_FULL = 0.03
_FULL = 0.99
#: fraction to the boundary for ``p``, the multipliers and ``s``
_ETA = 0.99
#: floor of the complementarity target, as a fraction of the stopping threshold
_FLOOR = 0.3
#: trial fractions of the longest step for the chord line search
_TRIALS = (1.0, 0.7, 0.4, 0.1)


def _check(losses: Tensor, graph: Tensor, gamma: float | Tensor) -> tuple[Tensor, Tensor]:
    k = losses.shape[-1] if losses.ndim else 0
    if losses.ndim < 1 or k < 1:
        raise ValueError(f"losses must be [..., K] with K >= 1, got {tuple(losses.shape)}")
    if graph.shape[-2:] != (k, k):
        raise ValueError(f"graph must be [..., K, K] = [..., {k}, {k}], got {tuple(graph.shape)}")
    try:
        lead = torch.broadcast_shapes(losses.shape[:-1], graph.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"graph leading shape {tuple(graph.shape[:-2])} does not broadcast with losses "
            f"{tuple(losses.shape[:-1])}"
        ) from None
    gamma_t = torch.as_tensor(gamma, dtype=torch.float64, device=losses.device)
    try:
        lead = torch.broadcast_shapes(lead, gamma_t.shape)
    except RuntimeError:
        raise ValueError(
            f"gamma must be a float or a [...] tensor matching {tuple(lead)}, got "
            f"{tuple(gamma_t.shape)}"
        ) from None
    if losses.device.type == "cpu":  # a host check costs nothing here; elsewhere stay async
        if not bool(torch.isfinite(losses).all()):
            raise ValueError("losses must be finite (got NaN or inf)")
        if not bool((gamma_t > 0).all() & torch.isfinite(gamma_t).all()):
            raise ValueError(f"gamma must be finite and > 0, got {gamma}")
    else:
        torch._assert_async(torch.isfinite(losses).all(), "losses must be finite")
        torch._assert_async((gamma_t > 0).all(), "gamma must be > 0")
    return gamma_t.expand(lead), torch.Size(lead)


def graph_squarecb_value(
    probs: Tensor, losses: Tensor, graph: Tensor, gamma: float | Tensor
) -> Tensor:
    """The exact objective ``V(p)`` of the SquareCB-G program (``0/0 = 0``, ``u^2/0 = inf``).

    Args:
        probs: ``[..., K]`` distributions.
        losses: ``[..., K]`` predicted losses ``f``.
        graph: ``[..., K, K]`` bool, ``graph[..., i, j]`` iff playing ``i`` reveals ``j``
            (the diagonal is treated as true).
        gamma: float or ``[...]``.

    Returns:
        ``V [...]`` in float64.
    """
    k = losses.shape[-1]
    eye = torch.eye(k, dtype=torch.bool, device=losses.device)
    g = (graph.bool() | eye).to(torch.float64)
    p = probs.to(torch.float64)
    w = (p[..., None, :] @ g)[..., 0, :]  # [..., K]
    u = p[..., None, :] - eye.to(torch.float64)  # [..., K(a), K(i)]
    ww = w[..., None, :].expand_as(u)
    terms = torch.where(u == 0, 0.0, u * u / ww)
    gam = torch.as_tensor(gamma, dtype=torch.float64, device=losses.device)[..., None]
    f = losses.to(torch.float64)
    return (p * f).sum(-1) + (terms.sum(-1) / gam - f).amax(-1)


def graph_squarecb_probs(
    losses: Tensor,
    graph: Tensor,
    gamma: float | Tensor,
    max_iter: int = 50,
    tol: float = 1e-7,
    compact: bool | None = None,
    kernel: str = "auto",
) -> Tensor:
    """Minimiser of the SquareCB-G program over the simplex, batched (CABS Theorem D.1).

    ``argmin_p p.f + max_a [(1/gamma) sum_i (p_i - 1[i=a])^2 / (G^T p)_i - f_a]``, i.e. the
    convex program of ``docs/papers/cabs.md`` (CABS-C) step 3 with ``z`` the inner max.

    Each instance stops once its certificate ``V(p) - V* <= tol * max(1, |V(p)|)`` holds
    (module docstring), or after ``max_iter`` interior-point iterations (about 10-20 are
    typical). Not differentiable: the result carries no gradient.

    Args:
        losses: ``[..., K]`` predicted losses (any finite reals).
        graph: ``[..., K, K]`` bool (broadcast against ``losses``); the diagonal is treated
            as true.
        gamma: float or ``[...]`` tensor, ``> 0``.
        max_iter: iteration budget.
        tol: certified relative accuracy of the value ``V``.
        compact: eager path: drop finished instances from the batch (one host read per
            iteration); ``None``: on the CPU only. Otherwise the batch keeps its shape, finished
            instances are frozen and a batch-level flag is read every other iteration.
        kernel: ``"auto"``: the fused C++ iteration
            (:mod:`torchroute.functional.graph_kernel`) for CPU tensors with ``K <= 32``
            when the extension can be built or loaded (else, with one warning per process,
            the eager path), the eager torch path otherwise; ``"torch"``: always the eager
            path; ``"fused"``: the C++ iteration or a one-line
            :class:`~torchroute.functional.ridge_kernel.KernelUnavailableError`. The two
            paths agree to rounding.

    Returns:
        ``probs [..., K]`` on the simplex, in the dtype of ``losses``.

    Example:
        >>> f = torch.tensor([0.1, 0.5, 0.9])
        >>> graph_squarecb_probs(f, torch.eye(3, dtype=torch.bool), 4.0).sum()
        tensor(1.)
    """
    gamma_t, lead = _check(losses, graph, gamma)
    k = losses.shape[-1]
    if kernel not in ("auto", "torch", "fused"):
        raise ValueError(f"kernel must be 'auto', 'torch' or 'fused', got {kernel!r}")
    if kernel == "fused":
        if losses.device.type != "cpu":
            raise ValueError(f"kernel='fused' runs on the CPU, got {losses.device}")
        kernel_library()  # the one-line KernelUnavailableError
    fused = kernel == "fused" or (kernel == "auto" and fused_solver_available(losses.device, k))
    # No autograd bookkeeping on the many small ops, and on the CPU no fork-join per op (one
    # intra-op thread, restored after: torchroute.functional.threads).
    # (The fused path splits instances over the threads itself, one fork-join per call.)
    threads = contextlib.nullcontext() if fused else single_threaded(losses.device)
    with torch.inference_mode(), threads:
        p = _solve(losses, graph, gamma_t, lead, max_iter, tol, compact, fused)
    return p.clone()  # a normal tensor again


def _solve(
    losses: Tensor,
    graph: Tensor,
    gamma_t: Tensor,
    lead: torch.Size,
    max_iter: int,
    tol: float,
    compact: bool | None,
    fused: bool = False,
) -> Tensor:
    """The body of :func:`graph_squarecb_probs` after the input checks."""
    k = losses.shape[-1]
    dev = losses.device
    f = losses.to(torch.float64).expand(*lead, k).reshape(-1, k)
    n = f.shape[0]
    if k == 1 or n == 0:
        return torch.ones_like(losses).expand(*lead, k).clone()
    eye = torch.eye(k, dtype=torch.bool, device=dev)
    gm = (graph.bool() | eye).to(torch.float64).expand(*lead, k, k).reshape(n, k, k)
    gt = gm.transpose(1, 2).contiguous()
    scale = tol * gamma_t.reshape(n)
    f = gamma_t.reshape(n, 1) * (f - f.amin(-1, keepdim=True))  # f' = gamma (f - min f)
    if fused:
        p = graph_squarecb_fused(f, gm, scale, tol, max_iter)
        p = p.clamp_min(0.0)
        p = p / p.sum(-1, keepdim=True)
        return p.reshape(*lead, k).to(losses.dtype)
    x = _start(f, gm)
    consts = _Consts(
        torch.tensor(_TRIALS, dtype=torch.float64, device=dev),
        torch.eye(k + 1, dtype=torch.float64, device=dev)[:k].sum(0),  # [1, ..., 1, 0]
        tol,
    )
    if not (dev.type == "cpu" if compact is None else compact):  # fixed shapes
        done = torch.zeros(n, dtype=torch.bool, device=dev)
        for it in range(max_iter):
            x, now = _step(x, f, gm, gt, scale, consts, done)
            done = done | now
            if it % 2 == 1 and bool(done.all()):
                break
        p = x[:, :k]
    else:  # compaction: finished instances leave the batch
        p = x[:, :k].clone()
        idx = torch.arange(n, device=dev)
        for _ in range(max_iter):
            x_new, done = _step(x, f, gm, gt, scale, consts, None)
            if bool(done.any()):
                p[idx[done]] = x[done, :k]
                keep = (~done).nonzero()[:, 0]
                if keep.numel() == 0:
                    break
                idx, x, f, gm, gt, scale = (t[keep] for t in (idx, x_new, f, gm, gt, scale))
            else:
                x = x_new
        else:
            p[idx] = x[:, :k]
    p = p.clamp_min(0.0)
    p = p / p.sum(-1, keepdim=True)
    return p.reshape(*lead, k).to(losses.dtype)


class _Consts(NamedTuple):
    trials: Tensor  # [S] trial fractions of the longest step
    ones: Tensor  # [K + 1]: 1 on the p rows, 0 on the z row
    tol: float


def _start(f: Tensor, gm: Tensor) -> Tensor:
    """Initial state ``x = [p, lambda, s, w, z, alpha] [N, 4K + 2]``.

    ``p`` and ``lambda`` uniform, ``z`` one above the largest ``g_a - f'_a``, ``s`` making
    the dual residual ``f' + J^T lambda - s`` constant plus ``mean(lambda (-h)) / p``,
    ``w = G^T p``, previous step 0.
    """
    n, k = f.shape
    p = f.new_full((n, k), 1.0 / k)
    lam = p.clone()
    w = torch.bmm(p[:, None], gm)[:, 0]
    r = p / w
    omw = (1 - 2 * p) / w
    gf = (p * r).sum(-1, keepdim=True) + omw - f
    z = gf.amax(-1, keepdim=True) + 1.0
    gv = torch.bmm(torch.stack([r * r, omw / w * lam], 1), gm.mT)  # G [r^2, coef lambda]
    grad = f + 2 * r - gv[:, 0] - 2 * lam / w - gv[:, 1]  # f' + J^T lambda
    s = grad - grad.amin(-1, keepdim=True) + (lam * (z - gf)).mean(-1, keepdim=True) / p
    return torch.cat([p, lam, s, w, z, torch.zeros_like(z)], -1)


def _step(
    x: Tensor,
    f: Tensor,
    gm: Tensor,
    gt: Tensor,
    scale: Tensor,
    consts: _Consts,
    frozen: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """One interior-point iteration on ``x = [p, lambda, s, w, z, alpha] [N, 4K + 2]``.

    ``f [N, K]`` scaled losses, ``gm``/``gt [N, K, K]`` the graph and its transpose,
    ``scale [N] = tol gamma``. Returns the new state and ``done [N]``: the certificate holds
    at the current point (those instances, and ``frozen`` ones, do not move).
    """
    n, k = f.shape
    p, lam, s, w, z, last = x.split([k, k, k, k, 1, 1], -1)
    iw, ip = w.reciprocal(), p.reciprocal()
    r = p * iw
    omw = torch.rsub(r, iw, alpha=2.0)  # (1 - 2p) / w
    coef = omw * iw
    gf = (omw - f).add_((p * r).sum(-1, keepdim=True))  # g - f'
    u = z - gf  # -h > 0
    iu = u.reciprocal()
    d = lam * iu
    big = lam.sum(-1, keepdim=True)
    cols = torch.stack([r, lam, d, iu], 1).mul_(torch.stack([r, coef, coef, coef], 1))
    r2, cl, cd, _ = cols.unbind(1)
    g_r2, g_cl, g_cd, g_cu = torch.bmm(cols, gt).unbind(1)  # G applied to each row of cols
    c = torch.add(r, r).sub_(g_r2)
    bc = big * c
    jl = bc - torch.addcmul(g_cl, lam, iw, value=2.0)  # J^T lambda
    # Certificate (module docstring) with lambda / sum(lambda):
    # V'(p) - lower bound = sum_a lambda_a (max g - f' - (g_a - f'_a)) + p.dphi - min dphi.
    grad = f + jl / big  # dphi
    gmax = gf.amax(-1, keepdim=True)
    cert = ((gmax - gf) * lam).sum(-1, keepdim=True) / big
    cert = cert + ((grad - grad.amin(-1, keepdim=True)) * p).sum(-1, keepdim=True)
    vp = (p * f).sum(-1, keepdim=True) + gmax  # V'(p)
    thr = torch.maximum(scale[:, None], consts.tol * vp.abs())
    done = (cert <= thr)[:, 0]
    # Newton matrix on (dp, dz - c.dp): B = diag(a) + 2 (Y + Y^T) + G diag(e) G^T with
    # Y = diag(q) G^T, bordered by m = 2 d / w + G (coef d) and sum(d).
    sp = s * ip
    m = torch.addcmul(g_cd, d, iw, value=2.0)
    y = torch.addcmul(cd - big * r, lam, iw).mul_(iw)[:, :, None] * gt
    e = torch.addcmul(coef * cd, iw, torch.addcmul(cl, big, r2), value=2.0)
    mat = torch.baddbmm(y + y.mT, gm * e[:, None], gt, beta=2.0)
    mat.diagonal(0, -2, -1).add_(
        torch.addcmul(sp, iw, big, value=2.0).addcmul_(d, iw * iw, value=4.0)
    )
    mat = torch.cat(
        [torch.cat([mat, m[:, :, None]], -1), torch.cat([m, d.sum(-1, keepdim=True)], -1)[:, None]],
        1,
    )
    chol, info = torch.linalg.cholesky_ex(mat, upper=True)  # upper: skips a transpose
    sigma = torch.where(last >= _FULL, _SIGMA_FULL / (2 * k), _SIGMA / (2 * k))
    tau = sigma * ((lam * u).sum(-1, keepdim=True) + (s * p).sum(-1, keepdim=True))
    tau = torch.maximum(tau, thr * (_FLOOR / (2 * k)))
    rhs_p = torch.addcmul(g_cu + ip, iu, iw, value=2.0).mul_(tau).sub_(f).sub_(bc)
    rhs_z = torch.addcmul(-big, tau, iu.sum(-1, keepdim=True))
    rhs = torch.stack([torch.cat([rhs_p, rhs_z], -1), consts.ones.expand(n, k + 1)], -1)
    sol, unit = torch.cholesky_solve(rhs, chol, upper=True).unbind(-1)
    unit = unit / unit[:, :k].sum(-1, keepdim=True)  # removes the 1^T dp component

    def direction(sol: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(dp, dw = G^T dp, du = -dh, dz)`` from a solution in ``(dp, dz - c.dp)``."""
        sol = torch.addcmul(sol, unit, sol[:, :k].sum(-1, keepdim=True), value=-1.0)
        dp, dzc = sol.split([k, 1], -1)
        dw = torch.bmm(dp[:, None], gm)[:, 0]
        du = torch.addcmul(torch.addcmul(dzc, coef, dw), dp, iw, value=2.0)
        return dp, dw, du, (c * dp).sum(-1, keepdim=True) + dzc

    dp, dw, du, dz = direction(sol)
    dlam = torch.addcmul(tau * iu - lam, d, du, value=-1.0)
    delta = torch.cat([dp, dlam, torch.addcmul(tau * ip - s, sp, dp, value=-1.0), dw, dz], -1)
    # Second-order correction: the curvature of h that the linear model misses at the
    # longest step ``at`` enters the complementarity target (same factorisation).
    at = _longest(x, delta, k)
    pt = torch.addcmul(p, at, dp)
    iwt = torch.addcmul(w, at, dw).reciprocal_()
    rt = pt * iwt
    ut = torch.addcmul(z, at, dz).sub_((pt * rt).sum(-1, keepdim=True))
    ut = torch.sub(f, torch.rsub(rt, iwt, alpha=2.0)).add_(ut)  # -h at the longest step
    v2 = (torch.addcmul(u, at, du) - ut).mul_(d).div_(at)
    g_v2 = torch.bmm((coef * v2)[:, None], gt)[:, 0]
    rhs2 = torch.cat([torch.addcmul(g_v2, v2, iw, value=2.0), v2.sum(-1, keepdim=True)], -1)
    dp2, dw2, du2, dz2 = direction(torch.cholesky_solve(rhs2[:, :, None], chol, upper=True)[..., 0])
    delta2 = torch.cat([dp2, torch.addcmul(v2, d, du2, value=-1.0), -sp * dp2, dw2, dz2], -1)
    delta2 = delta2.add_(delta)
    # Line search on both directions: chords of the concave -h from 0 to each trial step.
    both = torch.stack([delta, delta2], 1)  # [N, 2, 4K + 1]
    trial = torch.stack([at, _longest(x, delta2, k)], 1) * consts.trials  # [N, 2, S]
    dpb, _, _, dwb, dzb = both[:, :, None].split([k, k, k, k, 1], -1)
    p3, _, _, w3, z3, _ = x[:, None, None].split([k, k, k, k, 1, 1], -1)
    t4 = trial[..., None]
    pc = torch.addcmul(p3, t4, dpb)
    iwc = torch.addcmul(w3, t4, dwb).reciprocal_()
    rc = pc * iwc
    uc = torch.addcmul(z3, t4, dzb).sub_(torch.linalg.vecdot(pc, rc)[..., None])
    # -h must stay >= 1% of its current value u: excess = min(0, u(t) - u / 100) <= 0
    bound, f_min = torch.stack([0.99 * u, f - 0.01 * u], 1)[:, :, None, None].unbind(1)
    excess = torch.sub(f_min, torch.rsub(rc, iwc, alpha=2.0)).add_(uc).clamp_(max=0.0)
    alpha = (trial * (bound / (bound - excess)).amin(-1)).amax(-1)  # [N, 2]
    pick = alpha[:, 1:] > alpha[:, :1]
    alpha = torch.where(pick, alpha[:, 1:], alpha[:, :1])
    move = (alpha > 0) & (info == 0)[:, None]
    if frozen is not None:
        move &= ~(frozen | done)[:, None]
    alpha = torch.where(move, alpha, 0.0)
    new = torch.addcmul(x[:, : 4 * k + 1], alpha, torch.where(pick, delta2, delta))
    return torch.cat([torch.where(move, new, x[:, : 4 * k + 1]), alpha], -1), done


def _longest(x: Tensor, delta: Tensor, k: int) -> Tensor:
    """``min(1, eta alpha_max) [N, 1]``, ``alpha_max`` keeping ``p, lambda, s`` positive."""
    worst = (delta[:, : 3 * k] / x[:, : 3 * k]).amin(-1, keepdim=True)
    return -_ETA / worst.clamp(max=-_ETA)
