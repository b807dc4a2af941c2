"""Exact batched projections and the safe surrogate set of OMD-Approachability.

docs/papers/subset.md (paper 002, Algorithm 1, the proximal QP (6)): the primal step is
the Euclidean projection of ``y = q + g / eta`` onto
``{q in simplex, q >= gamma, a^T q <= b}``. Every function works over any leading dims
``[...]`` and never synchronises with the host.
"""

from __future__ import annotations

import torch
from torch import Tensor

from torchroute.functional.threads import single_threaded


def project_capped_simplex(y: Tensor, gamma: float | Tensor = 0.0) -> Tensor:
    """Euclidean projection onto ``{q : sum(q) = 1, q >= gamma}`` (sort-based, exact).

    With ``p = q - gamma`` this is the projection of ``y - gamma`` onto the simplex of
    radius ``s = 1 - K gamma`` (Held et al. / Duchi et al. 2008): ``p = max(y - tau, 0)``
    with the threshold ``tau`` from the sorted entries.

    Args:
        y: ``[..., K]`` points.
        gamma: floor, a float or a ``[...]`` tensor, ``0 <= gamma <= 1 / K``.

    Returns:
        ``[..., K]`` projections.
    """
    k = y.shape[-1]
    gamma = torch.as_tensor(gamma, dtype=y.dtype, device=y.device)
    gamma = gamma.expand(y.shape[:-1])[..., None]  # [..., 1]
    radius = 1.0 - k * gamma  # [..., 1]
    z = y - gamma
    u = z.sort(-1, descending=True).values
    css = u.cumsum(-1) - radius  # [..., K]
    ranks = torch.arange(1, k + 1, dtype=y.dtype, device=y.device)
    support = (u - css / ranks) > 0  # [..., K]; a prefix of True
    count = support.sum(-1, keepdim=True).clamp_min(1)  # [..., 1]
    tau = css.gather(-1, count - 1) / count.to(y.dtype)
    return (z - tau).clamp_min(0.0) + gamma


def project_capped_simplex_halfspace(
    y: Tensor,
    gamma: float | Tensor,
    a: Tensor,
    b: Tensor,
    iters: int = 50,
    newton_iters: int = 12,
) -> Tensor:
    """Euclidean projection onto ``{q in simplex, q >= gamma, a^T q <= b}``.

    KKT: ``q(lam) = Proj_{simplex, q >= gamma}(y - lam a)`` with ``lam >= 0``;
    ``s(lam) = a^T q(lam) - b`` is non-increasing and piecewise linear in ``lam``
    (docs/papers/subset.md, step 2). ``lam = 0`` when ``q(0)`` is feasible. Otherwise the
    constraint is active and, for a fixed support ``S = {i : q_i > gamma}``, ``sum q = 1``
    and ``a^T q = b`` are two linear equations in the threshold ``tau`` and ``lam``: an
    active-set Newton iteration solves them and recomputes ``S`` until it no longer
    changes (``newton_iters`` steps). A stable support with ``lam >= 0`` satisfies every
    KKT condition, so the result is the exact projection. Instances whose support has not
    settled (or is degenerate) fall back to :func:`_bisection_halfspace`; on the CPU only
    those are recomputed (one batch-level check), on other devices the fallback is computed
    for all and selected with ``torch.where`` (no host sync). On the CPU it runs on one
    intra-op thread (:func:`torchroute.functional.threads.single_threaded`).

    Args:
        y: ``[..., K]`` points.
        gamma: floor, float or ``[...]``.
        a: ``[..., K]`` halfspace normals.
        b: ``[...]`` offsets.
        iters: bisection steps of the fallback.
        newton_iters: active-set Newton steps.

    Returns:
        ``[..., K]`` projections.
    """
    lead, k = y.shape[:-1], y.shape[-1]
    # One flat batch dim [N, K] inside (N = 1 for an unbatched [K] input), restored at the end.
    a = a.to(y.dtype).expand_as(y).reshape(-1, k)
    b = torch.as_tensor(b, dtype=y.dtype, device=y.device).expand(lead).reshape(-1)
    g = torch.as_tensor(gamma, dtype=y.dtype, device=y.device).expand(lead).reshape(-1)  # [N]
    y = y.reshape(-1, k)
    with single_threaded(y.device):  # small operators: torch's thread pool only adds joins
        return _halfspace_flat(y, g, a, b, iters, newton_iters).reshape(*lead, k)


