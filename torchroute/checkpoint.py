"""Self-describing, atomically written checkpoints of a simulation run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from torchroute.errors import CheckpointError
from torchroute.io import atomic_write

FORMAT = 1


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` (plus ``format``) to ``path`` atomically: temp file, then rename.

    An interruption leaves either the previous file or the new one, never half a file.
    """
    with atomic_write(path, "wb") as f:
        torch.save({"format": FORMAT, **payload}, f)
    return Path(path)


def read_weights(path: Path, what: str) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU; a one-line :class:`CheckpointError`
    naming ``what`` for a file it cannot read.

    A file holding anything but tensors and plain values (a planted pickle) is refused
    before any of it runs, as "not a torchroute file; refusing to unpickle it".
    """
    import pickle
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's note on a foreign pickle protocol
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise CheckpointError(f"{what} is not a torchroute file; refusing to unpickle it") from None
    except Exception as exc:  # truncated zip, wrong format ...
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        raise CheckpointError(
            f"{what} cannot be read (truncated or not a torchroute file): "
            f"{first or type(exc).__name__}"
        ) from None


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``; clear errors for bad files."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(
            f"checkpoint {path} is a folder; give a checkpoint file (such as "
            "<out_dir>/checkpoints/<learner>.pt)"
        )
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    payload = read_weights(path, f"checkpoint {path}")
    found = payload.get("format") if isinstance(payload, dict) else None
    if found != FORMAT:
        raise CheckpointError(f"checkpoint {path} has format {found!r}, expected {FORMAT}")
    return payload
