"""Numbers transcribed from the papers, for the report's paper-vs-measured tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def paper_table(name: str) -> pd.DataFrame:
    """The transcribed table ``<name>.csv`` of this package (comment lines cite the source)."""
    path = Path(__file__).with_name(f"{name}.csv")
    if not path.is_file():
        raise FileNotFoundError(f"no paper results named {name!r} (expected {path})")
    return pd.read_csv(path, comment="#")
