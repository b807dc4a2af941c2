"""Categorical sampling, random tie-breaking and the minimum-probability floor."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchroute.functional import sampling
from torchroute.functional.sampling import (
    argmax_random_ties,
    one_hot_probs,
    probability_floor,
    sample_categorical,
)

F64 = torch.float64


def _chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson statistic over the cells with positive expected count."""
    n = counts.sum()
    expected = n * probs
    keep = expected > 0
    return float((((counts - expected) ** 2)[keep] / expected[keep]).sum())


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_sample_categorical_frequencies_match_probs(dtype):
    probs = torch.tensor([[0.5, 0.0, 0.2, 0.3], [0.05, 0.05, 0.0, 0.9]], dtype=dtype)
    n = 20_000
    gen = torch.Generator().manual_seed(0)
    draws = sample_categorical(probs.expand(n, 2, 4), gen)  # [n, 2]
    assert draws.shape == (n, 2) and draws.dtype == torch.long
    for row in range(2):
        counts = torch.bincount(draws[:, row], minlength=4).to(F64)
        assert counts[probs[row] == 0].sum() == 0
        # 3 degrees of freedom (2 here, as one cell is empty): P(chi2_3 > 25) < 2e-5.
        assert _chi_square(counts, probs[row].to(F64)) < 25.0


def test_sample_categorical_unnormalised_rows_and_degenerate_rows():
    probs = torch.tensor([[0.0, 0.0, 2.0], [1.0, 0.0, 0.0], [0.0, 3.0, 1.0]], dtype=F64)
    gen = torch.Generator().manual_seed(1)
    draws = sample_categorical(probs.expand(5000, 3, 3), gen)
    assert (draws[:, 0] == 2).all() and (draws[:, 1] == 0).all()
    freq1 = (draws[:, 2] == 1).to(F64).mean()
    assert abs(freq1 - 0.75) < 0.03


def test_sample_categorical_is_deterministic_under_a_seeded_generator():
    probs = torch.softmax(torch.randn(4, 3, 6, generator=torch.Generator().manual_seed(2)), -1)
    a = sample_categorical(probs, torch.Generator().manual_seed(7))
    b = sample_categorical(probs, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)
    gen = torch.Generator().manual_seed(7)
    draws = torch.stack([sample_categorical(probs, gen) for _ in range(20)])
    assert len({tuple(d.flatten().tolist()) for d in draws}) > 1


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("extreme", ["zero", "one"])
def test_sample_categorical_never_picks_a_zero_probability_arm_at_the_edges(
    monkeypatch, dtype, extreme
):
    """The uniform draw may be exactly 0 (``torch.rand`` is ``[0, 1)``) or just below 1."""
    probs = torch.tensor(
        [[0.0, 0.5, 0.5, 0.0], [0.0, 0.0, 1.0, 0.0], [0.3, 0.0, 0.7, 0.0]], dtype=dtype
    )
    value = 0.0 if extreme == "zero" else 1.0 - torch.finfo(dtype).eps / 2
    real_rand = torch.rand

    def fake_rand(*size, **kwargs):
        return torch.full_like(real_rand(*size, **kwargs), value)

    monkeypatch.setattr(sampling.torch, "rand", fake_rand)
    action = sample_categorical(probs)
    assert (probs.gather(-1, action[:, None]) > 0).all(), action


def test_argmax_random_ties_is_uniform_among_ties_and_exact_otherwise():
    n = 12_000
    scores = torch.tensor([[1.0, 3.0, 0.5, 3.0, 3.0], [0.0, 2.0, -1.0, 1.999, 0.0]], dtype=F64)
    gen = torch.Generator().manual_seed(3)
    picks = argmax_random_ties(scores.expand(n, 2, 5), gen)
    assert picks.shape == (n, 2) and picks.dtype == torch.long
    counts = torch.bincount(picks[:, 0], minlength=5).to(F64)
    assert counts[[0, 2]].sum() == 0
    assert _chi_square(counts[[1, 3, 4]], torch.full((3,), 1 / 3, dtype=F64)) < 20.0
    assert (picks[:, 1] == 1).all()


def test_argmax_random_ties_tolerance():
    scores = torch.tensor([[2.0, 1.9999, 0.0]], dtype=F64).expand(4000, 1, 3)
    picks = argmax_random_ties(scores, torch.Generator().manual_seed(4), tol=1e-3)
    assert set(picks.unique().tolist()) == {0, 1}
    picks = argmax_random_ties(scores, torch.Generator().manual_seed(4))
    assert (picks == 0).all()


