"""The generic routing-table format: bring any table as CSV, Parquet or a pandas pickle.

Pickles are read only with ``trust_pickle=True`` (unpickling runs arbitrary code).

Two layouts are accepted; :func:`load_table` tells them apart (``format="auto"``).

**Long** — one row per (query, arm) pair::

    query_id, arm, score, cost [, text] [, split] [, group]
    q1,       gpt-4, 1.0,   0.0031, "What is 2+2?", test, arithmetic
    q1,       small, 0.0,   0.0001, "What is 2+2?", test, arithmetic

**Wide** — one row per query, two columns per arm::

    query_id [, text] [, split] [, group], score:<arm>, cost:<arm>, score:<arm2>, cost:<arm2>, ...

Rules:

- ``score`` is the quality in ``[0, 1]``; ``cost`` is ``>= 0`` (dollars per query, or any
  unit used consistently with ``rho``).
- Every arm has both a score and a cost (in the wide layout ``score:<arm>`` needs a
  ``cost:<arm>`` column and vice versa); in the long layout each (query, arm) pair appears
  once, and a pair that is absent counts as a missing cell.
- ``split`` is one of ``train``, ``val``, ``test``; without the column, queries are split by
  ``default_split`` (``"random"``: a seeded share ``test_fraction`` goes to test).
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

from torchroute.data.splits import DefaultSplit, missing_rows, resolve_splits
from torchroute.data.table import SPLITS, RoutingTable, TableError

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
        raise TableError(f"{path}: no such file")
    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".tsv"):
            frame = pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",")
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
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def load_table(
    path: str | Path | pd.DataFrame,
    format: Literal["auto", "long", "wide"] = "auto",
    *,
    drop_missing: bool = False,
    default_split: DefaultSplit = "random",
    test_fraction: float = 0.3,
    val_fraction: float = 0.0,
    seed: int = 0,
    trust_pickle: bool = False,
) -> RoutingTable:
    """Load a table in the generic long or wide layout (see the module docstring).

    Args:
        path: a CSV/TSV/Parquet/pandas-pickle file or a DataFrame.
        format: ``"long"``, ``"wide"``, or ``"auto"`` (wide when a ``score:`` column exists).
        drop_missing: drop queries with missing cells (warns with the count) instead of raising.
        default_split, test_fraction, val_fraction, seed: how queries without a ``split``
            are split, and the share of train moved to val (see ``splits.resolve_splits``).
        trust_pickle: allow a ``.pkl``/``.pickle`` file. Unpickling runs arbitrary code, so
            without it a pickle raises :class:`TableError`; set it only for trusted files.

    Returns:
        A validated table: ``scores``/``costs`` ``[n, K]``, with ``text``/``groups`` if given.
    """
    frame = path if isinstance(path, pd.DataFrame) else read_frame(path, trust_pickle=trust_pickle)
    source = "<DataFrame>" if isinstance(path, pd.DataFrame) else str(path)
    if len(frame.index) == 0:
        raise TableError(f"{source}: the table has no rows (columns {list(frame.columns)})")
    if format == "auto":
        if any(str(c).startswith("score:") for c in frame.columns):
            format = "wide"
        elif set(LONG_COLUMNS) <= set(frame.columns):
            format = "long"
        else:
            raise TableError(
                f"{source}: neither the long layout (columns {list(LONG_COLUMNS)}) nor the wide "
                f"layout ('query_id' and 'score:<arm>'/'cost:<arm>'); got {list(frame.columns)}"
            )
    if format == "long":
        frame = _long_to_wide(frame, source)
    elif format != "wide":
        raise TableError(f"format must be 'auto', 'long' or 'wide', got {format!r}")
    return _from_wide(frame, source, drop_missing, default_split, test_fraction, val_fraction, seed)


def _long_to_wide(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    missing = [c for c in LONG_COLUMNS if c not in frame.columns]
    if missing:
        raise TableError(
            f"{source}: long layout needs columns {missing}; got {list(frame.columns)}"
        )
    frame = frame.assign(query_id=frame["query_id"].astype(str), arm=frame["arm"].astype(str))
    dup = frame.duplicated(["query_id", "arm"])
    if dup.any():
        first = frame.loc[dup, ["query_id", "arm"]].iloc[0].tolist()
        raise TableError(f"{source}: {int(dup.sum())} repeated (query_id, arm) rows, e.g. {first}")
    extra = [c for c in OPTIONAL_COLUMNS if c in frame.columns]
    if extra:
        varying = frame.groupby("query_id", sort=False)[extra].nunique(dropna=False).max()
        bad = [c for c in extra if varying[c] > 1]
        if bad:
            raise TableError(f"{source}: columns {bad} differ between rows of the same query_id")
    per_query = frame.drop_duplicates("query_id")[["query_id", *extra]].set_index("query_id")
    arms = list(dict.fromkeys(frame["arm"]))
    wide = frame.pivot(index="query_id", columns="arm", values=["score", "cost"])
    wide = wide.reindex(index=per_query.index)
    cols = {f"{v}:{a}": wide[(v, a)] for a in arms for v in ("score", "cost")}
    return pd.concat([per_query, pd.DataFrame(cols)], axis=1).reset_index()


def _from_wide(
    frame: pd.DataFrame,
    source: str,
    drop_missing: bool,
    default_split: DefaultSplit,
    test_fraction: float,
    val_fraction: float,
    seed: int,
) -> RoutingTable:
    if "query_id" not in frame.columns:
        raise TableError(f"{source}: wide layout needs a 'query_id' column")
    cols = [str(c) for c in frame.columns]
    score_arms = [c[6:] for c in cols if c.startswith("score:")]
    cost_arms = [c[5:] for c in cols if c.startswith("cost:")]
    if not score_arms:
        raise TableError(f"{source}: wide layout needs 'score:<arm>' columns; got {cols}")
    no_cost = [a for a in score_arms if a not in cost_arms]
    no_score = [a for a in cost_arms if a not in score_arms]
    if no_cost or no_score:
        raise TableError(
            f"{source}: every arm needs 'score:<arm>' and 'cost:<arm>' columns; missing "
            f"{[f'cost:{a}' for a in no_cost] + [f'score:{a}' for a in no_score]}"
        )
    for c in [f"score:{a}" for a in score_arms] + [f"cost:{a}" for a in score_arms]:
        if not is_numeric(frame[c]) and not frame[c].isna().all():
            raise TableError(f"{source}: column {c!r} must be numeric, got {frame[c].dtype}")
    scores = frame[[f"score:{a}" for a in score_arms]].to_numpy(dtype=np.float64)
    costs = frame[[f"cost:{a}" for a in score_arms]].to_numpy(dtype=np.float64)
    ids = frame["query_id"].astype(str).tolist()
    if len(set(ids)) != len(ids):
        raise TableError(f"{source}: query_id values must be distinct in the wide layout")
    keep = missing_rows(scores, costs, score_arms, ids, source=source, drop_missing=drop_missing)
    frame = frame.loc[keep]
    if "split" in frame.columns:
        marks = [None if pd.isna(s) else str(s) for s in frame["split"]]
        bad = sorted({m for m in marks if m is not None} - set(SPLITS))
        if bad:
            raise TableError(f"{source}: column 'split' must hold {SPLITS}, got {bad}")
    else:
        marks = [None] * len(frame)
    split = resolve_splits(
        marks,
        default_split=default_split,
        test_fraction=test_fraction,
        val_fraction=val_fraction,
        seed=seed,
    )
    opt = {
        name: tuple("" if pd.isna(v) else str(v) for v in frame[col])
        for name, col in (("text", "text"), ("groups", "group"))
        if col in frame.columns
    }
    return RoutingTable(
        scores=scores[keep],
        costs=costs[keep],
        arm_names=tuple(score_arms),
        query_ids=tuple(np.asarray(ids, dtype=object)[keep]),
        split=split,
        source=source,
        **opt,
    )


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
    """Write ``table`` as CSV or Parquet (by the suffix of ``path``) in the generic layout."""
    path = Path(path)
    frame = to_frame(table, format)
    if path.suffix.lower() in (".parquet", ".pq"):
        frame.to_parquet(path, index=False)
    elif path.suffix.lower() == ".csv":
        frame.to_csv(path, index=False)
    else:
        raise TableError(f"{path}: expected a .csv or .parquet suffix")
    return path
