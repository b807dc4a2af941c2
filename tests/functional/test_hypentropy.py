"""Hypentropy mirror descent (docs/papers/hpg.md) against dense ``eigh`` and bisection."""

from __future__ import annotations

import math

import pytest
import torch

from torchroute.functional.hypentropy import (
    compact,
    dense_mirror_step,
    inverse_mirror_map,
    low_rank_eig_update,
    mirror_map,
    mirror_step,
    nuclear_projection,
    quadratic_form,
    rank_one_eig_update,
)

F64 = torch.float64


def _dense(U, theta):
    return (U * theta[..., None, :]) @ U.transpose(-1, -2)


def _random_states(n, d, k, gen):
    """``n`` random low-rank states: orthonormal ``U [n, d, k]``, random active counts."""
    U, _ = torch.linalg.qr(torch.randn(n, d, k, generator=gen, dtype=F64))
    active = torch.randint(0, k + 1, (n,), generator=gen)
    active[: n // 4] = k  # capacity reached: every slot active
    mask = torch.arange(k) < active[:, None]
    theta = torch.randn(n, k, generator=gen, dtype=F64) * 3 * mask
    return U * mask[:, None, :], theta, mask


def _padded_eigs(theta, d):
    out = torch.zeros(theta.shape[0], d, dtype=theta.dtype)
    out[:, : theta.shape[-1]] = theta
    return out.sort(-1).values


@pytest.mark.parametrize("d,k", [(7, 3), (6, 6)])  # low rank / full rank (q always in span)
def test_rank_one_update_equals_dense_eigh(d, k):
    gen = torch.Generator().manual_seed(0)
    n = 1000
    U, theta, mask = _random_states(n, d, k, gen)
    q = torch.randn(n, d, generator=gen, dtype=F64)
    in_span = torch.arange(n) % 3 == 0  # q already in the span of the active columns
    q_span = (U @ torch.randn(n, k, 1, generator=gen, dtype=F64))[..., 0]
    q = torch.where(in_span[:, None] & mask.any(-1, keepdim=True), q_span, q)
    c = torch.randn(n, generator=gen, dtype=F64) * 2  # both signs
    new_u, new_theta, new_mask = rank_one_eig_update(U, theta, mask, q, c)
    assert new_u.shape == (n, d, k + 1) and new_theta.shape == (n, k + 1)
    target = _dense(U, theta) + c[:, None, None] * q[:, :, None] * q[:, None, :]
    expected = torch.linalg.eigvalsh(target)
    mine = _padded_eigs(new_theta, max(d, k + 1))[:, -d:] if k + 1 > d else None
    if mine is None:
        mine = _padded_eigs(new_theta, d)
    else:  # full rank: one slot is the (zero) extra direction; drop the zero closest to 0
        mine = new_theta.sort(-1).values
        drop = mine.abs().argmin(-1, keepdim=True)
        keep = torch.ones_like(mine, dtype=torch.bool).scatter(-1, drop, False)
        mine = mine[keep].reshape(n, d)
    torch.testing.assert_close(mine, expected, rtol=0, atol=1e-8)
    torch.testing.assert_close(_dense(new_u, new_theta), target, rtol=0, atol=1e-8)
    # active columns are orthonormal, inactive ones are zero
    gram = new_u.transpose(-1, -2) @ new_u
    eye = torch.diag_embed(new_mask.to(F64))
    torch.testing.assert_close(gram, eye, rtol=0, atol=1e-8)
    assert (new_theta[~new_mask] == 0).all()


def test_in_span_update_adds_no_rank():
    gen = torch.Generator().manual_seed(1)
    U, theta, mask = _random_states(50, 8, 4, gen)
    q = (U @ torch.randn(50, 4, 1, generator=gen, dtype=F64))[..., 0]
    _, _new_theta, new_mask = rank_one_eig_update(U, theta, mask, q, torch.ones(50, dtype=F64))
    assert (new_mask.sum(-1) <= mask.sum(-1).clamp_min(0)).all()


def _bisection_nu(a, tau, beta, iters=200):
    """``nu >= 0`` with ``sum beta sinh(max(a - nu, 0)) = tau`` by bisection (float64)."""

    def total(nu):
        return (beta * torch.sinh((a - nu[:, None]).clamp_min(0))).sum(-1)

    lo = torch.zeros(a.shape[0], dtype=F64)
    hi = a.amax(-1).clone()
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        big = total(mid) > tau
        lo, hi = torch.where(big, mid, lo), torch.where(big, hi, mid)
    nu = 0.5 * (lo + hi)
    return torch.where(total(torch.zeros_like(nu)) <= tau, torch.zeros_like(nu), nu)


@pytest.mark.parametrize("scale", [0.3, 3.0, 25.0])
def test_projection_equals_bisection(scale):
    gen = torch.Generator().manual_seed(2)
    theta = torch.randn(500, 12, generator=gen, dtype=F64) * scale
    theta[:, 8:] = 0.0  # inactive slots
    tau, beta = 8.0, 8.0 / 64
    projected = nuclear_projection(theta, tau, beta)
    nu = _bisection_nu(theta.abs(), tau, beta)
    expected = theta.sign() * (theta.abs() - nu[:, None]).clamp_min(0)
    torch.testing.assert_close(projected, expected, rtol=0, atol=1e-10)
    norm = (beta * torch.sinh(projected.abs())).sum(-1)
    assert (norm <= tau * (1 + 1e-9)).all()
    inside = (beta * torch.sinh(theta.abs())).sum(-1) <= tau
    assert torch.equal(projected[inside], theta[inside])


def test_projection_per_row_tau_beta_and_float32():
    gen = torch.Generator().manual_seed(3)
    theta = torch.randn(3, 4, 6, generator=gen, dtype=F64) * 4
    tau = torch.tensor([[1.0], [2.0], [5.0]], dtype=F64).expand(3, 4)
    beta = torch.full((3, 4), 0.05, dtype=F64)
    out = nuclear_projection(theta, tau, beta)
    for i in range(3):
        for j in range(4):
            row = nuclear_projection(theta[i, j][None], float(tau[i, j]), 0.05)[0]
            torch.testing.assert_close(out[i, j], row, rtol=0, atol=1e-12)
    out32 = nuclear_projection(theta.float(), tau.float(), beta.float())
    torch.testing.assert_close(out32, out.float(), rtol=1e-4, atol=1e-4)


def test_mirror_steps_match_the_dense_path_and_stay_in_the_ball():
    gen = torch.Generator().manual_seed(4)
    r, m, d = 3, 4, 9
    tau, beta = 2.0, 2.0 / d
    U = torch.zeros(r, m, d, d, dtype=F64)
    theta = torch.zeros(r, m, d, dtype=F64)
    mask = torch.zeros(r, m, d, dtype=torch.bool)
    dense = torch.zeros(r, m, d, d, dtype=F64)
    for _t in range(60):
        q = torch.nn.functional.normalize(torch.randn(r, 1, 1, d, generator=gen, dtype=F64), dim=-1)
        q = q.expand(r, m, 1, d)
        c = torch.randn(r, m, 1, generator=gen, dtype=F64) * 3
        U, theta, mask, dropped = mirror_step(U, theta, mask, q, c, tau, beta, capacity=d)
        dense = dense_mirror_step(dense, q, c, tau, beta)
        assert (dropped == 0).all()
        torch.testing.assert_close(_dense(U, theta), dense, rtol=0, atol=1e-8)
        norm = inverse_mirror_map(theta.abs(), beta).sum(-1)
        assert (norm <= tau * (1 + 1e-9)).all()


def test_compact_keeps_the_largest_and_reports_drops():
    theta = torch.tensor([[0.0, -3.0, 1.0, 2.0]], dtype=F64)
    U = torch.eye(4, dtype=F64)[None]
    mask = theta != 0
    u2, t2, m2, dropped = compact(U, theta, mask, 2)
    assert sorted(t2[0].tolist()) == [-3.0, 2.0] and m2.all() and dropped.item() == 1
    torch.testing.assert_close(_dense(u2, t2), _dense(U, theta * (theta.abs() >= 2)))


def test_mirror_map_and_quadratic_form():
    gen = torch.Generator().manual_seed(5)
    lam = torch.randn(10, dtype=F64) * 5
    torch.testing.assert_close(inverse_mirror_map(mirror_map(lam, 0.1), 0.1), lam)
    U, theta, _mask = _random_states(6, 8, 3, gen)
    beta = torch.full((6,), 0.2, dtype=F64)
    q = torch.randn(6, 2, 8, generator=gen, dtype=F64)
    w = _dense(U, 0.2 * torch.sinh(theta))
    expected = torch.einsum("nbd,nde,nbe->nb", q, w, q)
    torch.testing.assert_close(quadratic_form(U, theta, beta, q), expected)
    assert math.isclose(float(mirror_map(torch.tensor(0.0), 1.0)), 0.0)


def test_batched_rank_b_update_equals_dense():
    gen = torch.Generator().manual_seed(6)
    U, theta, mask = _random_states(100, 10, 4, gen)
    q = torch.randn(100, 3, 10, generator=gen, dtype=F64)
    c = torch.randn(100, 3, generator=gen, dtype=F64)
    new_u, new_theta, _ = low_rank_eig_update(U, theta, mask, q, c)
    target = _dense(U, theta) + torch.einsum("nb,nbd,nbe->nde", c, q, q)
    torch.testing.assert_close(_dense(new_u, new_theta), target, rtol=0, atol=1e-8)
