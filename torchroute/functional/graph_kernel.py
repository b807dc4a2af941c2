"""The SquareCB-G solver's interior-point iterations in one C++ call (CPU, float64).

:func:`torchroute.functional.graph_program.graph_squarecb_probs` runs ~15 iterations of
~230 small tensor operators on a batch of instances; on the CPU each operator is a dispatch
and a pass over a few thousand elements, and on a busy machine the many small steps are slow.
This operator (``graph_kernel.cpp``, built into the same torch extension as the LinUCB
kernels, :mod:`torchroute.functional.ridge_kernel`) runs the same iteration per instance in
plain loops on ``K x K`` arrays, instances claimed in chunks of 4 by torch's intra-op
threads (``at::parallel_for``, one fork-join per call). Same start, centring, second-order
correction, line search and certificate as the eager path; the Cholesky factorisation and
the sums run in another order, so the two agree to rounding (not bit for bit).
"""

from __future__ import annotations

import torch
from torch import Tensor

from torchroute.functional.ridge_kernel import kernel_available, kernel_library

#: Arms above which the eager path (whose batched products then pay off) is used.
MAX_K = 32
#: Instances per intra-op thread below which a call stays on the calling thread.
MIN_PER_THREAD = 16


def fused_solver_available(device: torch.device, k: int) -> bool:
    """Whether ``kernel="auto"`` takes the fused solver: CPU, ``2 <= K <= MAX_K``, built.

    Warns once per process (:func:`~torchroute.functional.ridge_kernel.kernel_available`)
    when the extension cannot be built or loaded.
    """
    return device.type == "cpu" and 2 <= k <= MAX_K and kernel_available()


def graph_squarecb_fused(
    f: Tensor, graph: Tensor, scale: Tensor, tol: float, max_iter: int
) -> Tensor:
    """Interior-point solve of ``N`` scaled SquareCB-G instances.

    Args:
        f: ``[N, K]`` float64 scaled losses ``f' = gamma (f - min f)``.
        graph: ``[N, K, K]`` float64 0/1 graph with its diagonal set.
        scale: ``[N]`` float64 ``tol * gamma`` (the absolute floor of the stopping rule).
        tol: relative tolerance of the certificate.
        max_iter: iteration budget per instance.

    Returns:
        ``[N, K]`` float64 iterates (not yet clamped and renormalised).
    """
    n, k = f.shape
    for name, t, shape in (("f", f, (n, k)), ("graph", graph, (n, k, k)), ("scale", scale, (n,))):
        if t.dtype != torch.float64 or t.device.type != "cpu" or tuple(t.shape) != shape:
            raise ValueError(
                f"fused SquareCB-G solver: {name} must be a CPU float64 {shape} tensor, "
                f"got {t.dtype} {tuple(t.shape)} on {t.device}"
            )
    out = torch.empty(n, k, dtype=torch.float64)
    threads = max(1, min(torch.get_num_threads(), n // MIN_PER_THREAD))
    kernel_library()  # loads the extension (torch.ops.torchroute_graph)
    torch.ops.torchroute_graph.graph_squarecb_solve(
        f.contiguous(),
        graph.contiguous(),
        scale.contiguous(),
        float(tol),
        int(max_iter),
        out,
        threads,
    )
    return out
