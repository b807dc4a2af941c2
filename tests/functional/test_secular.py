"""The secular-equation eigensolver of ``diag(d) + c z z^T`` against ``numpy.linalg.eigh`` on
the explicitly formed dense matrix (float64), degenerate cases included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchroute.functional.secular import rank_one_eigh

F64 = torch.float64
KINDS = 9


def _cases(n: int, per_kind: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch mixing ``KINDS`` kinds of problems, kind ``i`` at rows ``i::KINDS``."""
    gen = torch.Generator().manual_seed(seed)
    rows = per_kind * KINDS
    d = torch.randn(rows, n, generator=gen, dtype=F64) * 3
    z = torch.randn(rows, n, generator=gen, dtype=F64)
    c = torch.randn(rows, generator=gen, dtype=F64)  # both signs
    kind = torch.arange(rows) % KINDS
    pairs = d[:, 0::2][:, : d[:, 1::2].shape[1]]
    d[kind == 1, 1::2] = pairs[kind == 1]  # repeated d (in pairs)
    d[kind == 2] = d[kind == 2, :1]  # all d equal
    z[kind == 3, ::3] = 0  # zero components of z
    c[kind == 4] *= 1e-13  # negligible update
    c[kind == 5] *= 1e7  # dominant update
    d[kind == 6] = 1 + torch.randn(per_kind, n, generator=gen, dtype=F64) * 1e-10  # clusters
    d[kind == 7, n // 2 :] = 0  # HPG's inactive slots: d = 0 and z = 0 but the last
    z[kind == 7, n // 2 : -1] = 0
    z[kind == 8] *= torch.logspace(-12, 0, n, dtype=F64)  # graded z
    c[:: KINDS * 7] = 0  # no update at all
    return d, z, c


def _dense(d, z, c):
    return torch.diag_embed(d) + c[:, None, None] * z[:, :, None] * z[:, None, :]


@pytest.mark.parametrize("n", [2, 3, 8, 33])  # n = 2 is HPG's k = 1
def test_matches_dense_eigh_with_degenerate_cases(n):
    d, z, c = _cases(n, 60, seed=n)
    dense = _dense(d, z, c)
    expected = torch.from_numpy(np.linalg.eigvalsh(dense.numpy()))
    vals, vecs = rank_one_eigh(d, z, c)
    scale = dense.abs().flatten(1).amax(-1, keepdim=True).clamp_min(1e-300)
    eig_err = (vals.sort(-1).values - expected).abs() / scale
    assert eig_err.max() < 1e-12, eig_err.max()
    recon = (vecs * vals[:, None, :]) @ vecs.transpose(-1, -2)
    rec_err = (recon - dense).abs().flatten(1).amax(-1) / scale[:, 0]
    assert rec_err.max() < 1e-12, rec_err.max()
    orth = vecs.transpose(-1, -2) @ vecs - torch.eye(n, dtype=F64)
    assert orth.abs().max() < 1e-12
    # the batch does hold the degenerate cases it claims
    assert (d[1::KINDS, 0] == d[1::KINDS, 1]).all() and (z[3::KINDS, 0] == 0).all()
    assert (c == 0).any() and (c < 0).any()


def test_each_row_equals_its_own_solve_and_the_trivial_cases_are_exact():
    d, z, c = _cases(6, 4, seed=1)
    vals, vecs = rank_one_eigh(d, z, c)
    for i in range(0, len(c), 5):
        one_vals, one_vecs = rank_one_eigh(d[i : i + 1], z[i : i + 1], c[i : i + 1])
        torch.testing.assert_close(one_vals[0], vals[i], rtol=0, atol=1e-13)
        torch.testing.assert_close(one_vecs[0].abs(), vecs[i].abs(), rtol=0, atol=1e-10)
    # c = 0: the diagonal itself, unit eigenvectors
    zero_vals, zero_vecs = rank_one_eigh(d[:3], z[:3], torch.zeros(3, dtype=F64))
    torch.testing.assert_close(zero_vals.sort(-1).values, d[:3].sort(-1).values, rtol=0, atol=0)
    assert ((zero_vecs == 0) | (zero_vecs.abs() == 1)).all()  # a signed permutation
    torch.testing.assert_close(
        (zero_vecs * zero_vals[:, None, :]) @ zero_vecs.mT,
        _dense(d[:3], z[:3], torch.zeros(3, dtype=F64)),
        rtol=0,
        atol=0,
    )
    # one pole: the eigenvalue d + c ||z||^2 in closed form, whatever the sign of c
    d1 = torch.tensor([[2.0, 0.0, 0.0]], dtype=F64)
    z1 = torch.tensor([[0.0, 0.0, 1.5]], dtype=F64)
    for coef in (3.0, -3.0):
        got, _ = rank_one_eigh(d1, z1, torch.tensor([coef], dtype=F64))
        want = torch.tensor([0.0, 2.0, coef * 2.25], dtype=F64).sort().values
        torch.testing.assert_close(got.sort(-1).values[0], want, rtol=0, atol=1e-14)


def test_leading_dimensions_and_float32():
    d, z, c = _cases(5, 8, seed=2)
    flat_vals, _ = rank_one_eigh(d, z, c)
    vals, vecs = rank_one_eigh(d.view(8, 9, 5), z.view(8, 9, 5), c.view(8, 9))
    assert vals.shape == (8, 9, 5) and vecs.shape == (8, 9, 5, 5)
    torch.testing.assert_close(vals.reshape(72, 5), flat_vals, rtol=0, atol=0)
    gen = torch.Generator().manual_seed(3)
    d32 = torch.randn(200, 33, generator=gen) * 3
    z32 = torch.randn(200, 33, generator=gen)
    c32 = torch.randn(200, generator=gen)
    vals32, vecs32 = rank_one_eigh(d32, z32, c32)
    dense = _dense(d32.double(), z32.double(), c32.double())
    expected = torch.linalg.eigvalsh(dense)
    scale = dense.abs().flatten(1).amax(-1, keepdim=True)
    assert ((vals32.double().sort(-1).values - expected).abs() / scale).max() < 1e-5
    orth = vecs32.double().transpose(-1, -2) @ vecs32.double() - torch.eye(33, dtype=F64)
    assert orth.abs().max() < 1e-5
