"""Ridge per arm (Sherman–Morrison / Woodbury) against dense inverses and solves."""

from __future__ import annotations

import pytest
import torch

from torchroute.functional.ridge import (
    ridge_init,
    ridge_predict,
    ridge_width,
    sherman_morrison,
    woodbury,
)

F64 = torch.float64


def _dense(lam: float, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor):
    """Reference ridge fit from all observations: ``x [..., N, d]``, ``y, w [..., N]``.

    Returns ``inv(lam I + X^T W X)`` and ``solve(lam I + X^T W X, X^T W y)``.
    """
    d = x.shape[-1]
    eye = torch.eye(d, dtype=x.dtype)
    a = lam * eye + torch.einsum("...n,...ni,...nj->...ij", w, x, x)
    b = torch.einsum("...n,...ni,...n->...i", w, x, y)
    return torch.linalg.inv(a), torch.linalg.solve(a, b[..., None])[..., 0]


def _problem(gen: torch.Generator, batch: tuple[int, ...], n: int, d: int, zero_frac: float = 0.0):
    x = torch.randn(*batch, n, d, generator=gen, dtype=F64)
    y = torch.randn(*batch, n, generator=gen, dtype=F64)
    w = torch.rand(*batch, n, generator=gen, dtype=F64) * 2 + 0.1
    if zero_frac:
        w = w.masked_fill(torch.rand(w.shape, generator=gen, dtype=F64) < zero_frac, 0.0)
    return x, y, w


def test_ridge_init_is_the_prior():
    a_inv, theta = ridge_init(2, 3, 4, lam=2.5, dtype=F64)
    assert a_inv.shape == (2, 3, 4, 4) and theta.shape == (2, 3, 4)
    torch.testing.assert_close(a_inv, torch.eye(4, dtype=F64).expand(2, 3, 4, 4) / 2.5)
    assert torch.count_nonzero(theta) == 0
    # Independent storage per (trial, arm), so in-place writes do not alias.
    a_inv[0, 0, 0, 0] = 7.0
    assert a_inv[1, 2, 0, 0] == 1 / 2.5
    with pytest.raises(ValueError, match="lambda"):
        ridge_init(1, 2, 3, lam=0.0)


@pytest.mark.parametrize("batch", [(1, 1), (3, 2), (2, 4)])
@pytest.mark.parametrize("zero_frac", [0.0, 0.4])
def test_sherman_morrison_matches_dense(batch, zero_frac):
    gen = torch.Generator().manual_seed(0)
    d, n, lam = 4, 6, 1.5
    x, y, w = _problem(gen, batch, n, d, zero_frac)
    a_inv, theta = ridge_init(*batch, d, lam, dtype=F64)
    for i in range(n):
        a_inv, theta = sherman_morrison(a_inv, theta, x[..., i, :], y[..., i], w[..., i])
    ref_inv, ref_theta = _dense(lam, x, y, w)
    torch.testing.assert_close(a_inv, ref_inv, rtol=0, atol=1e-12)
    torch.testing.assert_close(theta, ref_theta, rtol=0, atol=1e-12)


def test_sherman_morrison_zero_weight_leaves_state_unchanged():
    gen = torch.Generator().manual_seed(1)
    d, lam = 3, 2.0
    x, y, w = _problem(gen, (2, 3), 4, d)
    a_inv, theta = ridge_init(2, 3, d, lam, dtype=F64)
    for i in range(3):  # some non-trivial state first
        a_inv, theta = sherman_morrison(a_inv, theta, x[..., i, :], y[..., i], w[..., i])
    w_last = w[..., 3].clone()
    w_last[0] = 0.0  # trial 0, every arm: no observation
    a_new, t_new = sherman_morrison(a_inv, theta, x[..., 3, :], y[..., 3] + 100.0, w_last)
    assert torch.equal(a_new[0], a_inv[0]) and torch.equal(t_new[0], theta[0])
    assert not torch.allclose(t_new[1], theta[1])


