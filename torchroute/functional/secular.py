"""Batched eigendecomposition of ``diag(d) + c z z^T`` through its secular equation.

The eigenvalues of ``D + w w^T`` (``D = diag(d)`` sorted, ``w = sqrt(|c|) z`` after
flipping the sign of ``D`` when ``c < 0``) are the roots of
``f(x) = 1 + sum_i w_i^2 / (d_i - x)``, one in each interval between consecutive poles and
the last in ``(d_n, d_n + ||w||^2)`` (interlacing). Every function here works on all leading
dimensions at once with static shapes, a fixed number of iterations and no host sync, so
its cost is a fixed sequence of tensor operations on ``[..., n, n]`` tensors (no LAPACK
call per matrix).

Steps (as in LAPACK's ``dlaed2``/``dlaed4``/``dlaed9``, vectorised):

1. *Deflation.* Poles closer than the tolerance ``tol = 8 eps (max|d| + ||w||^2)`` form a
   group; a Householder reflection inside each group moves the group's part of ``w`` onto
   its last member (the representative), so the other members are eigenvectors with their
   own ``d``. A group whose ``||w_group|| ||w|| <= tol`` is deflated whole. Both change the
   matrix by ``O(tol)`` (backward stable).
2. *Roots.* For each remaining pole ``p`` the root in ``(d_p, d_next)`` is found relative to
   the nearer end (origin shift, so ``d_i - x`` is exact to working precision): a midpoint
   test picks the end, LAPACK's two-pole guess starts, then a fixed number of safeguarded
   rational steps (``dlaed4``'s *fixed weight* model, switching per root to the *middle
   way* when a step did not shrink ``|f|`` tenfold), each kept inside the current bracket
   (else bisection). The counts in ``STEPS`` were set from the worst case of random and
   degenerate batches (tests/functional/test_secular.py): 9 steps reach round-off in
   float64, 7 in float32.
3. *Vectors.* ``w`` is recomputed from the roots (Gu-Eisenstat / Löwner:
   ``w_p^2 = prod_j (x_j - d_p) / prod_{j != p} (d_j - d_p)``), which makes the eigenvectors
   ``(d_i - x_j)^{-1} w_i`` (normalised) orthogonal to working precision.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: rational steps after the start (each keeps the bracket; quadratic convergence near a root)
STEPS = {torch.float64: 9, torch.float32: 7}


def rank_one_eigh(d: Tensor, z: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """Eigendecomposition of ``diag(d) + c z z^T``, batched, without ``torch.linalg.eigh``.

    Args:
        d: ``[..., n]`` diagonal (any order, repeats allowed).
        z: ``[..., n]`` update vector (zeros allowed).
        c: ``[...]`` its coefficient (any sign, zero allowed).

    Returns:
        ``(vals [..., n], vecs [..., n, n])``: the eigenvalues (in no particular order) and
        orthonormal eigenvectors (columns), ``diag(d) + c z z^T = vecs diag(vals) vecs^T``.
    """
    n = d.shape[-1]
    eps = torch.finfo(d.dtype).eps
    sign = torch.where(c < 0, -1.0, 1.0).to(d.dtype)[..., None]  # [..., 1]
    w = z * c.abs().sqrt()[..., None]
    order = (d * sign).argsort(dim=-1, stable=True)  # [..., n]
    ds = (d * sign).gather(-1, order)
    ws = w.gather(-1, order)
    w2sum = ws.square().sum(-1, keepdim=True)  # ||w||^2, [..., 1]
    tol = 8 * eps * (ds.abs().amax(-1, keepdim=True) + w2sum)
    # --- deflation: groups of (nearly) equal poles, one Householder reflection per group
    ar = torch.arange(n, device=d.device)
    new_group = torch.ones_like(ds, dtype=torch.bool)
    new_group[..., 1:] = (ds[..., 1:] - ds[..., :-1]) > tol
    gid = new_group.long().cumsum(-1) - 1  # [..., n], group index of each slot
    last = torch.ones_like(new_group)
    last[..., :-1] = new_group[..., 1:]  # the representative: a group's last slot
    rep = torch.where(last, ar, n).flip(-1).cummin(-1).values.flip(-1)  # [..., n]
    gsq = torch.zeros_like(ws).scatter_add_(-1, gid, ws.square())  # per group id
    gnorm = gsq.gather(-1, gid).sqrt()  # [..., n]: ||w_group|| of each slot's group
    live = gnorm * w2sum.sqrt() > tol  # slots of groups that stay in the secular equation
    poles = last & live  # [..., n]
    w_rep = ws.gather(-1, rep)
    s_rep = torch.where(w_rep < 0, -1.0, 1.0).to(ws.dtype)
    v = ws + torch.where(last, s_rep * gnorm, torch.zeros_like(ws))  # Householder vectors
    vnorm2 = 2 * gnorm * (gnorm + w_rep.abs())
    coef = torch.where(live, 2 / torch.where(live, vnorm2, 1.0), 0.0)
    # --- the reduced secular equation on the poles
    weight = torch.where(poles, gnorm.square(), 0.0)  # [..., n]
    big = 4 * (ds.abs().amax(-1, keepdim=True) + w2sum) + 1
    # each live slot's pole (its representative's d); deflated slots far away (weight 0)
    dp = torch.where(live, ds.gather(-1, rep), big)
    nxt = torch.where(poles, ar, n).flip(-1).cummin(-1).values.flip(-1)
    nxt = torch.cat([nxt[..., 1:], torch.full_like(nxt[..., :1], n)], -1)
    top = nxt >= n  # the last pole: the root lies in (d_p, d_p + ||w||^2] (inside this end)
    d_next = torch.where(top, ds + 1.125 * w2sum, ds.gather(-1, nxt.clamp_max(n - 1)))
    width = d_next - ds
    # midpoint test: f(mid) >= 0 puts the root in (d_p, mid]: origin at d_p, else at d_next
    # (the last root always from d_p)
    half = 0.5 * width
    mid = ds + half
    scratch = dp[..., :, None] - mid[..., None, :]  # [..., n, n], reused throughout
    work = (scratch, torch.empty_like(scratch))
    f_mid = 1 + (weight[..., None, :] @ work[0].reciprocal_())[..., 0, :]
    at_lo = (f_mid >= 0) | top
    origin = torch.where(at_lo, ds, d_next)
    lo = torch.where(at_lo, 0.0, -half)
    hi = torch.where(at_lo, half, 0.0)
    lo = torch.where(top & (f_mid < 0), half, lo)
    hi = torch.where(top & (f_mid < 0), width, hi)
    # the model's two poles, relative to the origin: the ends of the interval; for the last
    # root the pole below it (a virtual one when there is none) and its own
    prev = torch.where(poles, ar, -1).cummax(-1).values
    prev = torch.cat([torch.full_like(prev[..., :1], -1), prev[..., :-1]], -1)
    below = torch.where(prev >= 0, ds.gather(-1, prev.clamp_min(0)) - ds, -width)
    anchors = (
        torch.where(top, below, torch.where(at_lo, 0.0, -width)),
        torch.where(at_lo & ~top, width, 0.0),
    )
    # start: the anchor poles with their exact weights plus the rest of f(mid) as a
    # constant (LAPACK's initial guess)
    w_lo = torch.where(top, weight.gather(-1, prev.clamp_min(0)) * (prev >= 0), weight)
    w_hi = torch.where(top, weight, weight.gather(-1, nxt.clamp_max(n - 1)))
    m = mid - origin
    g = f_mid - w_lo / (anchors[0] - m) - w_hi / (anchors[1] - m)
    a = g * (anchors[0] + anchors[1]) + w_lo + w_hi
    b = g * anchors[0] * anchors[1] + w_lo * anchors[1] + w_hi * anchors[0]
    tau = _quadratic_root(g, a, b, torch.zeros_like(g), lo, hi)
    shift = dp[..., :, None] - origin[..., None, :]  # d_i - origin_j, [..., n, n]
    # the origin pole's row (its own slot, or the next pole's) and its weight
    o_row = torch.where(at_lo, ar, nxt.clamp_max(n - 1))
    w_o = weight.gather(-1, o_row)
    upper = (ar[:, None] <= ar[None, :]).to(d.dtype)  # [n, n]: poles i <= j
    # the anchor that is not the origin (for the fixed-weight model)
    anchors = (*anchors, torch.where(anchors[0] == 0, anchors[1], anchors[0]))
    state = (tau, lo, hi, torch.full_like(tau, torch.inf), top)
    for _ in range(STEPS.get(d.dtype, 9)):
        state = _step(shift, weight, anchors, top, (o_row, w_o), work, upper, *state)
    tau = state[0]
    # --- Löwner: w_p^2 = prod_j (x_j - d_p) / prod_{j != p} (d_j - d_p), paired so that
    # every factor is in (0, 1] but the last root's (x_j with d_j for j < p, else with d_next)
    num, pair = work
    torch.sub(tau[..., None, :], shift, out=num)  # x_j - d_p  [..., p, j]
    lower = ar[:, None] > ar[None, :]  # j < p
    # (the last root pairs with its bracket's end; that factor is divided out again)
    torch.where(lower, ds[..., None, :], d_next[..., None, :], out=pair)
    pair.sub_(ds[..., :, None])
    num.div_(pair).masked_fill_(~poles[..., None, :], 1.0)
    w_hat = (num.prod(-1) * (d_next.gather(-1, _last_pole(poles, n)) - ds)).clamp_min(0).sqrt()
    alpha = ws / torch.where(gnorm > 0, gnorm, 1.0) * w_hat.gather(-1, rep)
    alpha = torch.where(live, alpha, 0.0)
    # --- vectors: (d_i - x_j)^{-1} alpha_i normalised at the poles, the reflections elsewhere
    vec, house = work
    torch.sub(shift, tau[..., None, :], out=vec).reciprocal_().mul_(alpha[..., :, None])
    norm = torch.mul(vec, vec, out=house).sum(-2, keepdim=True).sqrt_()
    vec.div_(norm.clamp_min_(torch.finfo(d.dtype).tiny))
    torch.mul((v * coef)[..., :, None], v[..., None, :], out=house)
    house.mul_(gid[..., :, None] == gid[..., None, :]).neg_()
    house.diagonal(dim1=-2, dim2=-1).add_(1.0)
    vecs = torch.where(poles[..., None, :], vec, house, out=house)
    vals = torch.where(poles, origin + tau, ds) * sign
    # back to the caller's slot order (rows); the columns stay in the solver's order
    rows = order.argsort(-1)
    return vals, vecs.gather(-2, rows[..., :, None].expand(*rows.shape, n))


def _last_pole(poles: Tensor, n: int) -> Tensor:
    """The index of the last ``True`` of ``poles [..., n]`` (0 if none), ``[..., 1]``."""
    ar = torch.arange(n, device=poles.device)
    return torch.where(poles, ar, 0).amax(-1, keepdim=True)


def _step(
    shift: Tensor,
    weight: Tensor,
    anchors: tuple[Tensor, Tensor],
    top: Tensor,
    origin_pole: tuple[Tensor, Tensor],
    work: tuple[Tensor, Tensor],
    upper: Tensor,
    tau: Tensor,
    lo: Tensor,
    hi: Tensor,
    f_prev: Tensor,
    middle: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """One safeguarded rational step for every root (LAPACK ``dlaed4``'s, vectorised).

    ``f`` is modelled by ``c + s1 / (a1 - x) + s2 / (a2 - x)`` matching ``f`` and ``f'``,
    with the poles at the ``anchors`` (relative to the origin) and either the origin
    pole's exact weight (*fixed weight*) or each side's weight from its own slope (*middle
    way*, always for the last root); a root switches method when a step did not shrink
    ``|f|`` tenfold. The model's root in the bracket (updated by the sign of ``f``) is
    taken, else the bracket's midpoint.

    Args:
        shift: ``[..., n, n]``, ``d_i - origin_j`` (zero weight where ``d_i`` is no pole).
        weight: ``[..., n]``, ``w_i^2`` at the poles, 0 elsewhere.
        anchors: three ``[..., n]``, the model's poles relative to the origin (lower,
            upper) and the one of them that is not the origin.
        top: ``[..., n]``, the last pole's root.
        origin_pole: ``([..., n], [..., n])``, the origin pole's slot and its weight.
        work: two ``[..., n, n]`` scratch tensors (overwritten).
        upper: ``[n, n]``, 1 where ``i <= j``.
        tau: ``[..., n]``, the iterate (relative to the origin).
        lo: ``[..., n]``, its bracket's lower end.
        hi: ``[..., n]``, its bracket's upper end.
        f_prev: ``[..., n]``, the previous ``f``.
        middle: ``[..., n]`` bool, the method flag.

    Returns:
        ``(tau, lo, hi, f, middle)`` for the next step.
    """
    r, r2 = work
    torch.sub(shift, tau[..., None, :], out=r)
    r.reciprocal_()  # 1 / (d_i - x_j)
    torch.mul(r, r, out=r2)
    row = weight[..., None, :]
    f = 1 + (row @ r)[..., 0, :]
    df = (row @ r2)[..., 0, :]
    own = origin_pole[1] * r2.gather(-2, origin_pole[0][..., None, :])[..., 0, :]
    dpsi = (row @ r2.mul_(upper))[..., 0, :]  # poles i <= j
    dpsi = torch.where(top, df - own, dpsi)
    dphi = df - dpsi
    middle = (middle ^ (f / f_prev > 0.1)) | top  # switch when |f| shrank less than 10x
    neg = f < 0
    lo = torch.where(neg, tau, lo)
    hi = torch.where(neg, hi, tau)
    d_l, d_u = anchors[0] - tau, anchors[1] - tau
    c_mw = torch.addcmul(torch.addcmul(f, d_l, dpsi, value=-1), d_u, dphi, value=-1)
    c_fw = torch.addcmul(torch.addcmul(f, anchors[2] - tau, df, value=-1), own, anchors[2])
    prod = d_l * d_u
    a = torch.addcmul(f * (d_l + d_u), prod, df, value=-1)
    tau = _quadratic_root(torch.where(middle, c_mw, c_fw), a, f * prod, tau, lo, hi)
    return tau, lo, hi, f, middle


def _quadratic_root(c: Tensor, a: Tensor, b: Tensor, tau: Tensor, lo: Tensor, hi: Tensor) -> Tensor:
    """``tau + t`` for the root ``t`` of ``c t^2 - a t + b = 0`` with ``tau + t`` in
    ``[lo, hi]`` and not 0 (the origin pole), elementwise by the stable pair of formulas;
    the midpoint of ``[lo, hi]`` where neither root is."""
    root = torch.addcmul(a.square(), c, b, value=-4).clamp_min_(0).sqrt_()
    q = a + root.copysign(a)  # no cancellation
    t1 = torch.addcdiv(tau, b, q, value=2)
    t2 = torch.addcdiv(tau, q, c, value=0.5)
    ok1 = (t1.clamp(lo, hi) == t1) & (t1 != 0)
    ok2 = (t2.clamp(lo, hi) == t2) & (t2 != 0)
    return torch.where(ok1, t1, torch.where(ok2, t2, torch.lerp(lo, hi, 0.5)))
