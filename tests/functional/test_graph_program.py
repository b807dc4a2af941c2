"""The batched SquareCB-G solver against cvxpylayers (docs/papers/cabs.md (CABS-C) step 3)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("cvxpylayers")

from tests.functional.graph_reference import reference_layer, reference_probs
from torchroute.functional.graph_program import (
    graph_squarecb_probs,
    graph_squarecb_value,
)
from torchroute.functional.ridge_kernel import KernelUnavailableError, kernel_library

GRAPHS = ("identity", "complete", "sparse", "dense")


def make_instances(k: int, n: int, kind: str, seed: int) -> tuple[torch.Tensor, ...]:
    """``n`` instances: losses ``U(0,1)`` with ties / extremes mixed in, log-uniform gamma."""
    gen = torch.Generator().manual_seed(seed)
    f = torch.rand(n, k, generator=gen, dtype=torch.float64)
    f[::5] = 0.5  # all tied
    if k > 2:
        f[1::5, : k // 2] = f[1::5, :1]  # partly tied
    f[2::5] = torch.where(f[2::5] > 0.5, 1.0, 0.0)  # extreme: 0 / 1 losses
    f[3::5] *= 50.0  # large spread
    gamma = 10 ** (torch.rand(n, generator=gen, dtype=torch.float64) * 6 - 2)  # 1e-2 .. 1e4
    if kind == "identity":
        g = torch.eye(k, dtype=torch.bool).expand(n, k, k)
    elif kind == "complete":
        g = torch.ones(n, k, k, dtype=torch.bool)
    else:
        density = 0.15 if kind == "sparse" else 0.7
        g = torch.rand(n, k, k, generator=gen) < density
    return f, g.clone(), gamma


def check_against_reference(
    k: int, n: int, kind: str, seed: int, bound: float = 1e-6, **kwargs: float | bool | str
) -> None:
    """Probabilities on the simplex whose exact ``V`` exceeds the reference's by at most
    ``bound`` relative to ``max(1, |V_ref|)``."""
    f, g, gamma = make_instances(k, n, kind, seed)
    p = graph_squarecb_probs(f, g, gamma, **kwargs)
    assert p.dtype == torch.float64 and p.shape == (n, k)
    assert (p >= 0).all()
    assert torch.allclose(p.sum(-1), torch.ones(n, dtype=torch.float64), atol=1e-9, rtol=0)
    p_ref = reference_probs(f, g, gamma, reference_layer(k))
    v = graph_squarecb_value(p, f, g, gamma)
    v_ref = graph_squarecb_value(p_ref, f, g, gamma)
    rel = (v - v_ref) / v_ref.abs().clamp_min(1.0)
    assert torch.isfinite(v).all()
    assert rel.max() <= bound, f"K={k} {kind}: worst relative excess {rel.max():.3e}"


def _kernel(name: str) -> str:
    """``name``, or a skip when the fused solver cannot be built here."""
    if name == "fused":
        try:
            kernel_library()
        except KernelUnavailableError as err:
            pytest.skip(f"no C++ compiler to build the kernel: {err}")
    return name


KERNELS = ("torch", "fused")  # the eager path and the C++ iteration (graph_kernel.py)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(
    ("k", "kind"), [(2, "identity"), (3, "dense"), (11, "sparse"), (11, "complete")]
)
def test_matches_cvxpylayers_fast(k: int, kind: str, kernel: str) -> None:
    check_against_reference(k, 10, kind, seed=k, kernel=_kernel(kernel))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("tol", [1e-1, 1e-3, 1e-7])
@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_certificate_bounds_the_excess(kind: str, tol: float, kernel: str) -> None:
    # The stopping certificate promises V(p) - V* <= tol max(1, |V(p)|); a loose tol stops
    # early, so this fails if the lower bound behind the certificate is not valid.
    bound = tol * (1 + 1e-6)
    check_against_reference(11, 20, kind, seed=3, bound=bound, tol=tol, kernel=_kernel(kernel))


def test_fixed_shape_path() -> None:
    # The path used off the CPU (finished instances frozen, batch-level flag), run here.
    check_against_reference(11, 20, "dense", seed=3, compact=False, kernel="torch")


def test_output_is_an_ordinary_tensor() -> None:
    f, g, gamma = make_instances(5, 4, "sparse", 1)
    p = graph_squarecb_probs(f, g, gamma)
    assert not p.is_inference() and not p.requires_grad
    weight = torch.ones(5, dtype=torch.float64, requires_grad=True)
    (p * weight).sum().backward()
    assert torch.allclose(weight.grad, p.sum(0))


@pytest.mark.slow
@pytest.mark.parametrize("kind", GRAPHS)
@pytest.mark.parametrize("k", [2, 3, 11, 19, 50])
@pytest.mark.parametrize("kernel", KERNELS)
def test_matches_cvxpylayers_sweep(k: int, kind: str, kernel: str) -> None:
    # 5 K x 4 graphs x 60 = 1,200 instances ("fused" at K = 50: beyond the "auto" limit)
    check_against_reference(k, 60, kind, seed=100 + k, kernel=_kernel(kernel))


def test_closed_forms() -> None:
    # Complete graph, tied losses: by symmetry and convexity the uniform distribution.
    k = 5
    p = graph_squarecb_probs(torch.zeros(k), torch.ones(k, k, dtype=torch.bool), 3.0)
    assert torch.allclose(p, torch.full((k,), 0.2), atol=1e-7)
    # K = 2, identity graph, brute force over a fine grid of p_1.
    f = torch.tensor([0.2, 0.7], dtype=torch.float64)
    eye = torch.eye(2, dtype=torch.bool)
    grid = torch.linspace(1e-6, 1 - 1e-6, 200001, dtype=torch.float64)
    probs = torch.stack([grid, 1 - grid], -1)
    v_grid = graph_squarecb_value(probs, f.expand(len(grid), 2), eye, 10.0).amin()
    v = graph_squarecb_value(graph_squarecb_probs(f, eye, 10.0), f, eye, 10.0)
    assert v <= v_grid + 1e-12 and v >= v_grid - 1e-5


def test_batched_shapes_and_gamma_tensor() -> None:
    f, g, gamma = make_instances(4, 6, "sparse", 0)
    p = graph_squarecb_probs(f.reshape(2, 3, 4), g.reshape(2, 3, 4, 4), gamma.reshape(2, 3))
    q = graph_squarecb_probs(f, g, gamma)
    assert p.shape == (2, 3, 4)
    assert torch.allclose(p.reshape(6, 4), q, atol=1e-12)
    assert graph_squarecb_probs(f.float(), g, 2.0).dtype == torch.float32


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((torch.zeros(3), torch.eye(4, dtype=torch.bool), 1.0), "graph must be"),
        ((torch.tensor([0.0, float("nan"), 1.0]), torch.eye(3, dtype=torch.bool), 1.0), "finite"),
        ((torch.zeros(3), torch.eye(3, dtype=torch.bool), 0.0), "gamma must be"),
        ((torch.zeros(3), torch.eye(3, dtype=torch.bool), -1.0), "gamma must be"),
    ],
)
def test_bad_input(args, match) -> None:
    with pytest.raises(ValueError, match=match):
        graph_squarecb_probs(*args)