@pytest.mark.parametrize("num_obs", [1, 3])
@pytest.mark.parametrize("zero_frac", [0.0, 0.5])
def test_woodbury_matches_dense(num_obs, zero_frac):
    """One prior batch then one Woodbury batch of ``B`` rows, shapes ``[R, K, B, d]``."""
    gen = torch.Generator().manual_seed(2)
    r, k, d, lam = 3, 2, 5, 0.7
    x, y, w = _problem(gen, (r, k), 4 + num_obs, d, zero_frac)
    a_inv, theta = ridge_init(r, k, d, lam, dtype=F64)
    a_inv, theta = woodbury(a_inv, theta, x[..., :4, :], y[..., :4], w[..., :4])
    ref_inv, ref_theta = _dense(lam, x[..., :4, :], y[..., :4], w[..., :4])
    torch.testing.assert_close(a_inv, ref_inv, rtol=0, atol=1e-12)
    torch.testing.assert_close(theta, ref_theta, rtol=0, atol=1e-12)
    a_inv, theta = woodbury(a_inv, theta, x[..., 4:, :], y[..., 4:], w[..., 4:])
    ref_inv, ref_theta = _dense(lam, x, y, w)
    torch.testing.assert_close(a_inv, ref_inv, rtol=0, atol=1e-12)
    torch.testing.assert_close(theta, ref_theta, rtol=0, atol=1e-12)


def test_woodbury_all_zero_weights_is_identity():
    gen = torch.Generator().manual_seed(3)
    x, y, w = _problem(gen, (2, 3), 5, 4)
    a_inv, theta = ridge_init(2, 3, 4, 1.0, dtype=F64)
    a_inv, theta = woodbury(a_inv, theta, x[..., :2, :], y[..., :2], w[..., :2])
    a_new, t_new = woodbury(a_inv, theta, x[..., 2:, :], y[..., 2:], torch.zeros_like(w[..., 2:]))
    torch.testing.assert_close(a_new, a_inv, rtol=0, atol=1e-15)
    torch.testing.assert_close(t_new, theta, rtol=0, atol=1e-15)


def test_woodbury_single_row_equals_sherman_morrison():
    gen = torch.Generator().manual_seed(4)
    x, y, w = _problem(gen, (2, 3), 3, 4)
    a_inv, theta = ridge_init(2, 3, 4, 3.0, dtype=F64)
    a_inv, theta = woodbury(a_inv, theta, x[..., :2, :], y[..., :2], w[..., :2])
    a_w, t_w = woodbury(a_inv, theta, x[..., 2:, :], y[..., 2:], w[..., 2:])
    a_s, t_s = sherman_morrison(a_inv, theta, x[..., 2, :], y[..., 2], w[..., 2])
    torch.testing.assert_close(a_w, a_s, rtol=0, atol=1e-14)
    torch.testing.assert_close(t_w, t_s, rtol=0, atol=1e-14)


@pytest.mark.parametrize("method", ["sherman_morrison", "woodbury"])
def test_many_sequential_updates_stay_close_to_dense(method):
    gen = torch.Generator().manual_seed(5)
    r, k, d, lam = 2, 3, 5, 1.0
    steps, per_step = (300, 1) if method == "sherman_morrison" else (100, 4)
    x, y, w = _problem(gen, (r, k), steps * per_step, d, zero_frac=0.2)
    a_inv, theta = ridge_init(r, k, d, lam, dtype=F64)
    for t in range(steps):
        sl = slice(t * per_step, (t + 1) * per_step)
        if method == "sherman_morrison":
            a_inv, theta = sherman_morrison(a_inv, theta, x[..., t, :], y[..., t], w[..., t])
        else:
            a_inv, theta = woodbury(a_inv, theta, x[..., sl, :], y[..., sl], w[..., sl])
    ref_inv, ref_theta = _dense(lam, x, y, w)
    torch.testing.assert_close(a_inv, ref_inv, rtol=0, atol=1e-8)
    torch.testing.assert_close(theta, ref_theta, rtol=0, atol=1e-8)