def test_one_hot_probs():
    p = one_hot_probs(torch.tensor([[2, 0]]), 3, F64)
    assert p.dtype == F64
    assert torch.equal(p, torch.tensor([[[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]], dtype=F64))


def _brute_force_lambda(p: torch.Tensor, floor: float) -> torch.Tensor:
    """Smallest ``lam`` on a ``[0, 1]`` grid (step 2e-5) with ``min((1-lam) p + lam/K) >= floor``.

    ``p [N, K]`` -> ``[N]``.
    """
    k = p.shape[-1]
    grid = torch.linspace(0.0, 1.0, 50_001, dtype=F64)[:, None]  # [G, 1]
    mins = ((1 - grid[..., None]) * p + grid[..., None] / k).amin(-1)  # [G, N]
    first = (mins >= floor - 1e-15).to(torch.int8).argmax(0)  # first feasible grid point
    return grid[first, 0]


@pytest.mark.parametrize("floor", [1e-3, 0.05, 0.2, 0.25])
def test_probability_floor_is_the_smallest_uniform_mixing(floor):
    gen = torch.Generator().manual_seed(5)
    k = 4
    raw = torch.rand(6, 2, k, generator=gen, dtype=F64) ** 4
    raw[0, 0] = torch.tensor([1.0, 0.0, 0.0, 0.0])  # a point mass
    raw[0, 1] = 1.0  # uniform: always feasible
    probs = raw / raw.sum(-1, keepdim=True)
    out = probability_floor(probs, floor)
    assert out.shape == probs.shape
    assert (out >= floor * (1 - 1e-12)).all()
    torch.testing.assert_close(out.sum(-1), torch.ones(6, 2, dtype=F64), rtol=0, atol=1e-12)
    feasible = probs.amin(-1) >= floor
    assert torch.equal(out[feasible], probs[feasible])
    p, q = probs.reshape(-1, k), out.reshape(-1, k)
    uniform = torch.full((k,), 1 / k, dtype=F64)
    # Recover lam from the output: q - p = lam (u - p) on every coordinate.
    diff = uniform - p  # [N, K]
    j = diff.abs().argmax(-1, keepdim=True)
    lam = ((q - p).gather(-1, j) / diff.gather(-1, j).where(diff.gather(-1, j) != 0, 1.0))[:, 0]
    torch.testing.assert_close(
        q, (1 - lam[:, None]) * p + lam[:, None] * uniform, rtol=0, atol=1e-12
    )
    lam_ref = _brute_force_lambda(p, floor)
    assert (lam >= lam_ref - 2e-5).all() and (lam <= lam_ref + 1e-9).all(), (lam, lam_ref)


def test_probability_floor_edge_cases():
    probs = torch.tensor([[0.9, 0.1, 0.0]], dtype=F64)
    assert probability_floor(probs, 0.0) is probs
    torch.testing.assert_close(
        probability_floor(probs, 1 / 3), torch.full((1, 3), 1 / 3, dtype=F64)
    )
    with pytest.raises(ValueError, match=r"floor=0\.34 is above 1/K=0\.3333"):
        probability_floor(probs, 0.34)


def test_sample_categorical_inverts_the_cdf_of_one_uniform_in_the_probs_dtype():
    """Reference: one ``U[0, 1)`` per row drawn in float64 from the same seed, then the first
    arm whose cumulative mass (numpy, float64) reaches ``u * total``. Pins the generator
    stream (a float32 draw would consume it differently and change the arms)."""
    gen = torch.Generator().manual_seed(8)
    probs = torch.rand(50, 3, 5, generator=gen, dtype=F64) ** 2
    probs[:, :, 1] = 0.0  # a zero-mass arm in every row
    action = sample_categorical(probs, torch.Generator().manual_seed(9))
    u = torch.rand(50, 3, 1, generator=torch.Generator().manual_seed(9), dtype=F64).numpy()
    cdf = np.cumsum(probs.numpy(), -1)
    expected = (cdf < u * cdf[..., -1:]).sum(-1)
    np.testing.assert_array_equal(action.numpy(), expected)
    assert not (action == 1).any()


def test_sampling_allocates_on_the_device_of_its_input():
    """The ``meta`` device stands in for a GPU: a CPU allocation inside would fail to mix."""
    probs = torch.full((3, 2, 4), 0.25, device="meta")
    assert sample_categorical(probs).device.type == "meta"
    assert argmax_random_ties(probs).device.type == "meta"
    assert probability_floor(probs, 0.1).device.type == "meta"
