"""A bounded CPU hog for the benchmarks' ``--load`` mode: one busy process per core.

``with cpu_hog():`` starts ``os.cpu_count()`` processes that spin (pure Python, no torch)
until the block ends, or ``limit_s`` seconds at the latest even if this process dies, so a
measurement inside the block sees a machine with every core contended, the way a shared
workstation or cluster node is. :func:`load_average` returns ``os.getloadavg()`` formatted
for the report lines.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

_SPIN = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end:\n    pass\n"


@contextlib.contextmanager
def cpu_hog(processes: int | None = None, limit_s: float = 600.0) -> Iterator[None]:
    """Keep ``processes`` (default: one per core) busy for the duration of the block."""
    n = processes or os.cpu_count() or 1
    code = _SPIN.format(limit=float(limit_s))
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
    time.sleep(0.2)  # let them start spinning
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def load_average() -> str:
    """``"load 1/5/15 min: a b c"`` of the machine now."""
    one, five, fifteen = os.getloadavg()
    return f"load 1/5/15 min: {one:.2f} {five:.2f} {fifteen:.2f}"
