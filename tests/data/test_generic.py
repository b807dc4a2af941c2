"""The generic long/wide format: round trips and bad inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from torchroute.data import RoutingTable, TableError, load_table, save_table, to_frame


@pytest.fixture
def table() -> RoutingTable:
    rng = np.random.default_rng(0)
    return RoutingTable(
        scores=rng.random((5, 3)),
        costs=rng.random((5, 3)) * 1e-3,
        arm_names=("small", "org/medium", "large"),
        query_ids=("q0", "q1", "q2", "q3", "q4"),
        split=("train", "train", "val", "test", "test"),
        text=("a, b", 'say "hi"', "line\nbreak", "x", "y"),
        groups=("g1", "g1", "g2", "g2", "g1"),
    )


def _same(a: RoutingTable, b: RoutingTable) -> None:
    assert (a.arm_names, a.query_ids, a.split) == (b.arm_names, b.query_ids, b.split)
    assert (a.text, a.groups) == (b.text, b.groups)
    np.testing.assert_allclose(a.scores.numpy(), b.scores.numpy(), rtol=1e-12)
    np.testing.assert_allclose(a.costs.numpy(), b.costs.numpy(), rtol=1e-12)


@pytest.mark.parametrize("layout", ["long", "wide"])
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_round_trip(tmp_path: Path, table: RoutingTable, layout: str, suffix: str):
    path = save_table(table, tmp_path / f"t{suffix}", format=layout)
    _same(load_table(path), table)  # format detected
    _same(load_table(path, format=layout), table)


def test_frame_shapes(table: RoutingTable):
    assert to_frame(table, "long").shape[0] == 15
    wide = to_frame(table, "wide")
    assert wide.shape[0] == 5 and "score:org/medium" in wide and "cost:large" in wide


def test_no_split_column_uses_default(table: RoutingTable):
    frame = to_frame(table).drop(columns=["split"])
    assert load_table(frame, default_split="val").split == ("val",) * 5
    assert load_table(frame, test_fraction=0.4, seed=1).split.count("test") == 2


def test_wide_missing_cost_column(table: RoutingTable):
    frame = to_frame(table).drop(columns=["cost:large"])
    with pytest.raises(TableError, match=r"missing \['cost:large'\]"):
        load_table(frame)


def test_long_missing_columns_and_unknown_layout(table: RoutingTable):
    with pytest.raises(TableError, match=r"long layout needs columns \['cost'\]"):
        load_table(to_frame(table, "long").drop(columns=["cost"]), format="long")
    with pytest.raises(TableError, match="neither the long layout"):
        load_table(pd.DataFrame({"a": [1]}))


def test_long_bad_rows(table: RoutingTable):
    long = to_frame(table, "long")
    with pytest.raises(TableError, match="repeated"):
        load_table(pd.concat([long, long.iloc[:1]]))
    changed = long.copy()
    changed.loc[0, "text"] = "other"
    with pytest.raises(TableError, match=r"\['text'\] differ"):
        load_table(changed)


def test_missing_pairs_and_nan(table: RoutingTable):
    long = to_frame(table, "long").drop(index=[4])  # (q1, org/medium) absent
    with pytest.raises(TableError, match=r"1 missing .*'q1'"):
        load_table(long)
    with pytest.warns(UserWarning, match="dropped 1 of 5"):
        assert load_table(long, drop_missing=True).query_ids == ("q0", "q2", "q3", "q4")


def test_bad_values(table: RoutingTable):
    wide = to_frame(table)
    with pytest.raises(TableError, match=r"scores cells are not in \[0.0, 1.0\]"):
        load_table(wide.assign(**{"score:small": 1.5}))
    with pytest.raises(TableError, match=r"costs cells are not >= 0\.0"):
        load_table(wide.assign(**{"cost:small": -1.0}))
    with pytest.raises(TableError, match="'score:small' must be numeric"):
        load_table(wide.assign(**{"score:small": "high"}))
    with pytest.raises(TableError, match="column 'split' must hold"):
        load_table(wide.assign(split="dev"))


def test_unreadable_files(tmp_path: Path):
    with pytest.raises(TableError, match="no such file"):
        load_table(tmp_path / "none.csv")
    (tmp_path / "t.xlsx").write_text("x")
    with pytest.raises(TableError, match=r"expected a \.csv"):
        load_table(tmp_path / "t.xlsx")


@pytest.mark.parametrize("layout", ["long", "wide"])
def test_header_only_csv_says_no_rows(tmp_path: Path, table: RoutingTable, layout: str):
    path = tmp_path / f"{layout}.csv"
    to_frame(table, layout).iloc[:0].to_csv(path, index=False)
    with pytest.raises(TableError, match=rf"{layout}.csv: the file has no rows \(only the header"):
        load_table(path)
    with pytest.raises(TableError, match=r"<DataFrame>: the table has no rows"):
        load_table(to_frame(table, layout).iloc[:0])
    (tmp_path / "blank.csv").write_text("")
    with pytest.raises(TableError, match=r"blank.csv: the file is empty"):
        load_table(tmp_path / "blank.csv")


def test_infinite_cells_are_not_called_missing(table: RoutingTable):
    wide = to_frame(table)
    wide.loc[1, "cost:large"] = np.inf
    with pytest.raises(TableError) as err:
        load_table(wide, drop_missing=True)
    message = str(err.value)
    assert "1 infinite costs cells" in message and "(query 'q1', arm 'large')" in message
    assert "finite values >= 0.0" in message
    assert "missing" not in message and "drop_missing" not in message
    wide.loc[1, "cost:large"] = 0.0
    wide.loc[2, "score:small"] = -np.inf
    with pytest.raises(TableError, match=r"1 infinite scores cells.*in \[0.0, 1.0\]$"):
        load_table(wide)


def test_nan_in_table_still_suggests_drop_missing(table: RoutingTable):
    scores = table.scores.clone()
    scores[0, 0] = float("nan")
    with pytest.raises(TableError, match=r"1 missing \(NaN\) scores cells.*drop_missing=True"):
        RoutingTable(
            scores=scores,
            costs=table.costs,
            arm_names=table.arm_names,
            query_ids=table.query_ids,
            split=table.split,
        )
