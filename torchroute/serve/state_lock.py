"""One state, one process: an exclusive lock on a router's state for the process's life.

A router's state (its checkpoint and decision log) is written by the process serving it;
a second ``serve`` or ``gateway`` started on the same state would write the same SQLite log
beside it. :class:`StateLock` takes ``fcntl.flock`` on ``<state>.lock`` next to the state
file (created ``0600``, holding the pid of its holder) before anything of the state is
written or discarded; the operating system drops the lock when the process ends, however
it ends (``kill -9`` included).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from torchroute.errors import StateInUse as StateInUse


def lock_path(state_path: Path) -> Path:
    """The lock file of the state ``state_path``: ``<state>.lock``."""
    return state_path.with_name(state_path.name + ".lock")


def _missing_folders(folder: Path) -> list[Path]:
    """The folders ``folder.mkdir(parents=True)`` would create, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _holder(path: Path) -> str:
    """The pid written in the lock file ``path``, as a phrase (empty when unknown)."""
    try:
        pid = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


class StateLock:
    """An exclusive lock on the state at ``state_path``, held until :meth:`release`.

    Args:
        state_path: the router's state file (``.pt``); the lock is ``<state>.lock``.
        flag: the flag that chose the state, named in the messages (``--state``).

    Raises:
        StateInUse: another process holds the lock.
        PermissionError: the state's folder cannot be created or written.
    """

    def __init__(self, state_path: Path, flag: str = "--state") -> None:
        self.path = lock_path(Path(state_path))
        folder = self.path.parent
        self._made = _missing_folders(folder)
        self._made_file = False
        folder.mkdir(parents=True, exist_ok=True)
        try:
            self._fd = self._lock(flag)
        except BaseException:
            self._undo()
            raise
        os.ftruncate(self._fd, 0)
        os.write(self._fd, f"{os.getpid()}\n".encode("ascii"))

    def _lock(self, flag: str) -> int:
        """The descriptor of the lock file, locked (retried when the file was replaced
        between its opening and its lock)."""
        while True:
            self._made_file = self._made_file or not self.path.exists()
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise StateInUse(
                    f"{flag}: the state {self.path.with_suffix('').name} in "
                    f"{self.path.parent} is in use by another process{_holder(self.path)}; "
                    f"one state, one process: stop it, or give another {flag}"
                ) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)

    def release(self, *, undo: bool = False) -> None:
        """Drop the lock; ``undo``: also remove the lock file and the folders this lock
        created (a start refused after the lock leaves nothing behind)."""
        if self._fd < 0:
            return
        if undo:
            self._undo()
        os.close(self._fd)
        self._fd = -1

    def _undo(self) -> None:
        if self._made_file:
            self.path.unlink(missing_ok=True)
        for folder in self._made:
            try:
                folder.rmdir()
            except OSError:  # not empty: something else wrote there
                break
