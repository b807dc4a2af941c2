"""The generic routing-table format: bring any table as CSV, Parquet or a pandas pickle.

Pickles are read only with ``trust_pickle=True`` (unpickling runs arbitrary code).

Two layouts are accepted; :func:`~torchroute.data.loader.load_table` tells them apart
(``format="auto"``: long when the file has ``arm`` and ``score`` columns, else wide).

**Long** — one row per (query, arm) pair::

    query_id, arm, score, cost [, text] [, split] [, group]
    q1,       gpt-4, 1.0,   0.0031, "What is 2+2?", test, arithmetic
    q1,       small, 0.0,   0.0001, "What is 2+2?", test, arithmetic

**Wide** — one row per query, a score and a cost column per arm::

    query_id [, text] [, split] [, group], score:<arm>, cost:<arm>, score:<arm2>, cost:<arm2>, ...

The column names of the wide layout are patterns (``score_pattern="score:{arm}"``,
``cost_pattern="cost:{arm}"``): ``score_pattern="{arm}", cost_pattern="{arm}_cost"`` reads
``gpt-4, gpt-4_cost, ...``; the arms are the names for which both patterns match a column.
The id, text, split and group columns are named by ``id_column`` (None: the row index),
``text_column``, ``split_column`` and ``group_column``.

Rules:

- ``score`` is the quality in ``[0, 1]`` (``score_scale=100`` reads percent; ``True`` /
  ``False`` read as 1 / 0); ``cost`` is ``>= 0`` (dollars per query, or any unit used
  consistently with ``rho``), or computed from per-token ``prices``
  (:mod:`torchroute.data.prices`), or one constant per model from ``costs``.
- Every arm has both a score and a cost; in the long layout each (query, arm) pair
  appears once, and an absent pair is a missing row.
- ``split`` is one of ``train``, ``val``, ``test``; without the column, queries are split by
  ``default_split`` (``"random"``: a seeded share ``test_fraction`` goes to test; the log
  says so).
- ``text`` (the query string) and ``group`` (task or sub-benchmark) are optional and must be
  the same on every row of a query.
- Missing (blank/NaN) cells raise :class:`~torchroute.data.table.TableError` unless
  ``drop_missing=True``, which drops the affected queries with a warning.
- Query and arm order follow their first appearance in the file.
- Other columns are ignored.

:func:`save_table` writes a :class:`~torchroute.data.table.RoutingTable` in either layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from torchroute.data.table import RoutingTable, TableError
from torchroute.io import atomic_write, not_a_file

LONG_COLUMNS = ("query_id", "arm", "score", "cost")
OPTIONAL_COLUMNS = ("text", "split", "group")
_PICKLE = (".pkl", ".pickle")


def check_pickle_trust(path: str | Path, trust_pickle: bool, *, convertible: bool = True) -> None:
    """Raise :class:`TableError` unless ``trust_pickle``: unpickling ``path`` runs its code.

    Args:
        path: the pickle file about to be read (named in the message).
        trust_pickle: the caller's explicit statement that the file comes from a trusted source.
        convertible: whether the message suggests converting the file to Parquet/CSV (false
            for loaders that read nothing but pickles).
    """
    if trust_pickle:
        return
    convert = ", or convert it to Parquet/CSV" if convertible else ""
    raise TableError(
        f"{path}: refusing to unpickle it because unpickling runs arbitrary code from the file; "
        f"pass trust_pickle=True (data.trust_pickle=true) only for a file you trust{convert}"
    )


def read_frame(path: str | Path, *, trust_pickle: bool = False) -> pd.DataFrame:
    """Read a CSV, TSV, Parquet or pandas-pickle file into a DataFrame.

    Args:
        path: the file; the suffix picks the reader.
        trust_pickle: allow reading a ``.pkl``/``.pickle`` file. Unpickling runs arbitrary
            code, so without it a pickle raises :class:`TableError`; set it only for files
            from a trusted source.

    Raises:
        TableError: the file is missing, unreadable, an untrusted pickle, or has no rows.
    """
    path = Path(path)
    if not path.is_file():
        raise TableError(f"{path}: {not_a_file(path)}; expected a table file")
    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".tsv"):
            frame = pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",")
            _check_header(path, "\t" if suffix == ".tsv" else ",")
        elif suffix in (".parquet", ".pq"):
            frame = pd.read_parquet(path)
        elif suffix in _PICKLE:
            check_pickle_trust(path, trust_pickle)
            frame = pd.read_pickle(path)
            if not isinstance(frame, pd.DataFrame):
                raise TableError(f"{path}: expected a pickled pandas DataFrame, got {type(frame)}")
        else:
            raise TableError(f"{path}: expected a .csv, .tsv, .parquet/.pq or .pkl/.pickle file")
    except pd.errors.EmptyDataError as err:
        raise TableError(f"{path}: the file is empty; expected a header row and data rows") from err
    except (OSError, ValueError, pd.errors.ParserError) as err:
        if isinstance(err, TableError):
            raise
        raise TableError(f"{path}: could not be read ({err})") from err
    if len(frame.index) == 0:
        raise TableError(
            f"{path}: the file has no rows (only the header {[str(c) for c in frame.columns]})"
        )
    return frame


def _check_header(path: Path, sep: str) -> None:
    """A header that names a column twice is refused in the file's own spelling (pandas
    would rename the second ``cost:a`` to ``cost:a.1``)."""
    header = pd.read_csv(path, sep=sep, header=None, nrows=1, dtype=str).iloc[0].tolist()
    names = [h for h in header if isinstance(h, str)]
    seen: set[str] = set()
    repeated = [h for h in names if h in seen or seen.add(h)]
    if repeated:
        raise TableError(
            f"{path}: the header names column {repeated[0]!r} twice; every column needs its "
            "own name"
        )


def read_costs(
    costs: Mapping[str, float] | str | Path,
    *,
    cost_column: str | None = None,
    trust_pickle: bool = False,
) -> dict[str, float]:
    """``{model: cost}`` from a mapping or a CSV with a ``model`` column and a cost column.

    The CSV's cost column is ``cost_column``, else the one numeric column whose name holds
    ``cost`` (``avg_cost_usd``), else the one numeric column. Every model is also keyed by
    the last ``/`` part of its name. A pickled cost table needs ``trust_pickle=True``.
    """
    if not isinstance(costs, Mapping):
        where = str(costs)
        frame = read_frame(costs, trust_pickle=trust_pickle)
        if "model" not in frame.columns:
            raise TableError(f"{where}: expected a 'model' column, got {list(frame.columns)}")
        if cost_column is None:
            numeric = [c for c in frame.columns if c != "model" and is_numeric(frame[c])]
            named = [c for c in numeric if "cost" in str(c).lower()]
            cands = named if len(named) == 1 else numeric
            if len(cands) != 1:
                raise TableError(f"{where}: cannot tell the cost column among {numeric}")
            cost_column = cands[0]
        if cost_column not in frame.columns:
            raise TableError(f"{where}: no cost column {cost_column!r} in {list(frame.columns)}")
        costs = dict(zip(frame["model"].astype(str), frame[cost_column].astype(float), strict=True))
    for key, value in costs.items():
        if value is None and ":" in str(key):
            name, _, rest = str(key).partition(":")
            raise TableError(
                f"costs: YAML read {{{key}}} as the key {str(key)!r} with no value; put a space "
                f"after the colon: costs={{{name}: {rest}}}"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TableError(f"costs: the cost of {key!r} must be a number, got {value!r}")
    lookup = {str(k).split("/")[-1]: float(v) for k, v in costs.items()}
    lookup.update({str(k): float(v) for k, v in costs.items()})
    return lookup


def model_costs(
    costs: Mapping[str, float] | str | Path | None,
    models: Sequence[str],
    *,
    cost_column: str | None = None,
    trust_pickle: bool = False,
) -> np.ndarray:
    """Per-model cost ``[K]`` from a mapping or CSV (see :func:`read_costs`); zeros for None.

    A model matches an entry by its full name or the last ``/`` part of its name.
    """
    if costs is None:
        return np.zeros(len(models))
    lookup = read_costs(costs, cost_column=cost_column, trust_pickle=trust_pickle)
    where = "costs" if isinstance(costs, Mapping) else str(costs)
    found = [lookup.get(m, lookup.get(m.split("/")[-1])) for m in models]
    missing = [m for m, c in zip(models, found, strict=True) if c is None]
    if missing:
        raise TableError(f"{where}: no cost for models {missing}; it has {sorted(lookup)}")
    return np.asarray(found, dtype=np.float64)


def is_numeric(series: pd.Series) -> bool:
    """Whether a column holds numbers (booleans excluded)."""
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def to_frame(table: RoutingTable, format: Literal["long", "wide"] = "wide") -> pd.DataFrame:
    """The table as a DataFrame in the generic layout (``n`` rows wide, ``n * K`` long)."""
    base = {"query_id": list(table.query_ids), "split": list(table.split)}
    if table.text is not None:
        base["text"] = list(table.text)
    if table.groups is not None:
        base["group"] = list(table.groups)
    scores, costs = table.scores.numpy(), table.costs.numpy()
    if format == "wide":
        cols = {}
        for k, arm in enumerate(table.arm_names):
            cols[f"score:{arm}"], cols[f"cost:{arm}"] = scores[:, k], costs[:, k]
        return pd.DataFrame({**base, **cols})
    if format != "long":
        raise TableError(f"format must be 'long' or 'wide', got {format!r}")
    n, k = scores.shape
    long = {key: np.repeat(np.asarray(v, dtype=object), k) for key, v in base.items()}
    long["arm"] = np.tile(np.asarray(table.arm_names, dtype=object), n)
    long["score"], long["cost"] = scores.reshape(-1), costs.reshape(-1)
    return pd.DataFrame(long)[[*LONG_COLUMNS, *[c for c in OPTIONAL_COLUMNS if c in long]]]


def save_table(
    table: RoutingTable, path: str | Path, format: Literal["long", "wide"] = "wide"
) -> Path:
    """Write ``table`` as CSV or Parquet (by the suffix of ``path``) in the generic layout.

    The file is written atomically (a temporary file beside it, then a rename).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".pq", ".csv"):
        raise TableError(f"{path}: expected a .csv or .parquet suffix")
    frame = to_frame(table, format)
    with atomic_write(path, "wb" if suffix != ".csv" else "w") as f:
        if suffix == ".csv":
            frame.to_csv(f, index=False)
        else:
            frame.to_parquet(f, index=False)
    return path
