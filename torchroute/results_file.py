"""Reading a run's ``results.csv`` / ``curves.csv`` back, refusing damaged or edited files.

``torchroute report`` reads files that a run wrote but a person may have cut, edited or
half-copied; each check raises ``ValueError`` with one line naming the file, the column and
the row, so no report is built from partial rows.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pandas as pd

from torchroute.errors import ResultsFileError

#: columns a single-choice run writes together; one without the others is a damaged file
SINGLE_CHOICE = ("avg_utility", "accuracy", "avg_cost")
#: columns that may never be missing in a row
LABELS = ("learner", "rho", "seed")
#: measurement columns (by prefix or name): numbers only
MEASURED_PREFIXES = ("avg_", "cum_", "stat_", "share_", "arm_", "feasible")
MEASURED = ("rho", "seed", "rounds", "round", "accuracy", "trial")
#: a subset trial's target box (lower_<n>, upper_<n>): an infinite bound means no bound
BOX_BOUNDS = ("lower_", "upper_")


def _check_rows(path: Path) -> None:
    """Every row has the header's number of fields, and the file ends with a newline."""
    with path.open(newline="") as f:
        text = f.read()
    if not text.strip():
        raise ResultsFileError(f"{path}: the file is empty; expected a header and rows")
    if not text.endswith("\n"):
        raise ResultsFileError(f"{path}: the last line is cut off (the file is truncated)")
    rows = csv.reader(text.splitlines())
    width = len(next(rows))
    for number, row in enumerate(rows, start=2):
        if len(row) != width:
            raise ResultsFileError(
                f"{path}: line {number} has {len(row)} fields, the header {width} "
                "(the file is truncated or was edited)"
            )


def read_run_csv(path: str | Path) -> pd.DataFrame:
    """Read a results or curves CSV of a run, checked (see the module docstring).

    Raises:
        ResultsFileError: unreadable, empty, truncated, a label cell missing, a measurement
            column that is not numeric or holds an infinite value, or a negative ``rho``.
    """
    path = Path(path)
    _check_rows(path)
    try:
        frame = pd.read_csv(path)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as err:
        raise ResultsFileError(f"{path}: could not be read as CSV ({err})") from err
    if frame.empty or "learner" not in frame.columns:
        raise ResultsFileError(f"{path}: has no rows or no 'learner' column")
    for column in (c for c in LABELS if c in frame.columns):
        missing = frame[column].isna().to_numpy().nonzero()[0]
        if missing.size:
            raise ResultsFileError(
                f"{path}: column {column!r} is empty in {missing.size} rows, e.g. line "
                f"{missing[0] + 2}"
            )
    for column in frame.columns:
        measured = column.startswith(MEASURED_PREFIXES) or column in MEASURED
        if not measured or pd.api.types.is_numeric_dtype(frame[column]):
            continue
        numbers = pd.to_numeric(frame[column], errors="coerce")
        bad = (numbers.isna() & frame[column].notna()).to_numpy().nonzero()[0]
        if bad.size:
            raise ResultsFileError(
                f"{path}: column {column!r} must be numeric, got {frame[column].iloc[bad[0]]!r} "
                f"on line {bad[0] + 2}"
            )
    for column in frame.select_dtypes("number").columns:
        if column.startswith(BOX_BOUNDS):  # a subset trial's target box: -inf/inf = no bound
            continue
        values = frame[column].to_numpy(dtype=float)
        infinite = [i for i, v in enumerate(values) if math.isinf(v)]
        if infinite:
            raise ResultsFileError(
                f"{path}: column {column!r} holds an infinite value on line {infinite[0] + 2}"
            )
    if "rho" in frame.columns and (frame["rho"] < 0).any():
        line = int((frame["rho"] < 0).to_numpy().nonzero()[0][0]) + 2
        raise ResultsFileError(f"{path}: rho must be >= 0, got a negative rho on line {line}")
    return frame


def check_results_columns(frame: pd.DataFrame, path: str | Path) -> None:
    """Refuse a single-choice results file missing some of :data:`SINGLE_CHOICE`, and rows
    whose measurement cells of those columns are empty."""
    present = [c for c in SINGLE_CHOICE if c in frame.columns]
    if "rho" in frame.columns and present and len(present) < len(SINGLE_CHOICE):
        missing = [c for c in SINGLE_CHOICE if c not in frame.columns]
        raise ResultsFileError(
            f"{path}: a single-choice results file needs the columns {list(SINGLE_CHOICE)}; "
            f"{missing} are missing"
        )
    for column in present:
        empty = frame[column].isna().to_numpy().nonzero()[0]
        if empty.size:
            raise ResultsFileError(
                f"{path}: column {column!r} is empty in {empty.size} rows, e.g. line "
                f"{empty[0] + 2} (learner {frame['learner'].iloc[empty[0]]!r})"
            )


def check_reference(reference: str | None, learners: set[str], *, given: bool) -> str | None:
    """The reference learner of relative regret: ``reference`` when the results have it;
    ``None`` (no relative plot) when it was not ``given`` by the user and is absent; an error
    naming the learners when it was given and is absent."""
    if reference is None or reference in learners:
        return reference
    if given:
        raise ResultsFileError(
            f"--reference {reference!r} is not a learner of these results; "
            f"expected one of {sorted(learners)}"
        )
    return None
