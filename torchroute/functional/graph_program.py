"""The SquareCB-G program (CABS Theorem D.1; Zhang et al. 2023), solved exactly and batched.

Minimise over the simplex ``V(p) = p.f + max_a [(1/gamma) sum_i (p_i - 1[i=a])^2 / (G^T p)_i
- f_a]`` (``ALGORITHMS.md`` section 4 step 3). ``V`` is invariant to shifting ``f`` and
``V(p; s f, gamma / s) = s V(p; f, gamma)``, so the solver works on the scaled losses
``f' = gamma (f - min f)`` with ``gamma' = 1`` and maps the value back. It runs a batched
primal-dual interior-point method (Boyd & Vandenberghe 2004, section 11.7) on the ``K + 1``
variables ``(p, z)`` with the ``K`` convex constraints ``g_a(p) - f'_a - z <= 0``, the ``K``
bounds ``p >= 0`` and ``1^T p = 1``; every instance takes its own Newton steps and its own
backtracking line search (candidate steps evaluated at once), in float64.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: candidate step sizes of the batched backtracking line search: ``0.99 alpha_max 2^-k``
_MU = 10.0
_STEPS = 0.5 ** torch.arange(8, dtype=torch.float64)


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


def _observe(p: Tensor, graph: Tensor) -> Tensor:
    """``w = G^T p``: ``w_i = sum_j G[j, i] p_j``; ``p [..., K]``, ``graph [..., K, K]``."""
    return (p[..., :, None] * graph).sum(-2)  # elementwise: cheaper than K x 1 matmuls


def _constraints(p: Tensor, graph: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``g_a(p) = sum_i (p_i - 1[i=a])^2 / w_i = sum_i p_i^2 / w_i + (1 - 2 p_a) / w_a``.

    Returns ``(g [..., K], w [..., K], r = p / w [..., K])`` in ``O(K^2)``.
    """
    w = _observe(p, graph)
    r = p / w
    return (p * r).sum(-1, keepdim=True) + (1 - 2 * p) / w, w, r


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
    max_iter: int = 80,
    tol: float = 1e-10,
) -> Tensor:
    """Minimiser of the SquareCB-G program over the simplex, batched (CABS Theorem D.1).

    ``argmin_p p.f + max_a [(1/gamma) sum_i (p_i - 1[i=a])^2 / (G^T p)_i - f_a]``, i.e. the
    convex program of ``ALGORITHMS.md`` section 4 step 3 with ``z`` the inner max.

    The interior-point iterations stop when every instance's surrogate duality gap and
    residuals are below ``tol`` (relative to the scaled problem), or after ``max_iter``
    iterations. The stopping test reads one batch-level flag (never a per-instance value):
    every iteration on CPU, where it costs nothing, and every 8th iteration on other devices
    (finished instances are frozen meanwhile).

    Args:
        losses: ``[..., K]`` predicted losses (any finite reals).
        graph: ``[..., K, K]`` bool (broadcast against ``losses``); the diagonal is treated
            as true.
        gamma: float or ``[...]`` tensor, ``> 0``.
        max_iter: iteration budget.
        tol: target surrogate duality gap of the scaled problem (``V' = gamma (V - min f)``).

    Returns:
        ``probs [..., K]`` on the simplex, in the dtype of ``losses``.

    Example:
        >>> f = torch.tensor([0.1, 0.5, 0.9])
        >>> graph_squarecb_probs(f, torch.eye(3, dtype=torch.bool), 4.0).sum()
        tensor(1.)
    """
    gamma_t, lead = _check(losses, graph, gamma)
    k = losses.shape[-1]
    dev = losses.device
    eye = torch.eye(k, dtype=torch.float64, device=dev)
    f = losses.to(torch.float64).expand(*lead, k).reshape(-1, k)
    gm = (graph.bool() | eye.bool()).to(torch.float64).expand(*lead, k, k).reshape(-1, k, k)
    n = f.shape[0]
    if k == 1 or n == 0:
        return torch.ones_like(losses).expand(*lead, k).clone()
    # Scaled problem: f' = gamma (f - min f) >= 0, gamma' = 1.
    f = gamma_t.reshape(-1, 1) * (f - f.amin(-1, keepdim=True))
    p = torch.full((n, k), 1.0 / k, dtype=torch.float64, device=dev)
    g0, _, _ = _constraints(p, gm)
    z = (g0 - f).amax(-1) + 1.0  # h = g - f - z <= -1
    lam = torch.full((n, k), 1.0 / k, dtype=torch.float64, device=dev)
    s = torch.ones((n, k), dtype=torch.float64, device=dev)
    nu = torch.zeros(n, dtype=torch.float64, device=dev)
    state = (p, z, lam, s, nu)
    done = torch.zeros(n, dtype=torch.bool, device=dev)
    steps = _STEPS.to(dev)
    for it in range(max_iter):
        state, done = _ipm_step(state, done, f, gm, steps, tol)
        # Batch-level stopping test: every iteration on CPU (free), every 8th elsewhere.
        if (dev.type == "cpu" or it % 8 == 7) and bool(done.all()):
            break
    p = state[0].clamp_min(0.0)
    p = p / p.sum(-1, keepdim=True)
    return p.reshape(*lead, k).to(losses.dtype)


