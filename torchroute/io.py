"""Atomic file writes: a temporary file in the target folder, then ``os.replace``."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pandas as pd

from torchroute.errors import NotWritableError


@contextmanager
def atomic_write(path: str | Path, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file next to ``path``; on success it replaces ``path`` at once.

    An interruption leaves the previous file (or none), never half a file. A failing write
    (a full disk, a folder turned read-only) raises :class:`OSError` with the same ``errno``
    and a message naming ``path`` (``cannot write <path>: No space left on device``).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise _named(err, path) from err
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise _named(err, path) from err
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _named(err: OSError, path: Path) -> OSError:
    """``err`` with a message naming the file being written (the errno kept)."""
    if err.errno is None:
        return err
    return type(err)(err.errno, f"cannot write {path}: {err.strerror or err}")


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


def check_writable_folder(path: str | Path, what: str) -> Path:
    """Raise :class:`NotWritableError` unless ``path`` is, or can be created as, a folder
    that this process can write into; writes nothing that stays.

    The nearest existing folder of ``path`` is probed with a temporary file (permission bits
    alone say nothing for root or on read-only mounts).

    Args:
        path: the folder (it need not exist yet).
        what: how the message names it (``"out_dir"``, ``"--out"``).
    """
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise NotWritableError(f"{what}={path} exists and is not a folder")
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise NotWritableError(f"{what}={path}: {existing} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-probe.", dir=existing)
    except OSError as err:
        raise NotWritableError(
            f"{what}={path}: {existing} is not writable ({err.strerror or err})"
        ) from err
    os.close(fd)
    os.unlink(probe)
    return path


def not_a_file(path: str | Path) -> str:
    """Why ``path`` is no regular file to read, for an error: ``is a folder``, ``is a FIFO
    (named pipe)``, ``is a link to the device /dev/null``, ``is a broken link to ...``, or
    ``no such file``."""
    import stat

    path = Path(path)
    if path.is_symlink():
        target = os.path.realpath(path)
        if not os.path.exists(target):
            return f"is a broken link to {target}"
        return f"is a link to {target}, which {not_a_file(target)}"
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    if stat.S_ISFIFO(mode):
        return "is a FIFO (named pipe), not a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a file"
    return "is not a regular file"
