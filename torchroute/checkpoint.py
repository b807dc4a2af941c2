"""Self-describing, atomically written checkpoints of a simulation run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from torchroute.errors import UserError
from torchroute.io import atomic_write

FORMAT = 1


class CheckpointError(UserError, ValueError):
    """A checkpoint cannot be used: unreadable, truncated, or from another run."""


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` (plus ``format``) to ``path`` atomically: temp file, then rename.

    An interruption leaves either the previous file or the new one, never half a file.
    """
    with atomic_write(path, "wb") as f:
        torch.save({"format": FORMAT, **payload}, f)
    return Path(path)


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
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated zip, wrong format, unpickling refused ...
        raise CheckpointError(
            f"checkpoint {path} cannot be read (truncated or not a torchroute checkpoint): {exc}"
        ) from exc
    found = payload.get("format") if isinstance(payload, dict) else None
    if found != FORMAT:
        raise CheckpointError(f"checkpoint {path} has format {found!r}, expected {FORMAT}")
    return payload
