"""Saving report figures: one PNG written atomically, the figure closed."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from torchroute.io import atomic_write


def save_figure(fig, path: str | Path, dpi: int = 120) -> Path:
    """Write ``fig`` to ``path`` as PNG atomically and close it."""
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return Path(path)


__all__ = ["save_figure"]
