"""``torchroute serve --export-log``: the decision log as a table (Parquet or CSV)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from torchroute.io import atomic_write
from torchroute.serve.log import RouterLog

LIST_COLUMNS = ("embedding", "features", "arms", "probabilities")


def export_log(log_file: str | Path, out: str | Path) -> int:
    """Write the decision log ``log_file`` to ``out`` (``.parquet`` or ``.csv``); returns rows.

    One row per routed request in the decision-log format: ``request_id``, ``timestamp``,
    ``embedding`` and ``features`` (``list<float64>``), ``arm`` (the model chosen),
    ``propensity``, ``arms`` (models served at decision time), ``probabilities``,
    ``score`` and ``cost`` (null without feedback), ``learner``, ``rho``. CSV cells of the
    list columns are JSON. ``out`` is written atomically; the log is only read.

    Raises:
        ValueError: ``out`` is not ``.parquet``/``.csv`` or is the log itself, or the log
            holds subset decisions (which the format cannot hold); nothing is written.
    """
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in (".parquet", ".csv"):
        raise ValueError(f"--export-log {out}: expected a .parquet or .csv file name")
    if out.resolve() == Path(log_file).resolve():
        raise ValueError(f"--export-log {out} is the log itself; give another file")
    log = RouterLog.read(log_file)
    try:
        subsets = log.num_subsets()
        if subsets:
            raise ValueError(
                f"--export-log: {log_file} holds {subsets} subset decisions (a set of models "
                "per request); the decision-log format has one model and its propensity per "
                "row, so a subset router's log is not exported (read its routes and subsets "
                "tables with sqlite3)"
            )
        columns = log.table()
    finally:
        log.close()
    frame = pd.DataFrame(columns)
    frame["timestamp"] = frame["timestamp"].astype("float64")
    for key in ("propensity", "score", "cost", "rho"):
        frame[key] = pd.to_numeric(frame[key], errors="coerce").astype("float64")
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema(
            [
                ("request_id", pa.string()),
                ("timestamp", pa.float64()),
                ("embedding", pa.list_(pa.float64())),
                ("features", pa.list_(pa.float64())),
                ("arm", pa.string()),
                ("propensity", pa.float64()),
                ("arms", pa.list_(pa.string())),
                ("probabilities", pa.list_(pa.float64())),
                ("score", pa.float64()),
                ("cost", pa.float64()),
                ("learner", pa.string()),
                ("rho", pa.float64()),
            ]
        )
        table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
        with atomic_write(out, "wb") as f:
            pq.write_table(table, f)
    else:
        for key in LIST_COLUMNS:
            frame[key] = frame[key].map(json.dumps)
        with atomic_write(out, "w") as f:
            frame.to_csv(f, index=False)
    return len(frame)
