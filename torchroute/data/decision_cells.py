"""Cell readers for decision logs: each raises naming the file, row and column of a bad cell."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from torchroute.errors import DecisionLogError


class CellChecker:
    """Column readers that raise naming the file, row and column of the first bad cell."""

    def __init__(self, frame: pd.DataFrame, source: str) -> None:
        self.frame, self.source = frame, source
        self.ids: list[str] | None = None

    def fail(self, i: int, column: str, what: str) -> None:
        """Raise :class:`DecisionLogError` naming the file, row ``i``, its id and ``column``."""
        rid = f" (request_id {self.ids[i]!r})" if self.ids is not None else ""
        raise DecisionLogError(f"{self.source}: row {i + 1}{rid}, column {column!r}: {what}")

    def strings(self, column: str) -> list[str]:
        """The non-empty string cells of ``column`` (one per row)."""
        values = self.frame[column].tolist()
        for i, v in enumerate(values):
            if v is None or (isinstance(v, float) and np.isnan(v)) or str(v) == "":
                self.fail(i, column, "empty; expected a string")
        return [str(v) for v in values]

    def floats(self, column, lo, hi, open_lo=False, nullable=False) -> Tensor:
        """The numbers of ``column`` as ``[n]`` float64, each in ``[lo, hi]`` (``(lo, hi]``
        with ``open_lo``; NaN for empty cells when ``nullable``)."""
        values = pd.to_numeric(self.frame[column], errors="coerce").to_numpy(np.float64)
        raw = self.frame[column].tolist()
        for i, (v, r) in enumerate(zip(values, raw)):
            blank = r is None or (isinstance(r, float) and np.isnan(r))
            if np.isnan(v) and not (blank and nullable):
                expected = "a number" if not nullable else "a number or null"
                self.fail(i, column, f"{r!r} is not {expected}{_range(lo, hi, open_lo)}")
            if np.isnan(v):
                continue
            if (
                not np.isfinite(v)
                or (lo is not None and (v < lo or (open_lo and v <= lo)))
                or (hi is not None and v > hi)
            ):
                self.fail(i, column, f"{v!r} is out of range; expected{_range(lo, hi, open_lo)}")
        return torch.tensor(values, dtype=torch.float64)

    def integers(self, column: str) -> Tensor:
        """The whole numbers ``>= 0`` of ``column`` as ``[n]`` long."""
        values = self.floats(column, lo=0.0, hi=None)
        for i in torch.nonzero(values != values.round()).flatten()[:1].tolist():
            self.fail(i, column, f"{float(values[i])!r} is not a whole number >= 0")
        return values.long()

    def lists(self, column: str, kind: type) -> list[list]:
        """The list cells of ``column`` (native lists or JSON text), each element a ``kind``."""
        out = []
        for i, cell in enumerate(self.frame[column].tolist()):
            if isinstance(cell, str):
                try:
                    cell = json.loads(cell)
                except json.JSONDecodeError:
                    self.fail(i, column, f"{cell[:40]!r} is not a JSON list")
            if isinstance(cell, np.ndarray):
                cell = cell.tolist()
            if not isinstance(cell, list | tuple) or len(cell) == 0:
                self.fail(i, column, f"expected a non-empty list, got {type(cell).__name__}")
            try:
                values = [kind(v) for v in cell]
            except (TypeError, ValueError):
                self.fail(i, column, f"expected a list of {kind.__name__}, got {cell[:4]}...")
            if kind is float and not np.isfinite(values).all():
                self.fail(i, column, "contains NaN or infinite values")
            out.append(values)
        return out

    def vectors(self, column: str) -> Tensor:
        """The list cells of ``column`` as one ``[n, d]`` float64 tensor (equal lengths)."""
        rows = self.lists(column, float)
        d = len(rows[0])
        for i, row in enumerate(rows):
            if len(row) != d:
                self.fail(i, column, f"{len(row)} entries, but row 1 has {d}")
        return torch.tensor(rows, dtype=torch.float64)


def _range(lo, hi, open_lo) -> str:
    if lo is None and hi is None:
        return " (finite)"
    if hi is None:
        return f" >= {lo}"
    return f" in {'(' if open_lo else '['}{lo}, {hi}]"
