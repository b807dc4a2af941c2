"""Atomic file writes: a temporary file in the target folder, then ``os.replace``."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pandas as pd


@contextmanager
def atomic_write(path: str | Path, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file next to ``path``; on success it replaces ``path`` at once.

    An interruption leaves the previous file (or none), never half a file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    with atomic_write(path, "w") as f:
        f.write(text)
    return Path(path)


def write_csv_atomic(path: str | Path, frame: pd.DataFrame) -> Path:
    """Write ``frame`` as CSV (no index) to ``path`` atomically."""
    with atomic_write(path, "w") as f:
        frame.to_csv(f, index=False)
    return Path(path)