def _halfspace_flat(
    y: Tensor, g: Tensor, a: Tensor, b: Tensor, iters: int, newton_iters: int
) -> Tensor:
    """:func:`project_capped_simplex_halfspace` on ``y, a [N, K]``, ``g, b [N]``."""
    k = y.shape[-1]
    q0 = project_capped_simplex(y, g)
    active = ((a * q0).sum(-1) - b) > 0  # [...]
    z = y - g[..., None]
    radius = 1.0 - k * g  # mass above the floor
    floor_a = g * a.sum(-1)  # gamma sum_i a_i: the floor's part of a^T q
    support = (q0 - g[..., None]) > 0  # start from the support at lam = 0
    stable = torch.zeros_like(active)
    lam = torch.zeros_like(b)
    tau = torch.zeros_like(b)
    # The support sums of 1, a, a^2, z, a z in one batched product per step.
    columns = torch.stack([torch.ones_like(a), a, a * a, z, a * z], -1)  # [..., K, 5]
    on_cpu = y.device.type == "cpu"
    for _ in range(newton_iters):
        sums = (support.to(y.dtype).unsqueeze(-2) @ columns).squeeze(-2)  # [..., 5]
        n, sa, saa, sz, saz = sums.unbind(-1)
        # sum_S (z - lam a - tau) = radius;  sum_S a (z - lam a - tau) + floor_a = b
        det = saa - sa * sa / n.clamp_min(1)
        lam = (saz - sa * (sz - radius) / n.clamp_min(1) + floor_a - b) / det.clamp_min(1e-300)
        tau = (sz - lam * sa - radius) / n.clamp_min(1)
        new_support = (z - lam[..., None] * a - tau[..., None]) > 0
        stable = (new_support == support).all(-1) & (n > 0) & (det > 1e-12) & (lam >= 0)
        support = new_support
        if on_cpu and bool((stable | ~active).all()):  # free on the CPU: stop once settled
            break
    q_newton = (z - lam[..., None] * a - tau[..., None]).clamp_min(0.0) + g[..., None]
    need = active & ~stable
    if y.device.type == "cpu":
        if bool(need.any()):
            fallback = _bisection_halfspace(y[need], g[need], a[need], b[need], iters)
            q_newton = q_newton.index_put((need,), fallback)
    else:
        fallback = _bisection_halfspace(y, g, a, b, iters)
        q_newton = torch.where(need[..., None], fallback, q_newton)
    return torch.where(active[..., None], q_newton, q0)


def _bisection_halfspace(y: Tensor, gamma: Tensor, a: Tensor, b: Tensor, iters: int) -> Tensor:
    """The halfspace projection by bracketing and bisection on ``lam`` (robust fallback).

    An upper bracket is found by growing ``lam`` geometrically, then the root of ``s`` is
    bracketed by ``iters`` bisection steps, and a last secant step through the true values
    at the bracket ends is exact once both ends lie on one linear piece. The returned
    point is always on the feasible side (the secant point when it is feasible, else the
    upper bracket end). When even ``lam -> inf`` is infeasible (the halfspace misses the
    capped simplex) the point closest to feasibility is returned. Shapes as
    :func:`project_capped_simplex_halfspace` (``gamma``: ``[...]``).
    """

    def q_at(lam: Tensor) -> Tensor:
        return project_capped_simplex(y - lam[..., None] * a, gamma)

    def slack(q: Tensor) -> Tensor:
        return (a * q).sum(-1) - b  # > 0: infeasible

    zero = torch.zeros_like(b)
    q0 = q_at(zero)
    s0 = slack(q0)
    active = s0 > 0  # [...]
    # Upper bracket: lam (a_i - a_j) must outgrow the spread of y (plus the unit mass).
    scale = (y.amax(-1) - y.amin(-1) + 1.0) / (a.amax(-1) - a.amin(-1)).clamp_min(1e-300)
    hi = scale.clamp(1e-12, 1e12)
    s_hi = slack(q_at(hi))
    for _ in range(8):
        grow = s_hi > 0
        hi = torch.where(grow, hi * 16.0, hi)
        s_hi = torch.where(grow, slack(q_at(hi)), s_hi)
    lo, s_lo = zero, s0
    for _ in range(iters):
        lam = 0.5 * (lo + hi)
        s = slack(q_at(lam))
        move_lo = s > 0
        lo, s_lo = torch.where(move_lo, lam, lo), torch.where(move_lo, s, s_lo)
        hi, s_hi = torch.where(move_lo, hi, lam), torch.where(move_lo, s_hi, s)
    denom = s_lo - s_hi
    secant = torch.where(denom > 0, lo + s_lo * (hi - lo) / denom.clamp_min(1e-300), hi)
    q_sec, q_hi = q_at(secant), q_at(hi)
    q = torch.where((slack(q_sec) <= 0)[..., None], q_sec, q_hi)
    return torch.where(active[..., None], q, q0)


