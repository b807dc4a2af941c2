"""The fused (C++) SquareCB-G solver against the eager torch path, instance by instance.

The eager path is the reference here (it is checked against cvxpylayers in
``test_graph_program.py``, as the fused path is there too): same iteration, another
summation order, so values agree to ~1e-9 (bound tested: 5e-9), not bit for bit. The
probabilities agree to the same bound wherever the minimiser is sharp; where it is flat (the
objective moves by less than 1e-9 relative over a range of p), the two paths may stop at
points up to ~1e-5 apart, and that is checked to be so: equal values at both points and at
their midpoint.
"""

from __future__ import annotations

import pytest
import torch

from tests.functional.test_graph_program import GRAPHS, make_instances
from torchroute.functional import ridge_kernel as rk
from torchroute.functional.graph_program import graph_squarecb_probs, graph_squarecb_value


@pytest.fixture(scope="module", autouse=True)
def _kernel() -> None:
    try:
        rk.kernel_library()
    except rk.KernelUnavailableError as err:
        pytest.skip(f"no C++ compiler to build the kernel: {err}")


@pytest.mark.parametrize("kind", GRAPHS)
@pytest.mark.parametrize("k", [2, 3, 5, 11, 19, 32])
def test_fused_agrees_with_eager(k: int, kind: str) -> None:
    # make_instances mixes in all-tied, partly tied, 0/1 and widely spread losses and
    # gamma over 1e-2 .. 1e4: the degenerate cases of the eager tests.
    f, g, gamma = make_instances(k, 40, kind, seed=7 + k)
    p_eager = graph_squarecb_probs(f, g, gamma, kernel="torch")
    p_fused = graph_squarecb_probs(f, g, gamma, kernel="fused")
    assert p_fused.dtype == torch.float64 and p_fused.shape == (40, k)
    v_eager = graph_squarecb_value(p_eager, f, g, gamma)
    v_fused = graph_squarecb_value(p_fused, f, g, gamma)
    rel = ((v_fused - v_eager) / v_eager.abs().clamp_min(1.0)).abs().max()
    assert rel <= 5e-9, f"K={k} {kind}: value gap {rel:.3e}"
    gap = (p_fused - p_eager).abs().amax(-1)
    apart = gap > 5e-9
    # instances whose probabilities differ more: a flat minimiser, so the value is the same
    # (relative 1e-9) at both points and on the segment between them, and the gap is small
    v_mid = graph_squarecb_value(0.5 * (p_eager + p_fused), f, g, gamma)
    for v in (v_fused, v_mid):
        flat = ((v - v_eager) / v_eager.abs().clamp_min(1.0)).abs()
        assert (flat[apart] <= 1e-9).all(), f"K={k} {kind}: probability gap {gap.max():.3e}"
    assert gap.max() <= 1e-4 and apart.sum() <= 2, f"K={k} {kind}: {apart.sum()} apart"


def test_fused_float32_batched_and_threads() -> None:
    # float32 input, a leading batch shape, one and two intra-op threads: one result.
    f, g, gamma = make_instances(11, 96, "sparse", seed=1)
    f32, gamma32 = f.float().reshape(4, 24, 11), gamma.float().reshape(4, 24)
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = graph_squarecb_probs(f32, g.reshape(4, 24, 11, 11), gamma32, kernel="fused")
        torch.set_num_threads(1)
        one = graph_squarecb_probs(f32, g.reshape(4, 24, 11, 11), gamma32, kernel="fused")
    finally:
        torch.set_num_threads(previous)
    assert two.dtype == torch.float32 and two.shape == (4, 24, 11)
    assert torch.equal(one, two)  # instances are independent: no thread changes a sum
    eager = graph_squarecb_probs(f32, g.reshape(4, 24, 11, 11), gamma32, kernel="torch")
    # Some of these minimisers are flat (V moves by less than the tolerance over a range of
    # p): there the two paths stop at points a few 1e-6 apart with values that agree.
    assert (two - eager).abs().max() <= 2e-5
    args = (f32.double().reshape(96, 11), g, gamma32.double().reshape(96))
    v_two = graph_squarecb_value(two.double().reshape(96, 11), *args)
    v_eager = graph_squarecb_value(eager.double().reshape(96, 11), *args)
    assert ((v_two - v_eager) / v_eager.abs().clamp_min(1.0)).abs().max() <= 1e-7


def test_auto_takes_the_fused_path_on_the_cpu() -> None:
    f, g, gamma = make_instances(11, 20, "dense", seed=2)
    auto = graph_squarecb_probs(f, g, gamma)
    assert torch.equal(auto, graph_squarecb_probs(f, g, gamma, kernel="fused"))
    # above 32 arms "auto" is the eager path
    f, g, gamma = make_instances(33, 3, "dense", seed=2)
    assert torch.equal(
        graph_squarecb_probs(f, g, gamma), graph_squarecb_probs(f, g, gamma, kernel="torch")
    )


def test_bad_kernel_name() -> None:
    with pytest.raises(ValueError, match="kernel must be"):
        graph_squarecb_probs(torch.zeros(3), torch.eye(3, dtype=torch.bool), 1.0, kernel="cuda")