def _residuals(p, z, lam, s, nu, f, gm):
    """Constraint values ``h``, Jacobian ``dg_a/dp_j`` and the dual/primal residuals.

    ``J[a, j] = 2 r_j - (G r^2)_j - 2 [a = j] / w_j - (1 - 2 p_a) G[j, a] / w_a^2`` with
    ``r = p / w`` (differentiating the ``O(K)`` form of :func:`_constraints`). Returns
    ``(h, jac, w, r_dp [N, K], r_dz [N], r_pri [N])``.
    """
    g, w, r = _constraints(p, gm)
    h = g - f - z[:, None]  # [N, K]
    common = 2 * r - (gm * (r * r)[:, None, :]).sum(-1)  # [N, K]
    coef = (1 - 2 * p) / (w * w)  # [N, K]
    jac = common[:, None, :] - torch.diag_embed(2 / w) - coef[:, :, None] * gm.transpose(1, 2)
    big = lam.sum(-1, keepdim=True)
    lam_grad = big * common - 2 * lam / w - (gm * (lam * coef)[:, None, :]).sum(-1)
    r_dp = f + lam_grad - s + nu[:, None]  # [N, K]
    return h, jac, w, r_dp, 1.0 - big[:, 0], p.sum(-1) - 1.0


def _ipm_step(state, done, f, gm, steps, tol):
    """One primal-dual Newton step (Boyd & Vandenberghe 11.7) with a batched line search.

    Instances whose surrogate gap and dual/primal residuals are below ``tol`` (relative to
    the scaled problem) are marked done and frozen. The step is the largest of
    ``0.99 alpha_max 2^-k`` (``alpha_max`` keeps ``p, lam, s`` positive) whose point is
    strictly feasible (``g_a - f_a - z < 0``).
    """
    p, z, lam, s, nu = state
    n, k = p.shape
    h, jac, w, r_dp, r_dz, r_pri = _residuals(p, z, lam, s, nu, f, gm)
    gap = -(h * lam).sum(-1) + (p * s).sum(-1)  # surrogate duality gap, [N]
    scale = 1.0 + (p * f).sum(-1).abs() + z.abs()
    feas = (r_dp.square().sum(-1) + r_dz.square() + r_pri.square()).sqrt()
    feas_scale = 1.0 + f.amax(-1) + lam.sum(-1)
    done = done | ((gap <= tol * scale) & (feas <= 1e2 * tol * feas_scale))
    inv_t = gap / (_MU * 2 * k)  # 1/t with t = mu m / gap, m = 2K
    r_ca = -lam * h - inv_t[:, None]
    r_cs = s * p - inv_t[:, None]
    # Hessian of sum_a lam_a g_a (closed form of the quad-over-lin terms):
    # sum_i (2 / w_i) [L e_i e_i^T - (al_i / w_i)(e_i G_i^T + G_i e_i^T) + (be_i / w_i^2) G_i G_i^T]
    big = lam.sum(-1, keepdim=True)  # L, [N, 1]
    c = 2 * (big * p - lam) / w**2
    d = 2 * (big * p * p - 2 * p * lam + lam) / w**3
    gmt = gm.transpose(-1, -2)
    hess = torch.diag_embed(2 * big / w) - c[:, :, None] * gmt - gm * c[:, None, :]
    hess = hess + (gm * d[:, None, :]) @ gmt
    # Reduced KKT system on (dp, dz, dnu): dlam and ds are eliminated.
    dd = lam / (-h)  # [N, K] > 0
    jt = jac.transpose(1, 2)  # [N, K(j), K(a)]
    kkt = p.new_zeros(n, k + 2, k + 2)
    kkt[:, :k, :k] = (jt * dd[:, None, :]) @ jac + hess + torch.diag_embed(s / p)
    kkt[:, :k, k] = -(jt @ dd[:, :, None])[:, :, 0]
    kkt[:, k, :k] = kkt[:, :k, k]
    kkt[:, k, k] = dd.sum(-1)
    kkt[:, :k, k + 1] = 1.0
    kkt[:, k + 1, :k] = 1.0
    v = r_ca / (-h)  # [N, K]
    rhs = torch.cat(
        [
            -r_dp + (jt @ v[:, :, None])[:, :, 0] - r_cs / p,
            (-r_dz - v.sum(-1))[:, None],
            -r_pri[:, None],
        ],
        -1,
    )
    # solve_ex: a (numerically) singular system in one instance must not stop the batch;
    # that instance takes no step this iteration.
    sol, info = torch.linalg.solve_ex(kkt, rhs)
    bad = (info != 0) | ~torch.isfinite(sol).all(-1)
    sol = torch.where(bad[:, None], 0.0, sol)
    dp, dz, dnu = sol[:, :k], sol[:, k], sol[:, k + 1]
    dh = (jac @ dp[:, :, None])[:, :, 0] - dz[:, None]  # [N, K]
    dlam = (r_ca - lam * dh) / h
    ds = -(r_cs + s * dp) / p
    # Largest step keeping lam, s, p positive, then backtracking on strict feasibility.
    x0, dx = torch.cat([lam, s, p], -1), torch.cat([dlam, ds, dp], -1)
    ratio = torch.where(dx < 0, x0 / (-dx), torch.inf)
    cand = ratio.amin(-1).clamp(max=1.0 / 0.99)[:, None] * 0.99 * steps  # [N, S]
    p_s = p[:, None] + cand[:, :, None] * dp[:, None]  # [N, S, K]
    z_s = z[:, None] + cand * dz[:, None]  # [N, S]
    g_s, _, _ = _constraints(p_s, gm[:, None])
    ok = ((g_s - f[:, None] - z_s[:, :, None]) < 0).all(-1) & (p_s > 0).all(-1)
    ok &= torch.isfinite(g_s).all(-1)
    ns = steps.shape[0]
    first = torch.where(ok, torch.arange(ns, device=p.device), ns).amin(-1)  # [N]
    alpha = torch.where(
        (first < ns) & ~done & ~bad, cand.gather(1, first.clamp(max=ns - 1)[:, None])[:, 0], 0.0
    )
    a1 = alpha[:, None]
    new = (p + a1 * dp, z + alpha * dz, lam + a1 * dlam, s + a1 * ds, nu + alpha * dnu)
    return new, done