def test_in_place_sherman_morrison_matches_dense():
    from torchroute.functional.ridge import sherman_morrison_

    gen = torch.Generator().manual_seed(7)
    n, d, lam, steps = 5, 4, 2.0, 6
    x, y, w = _problem(gen, (n,), steps, d, zero_frac=0.3)
    a_inv, theta = ridge_init(1, n, d, lam, dtype=F64)
    a_inv, theta = a_inv[0], theta[0]  # [N, d, d], [N, d]
    for i in range(steps):
        sherman_morrison_(a_inv, theta, x[:, i], y[:, i], w[:, i])
    ref_inv, ref_theta = _dense(lam, x, y, w)
    torch.testing.assert_close(a_inv, ref_inv, rtol=0, atol=1e-12)
    torch.testing.assert_close(theta, ref_theta, rtol=0, atol=1e-12)


def test_ridge_width_and_predict_match_explicit_forms():
    gen = torch.Generator().manual_seed(6)
    r, k, b, d = 3, 4, 2, 5
    m = torch.randn(r, k, d, d, generator=gen, dtype=F64)
    a_inv = m @ m.transpose(-1, -2) + 0.1 * torch.eye(d, dtype=F64)  # SPD
    theta = torch.randn(r, k, d, generator=gen, dtype=F64)
    x = torch.randn(r, b, d, generator=gen, dtype=F64)
    width = ridge_width(a_inv, x)
    pred = ridge_predict(theta, x)
    assert width.shape == pred.shape == (r, b, k)
    for ri in range(r):
        for bi in range(b):
            for ki in range(k):
                xv = x[ri, bi]
                quad = xv @ a_inv[ri, ki] @ xv
                torch.testing.assert_close(width[ri, bi, ki], quad.sqrt(), rtol=1e-12, atol=0)
                torch.testing.assert_close(pred[ri, bi, ki], xv @ theta[ri, ki])


@pytest.mark.parametrize(
    ("batch", "b", "d"),
    [((), 3, 2), ((4,), 3, 1), ((2, 1), 3, 2), ((1, 2), 2, 3), ((2, 3), 1, 1)],
)
def test_woodbury_any_leading_shape_matches_dense(batch, b, d):
    """No leading batch, one, or two of them, with size-1 dims next to ``B`` and ``d``: the
    batch/one-row dispatch must look at ``B`` (dim -2) only."""
    gen = torch.Generator().manual_seed(8)
    x, y, w = _problem(gen, batch, 2 + b, d)
    a_inv, theta = ridge_init(1, 1, d, 0.5, dtype=F64)
    a_inv = a_inv[0, 0].expand(*batch, d, d).clone()
    theta = theta[0, 0].expand(*batch, d).clone()
    a_inv, theta = woodbury(a_inv, theta, x[..., :2, :], y[..., :2], w[..., :2])
    a_inv, theta = woodbury(a_inv, theta, x[..., 2:, :], y[..., 2:], w[..., 2:])
    ref_inv, ref_theta = _dense(0.5, x, y, w)
    assert a_inv.shape == (*batch, d, d) and theta.shape == (*batch, d)
    torch.testing.assert_close(a_inv, ref_inv, rtol=0, atol=1e-12)
    torch.testing.assert_close(theta, ref_theta, rtol=0, atol=1e-12)


def test_ridge_allocates_on_the_requested_device():
    """The ``meta`` device stands in for a GPU: a CPU allocation inside would fail to mix."""
    a_inv, theta = ridge_init(2, 3, 4, lam=1.0, dtype=F64, device="meta")
    assert a_inv.device.type == "meta" and theta.device.type == "meta"
    assert a_inv.dtype == theta.dtype == F64
    x = torch.empty(2, 3, 5, 4, dtype=F64, device="meta")
    y = w = torch.empty(2, 3, 5, dtype=F64, device="meta")
    a_new, t_new = woodbury(a_inv, theta, x, y, w)
    assert a_new.device.type == t_new.device.type == "meta"
    assert a_new.shape == (2, 3, 4, 4) and t_new.shape == (2, 3, 4)
    x1 = torch.empty(2, 1, 4, dtype=F64, device="meta")
    assert ridge_width(a_inv, x1).device.type == ridge_predict(theta, x1).device.type == "meta"
