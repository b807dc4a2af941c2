"""The models behind a run's arm indices, so that the report names arms by model.

A run's per-arm result columns are indexed (``share_<k>``, ``arm_accuracy_<k>``); the
names are in the run folder's ``problem.pt`` (``arm_names``). :func:`attach_arm_names`
puts them on a results frame (``frame.attrs["arm_names"]``) and :func:`arm_label` reads
them back, falling back to ``arm <k>`` for results whose run folder has no problem file.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from torchroute.checkpoint import load_checkpoint

#: the key of a results frame's ``attrs`` holding the ``K`` model names
ATTR = "arm_names"


def run_arm_names(run_dir: str | Path) -> list[str] | None:
    """The ``K`` model names of ``run_dir/problem.pt`` (its ``problem`` state, see
    :mod:`torchroute.run.saved`; ``None`` when missing or unreadable)."""
    path = Path(run_dir) / "problem.pt"
    if not path.is_file():
        return None
    try:
        payload = load_checkpoint(path)
    except Exception:  # a damaged file only costs the names: the report says "arm <k>"
        return None
    problem = payload.get("problem") if isinstance(payload.get("problem"), dict) else payload
    names = problem.get("arm_names")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    return names


def attach_arm_names(frame: pd.DataFrame, names: list[str] | None) -> pd.DataFrame:
    """``frame`` with ``names`` in ``frame.attrs`` (unchanged when ``names`` is ``None``)."""
    if names is not None:
        frame.attrs[ATTR] = list(names)
    return frame


def arm_label(results: pd.DataFrame, k: int) -> str:
    """Arm ``k`` of ``results`` by model (``"model-x (arm 3)"``), else ``"arm 3"``."""
    names = results.attrs.get(ATTR)
    if isinstance(names, list) and 0 <= k < len(names):
        return f"{names[k]} (arm {k})"
    return f"arm {k}"


__all__ = ["ATTR", "arm_label", "attach_arm_names", "run_arm_names"]
