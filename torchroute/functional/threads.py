"""A scoped single-thread region for solvers made of many small operators.

An iterative solver on a batch of small problems (a few hundred instances of ``K ~ 10``)
runs hundreds of operators per iteration on tensors of a few thousand elements. Each one
that torch splits over its intra-op threads pays a fork-join; on a busy machine a worker
thread that is not scheduled for a time slice stalls the caller at every join, and the
solver runs several times slower with torch's default threads than with one (measured in
``benchmarks/graph_program.py --load``; see ``docs/performance.md``). Such solvers run their
CPU work inside :func:`single_threaded`, which sets torch's intra-op threads to one and
restores the previous setting when the block ends (also on an exception).
:func:`intra_op_threads` is the same for any fixed count; oracle pre-training runs inside it
so that its reductions (hence its weights) do not depend on the caller's thread count.

``torch.set_num_threads`` is process-wide: torch operators that other Python threads run
during the block also run on one thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def intra_op_threads(num_threads: int | None) -> Iterator[None]:
    """Run the block with ``num_threads`` intra-op threads, restored after (``None``: as is)."""
    if num_threads is None or torch.get_num_threads() == num_threads:
        yield
        return
    if num_threads < 1:
        raise ValueError(f"num_threads must be >= 1 or None, got {num_threads}")
    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@contextlib.contextmanager
def single_threaded(device: torch.device | str = "cpu") -> Iterator[None]:
    """Run the block with one intra-op thread when ``device`` is the CPU (else unchanged)."""
    if torch.device(device).type != "cpu":
        yield
        return
    with intra_op_threads(1):
        yield