def safe_box(lower: Tensor, upper: Tensor, draws: int, cost_max: Tensor) -> tuple[Tensor, Tensor]:
    """The safe surrogate box ``S = prod_j S^(j)`` of docs/papers/subset.md.

    ``S^(j) = [0, u_j / M]`` for an upper bound, ``[l_j, c_bar_j]`` for a lower bound,
    ``[l_j, u_j / M]`` for both, ``[0, c_bar_j]`` for none (``+-inf`` marks no bound).

    Args:
        lower: ``[..., d]`` lower bounds ``l`` (``-inf``: none).
        upper: ``[..., d]`` upper bounds ``u`` (``+inf``: none).
        draws: ``M``.
        cost_max: ``[..., d]`` the largest per-expert cost ``c_bar`` of each coordinate.

    Returns:
        ``(lo, hi)``, each ``[..., d]``, finite.
    """
    lo = torch.where(torch.isfinite(lower), lower, torch.zeros_like(lower))
    hi = torch.where(torch.isfinite(upper), upper / draws, cost_max.expand_as(upper))
    return lo, hi


def support_function(w: Tensor, lo: Tensor, hi: Tensor) -> Tensor:
    """``h_S(w) = sum_j (hi_j w_j if w_j >= 0 else lo_j w_j)`` of the box ``[lo, hi]``.

    Args:
        w: ``[..., d]`` directions.
        lo: ``[..., d]`` the box's lower corner.
        hi: ``[..., d]`` its upper corner.

    Returns:
        ``[...]``.
    """
    return (support_maximiser(w, lo, hi) * w).sum(-1)


def support_maximiser(w: Tensor, lo: Tensor, hi: Tensor) -> Tensor:
    """``x*(w) = argmax_{x in [lo, hi]} w^T x``: ``hi`` where ``w >= 0``, else ``lo``.

    Args:
        w: ``[..., d]`` the direction.
        lo: ``[..., d]`` the box's lower corner.
        hi: ``[..., d]`` its upper corner.

    Returns:
        ``[..., d]``.
    """
    return torch.where(w >= 0, hi, lo)


def box_distance(x: Tensor, lower: Tensor, upper: Tensor) -> Tensor:
    """Euclidean distance of ``x [..., d]`` to the box ``[lower, upper]`` (``+-inf`` allowed)."""
    below = (lower - x).clamp_min(0.0)
    above = (x - upper).clamp_min(0.0)
    gap = torch.where(torch.isfinite(lower), below, 0.0) + torch.where(
        torch.isfinite(upper), above, 0.0
    )
    return gap.norm(dim=-1)


def project_unit_ball(w: Tensor) -> Tensor:
    """Euclidean projection of ``w [..., d]`` onto the unit ball."""
    return w / w.norm(dim=-1, keepdim=True).clamp_min(1.0)


def project_l1_ball(v: Tensor, radius: Tensor | float) -> Tensor:
    """Euclidean projection of ``v [..., k]`` onto ``{x : ||x||_1 <= radius}`` (Duchi et al.
    2008): ``sign(v) max(|v| - nu, 0)`` with ``nu = 0`` inside the ball, else the ``nu > 0``
    with ``sum max(|v| - nu, 0) = radius``. On the eigenvalues of a symmetric matrix it is
    the Euclidean (Frobenius) projection onto the nuclear ball. ``radius``: float or ``[...]``."""
    a = v.abs()
    r = torch.as_tensor(radius, dtype=v.dtype, device=v.device)
    r = r[..., None] if r.ndim else r
    # outside the ball |x| is the projection of |v| onto the simplex of radius r
    scale = torch.where(r > 0, r, torch.ones_like(r))
    outside = v.sign() * r * project_capped_simplex(a / scale)
    return torch.where(a.sum(-1, keepdim=True) <= r, v, outside)
