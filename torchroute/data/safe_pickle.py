"""Read a pickle of plain data (dicts, lists, numbers, strings, numpy arrays) without running
its code.

Unpickling calls whatever a file names: a planted ``__reduce__`` runs ``os.system`` as the
file is read. :func:`load_data_pickle` reads with an unpickler whose ``find_class`` builds
only the few numpy objects an array needs (:data:`ALLOWED`); the built-in containers and
scalars need no class at all. Any other class or function named by the file is refused
before it is looked up, so nothing from the file runs and no trust is needed.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

from torchroute.data.table import TableError

#: ``(module, name)`` pairs a pickled numpy array (of numbers, strings or such objects) needs:
#: numpy 2 writes ``numpy._core``, numpy 1 ``numpy.core``
ALLOWED: frozenset[tuple[str, str]] = frozenset(
    (module, name)
    for core in ("numpy._core", "numpy.core")
    for module, name in (
        (f"{core}.multiarray", "_reconstruct"),
        (f"{core}.multiarray", "scalar"),
        (f"{core}.numeric", "_frombuffer"),
    )
) | frozenset({("numpy", "ndarray"), ("numpy", "dtype")})


class _DataUnpickler(pickle.Unpickler):
    """An unpickler that looks up only the objects of :data:`ALLOWED`."""

    def find_class(self, module: str, name: str) -> Any:
        """The object ``module.name`` when it is one of :data:`ALLOWED`, else refused."""
        if (module, name) not in ALLOWED:
            raise pickle.UnpicklingError(
                f"it names {module}.{name}, which is not a numpy array part; only plain data "
                "(dicts, lists, numbers, strings, numpy arrays) is read from a pickle"
            )
        return super().find_class(module, name)


def load_data_pickle(path: str | Path) -> Any:
    """The plain data pickled in ``path``, read without running any of the file's code.

    Args:
        path: a pickle of dicts, lists, tuples, numbers, strings and numpy arrays.

    Raises:
        TableError: one line naming the file: it is missing, unreadable, or names a class or
            function other than a numpy array's parts (nothing of it was run).
    """
    path = Path(path)
    if not path.is_file():
        raise TableError(f"{path}: no such file")
    try:
        return _DataUnpickler(io.BytesIO(path.read_bytes())).load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError) as err:
        raise TableError(f"{path}: could not be read as a pickle of plain data ({err})") from err


__all__ = ["ALLOWED", "load_data_pickle"]
