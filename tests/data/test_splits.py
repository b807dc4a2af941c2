"""Split helpers, ids, and container errors the loaders rely on."""

from __future__ import annotations

import pytest
import torch

from torchroute.data import RoutingTable, TableError, carve_validation, random_split
from torchroute.data.splits import resolve_splits, split_from_name, strip_split, unique_ids


def test_random_split_counts_and_seed():
    s = random_split(101, (0.6, 0.1, 0.3), seed=0)
    assert (s.count("train"), s.count("val"), s.count("test")) == (61, 10, 30)
    assert s == random_split(101, (0.6, 0.1, 0.3), seed=0)
    assert s != random_split(101, (0.6, 0.1, 0.3), seed=1)
    with pytest.raises(TableError, match="summing to 1"):
        random_split(10, (0.5, 0.1, 0.1))


def test_resolve_splits_arguments():
    marks = ["train", None, None, None, "test"]
    out = resolve_splits(marks, default_split="random", test_fraction=1.0, val_fraction=0.0, seed=0)
    assert out == ("train", "test", "test", "test", "test")
    with pytest.raises(TableError, match="test_fraction must be in"):
        resolve_splits(marks, default_split="random", test_fraction=1.5, val_fraction=0, seed=0)
    with pytest.raises(TableError, match="default_split must be one of"):
        resolve_splits(marks, default_split="dev", test_fraction=0.3, val_fraction=0, seed=0)
    with pytest.raises(TableError, match="val_fraction must be in"):
        resolve_splits(marks, default_split="test", test_fraction=0.3, val_fraction=-1, seed=0)


def test_carve_validation_only_moves_train():
    split = ("train",) * 10 + ("test",) * 5
    out = carve_validation(split, 0.3, seed=2)
    assert out.count("val") == 3 and out[10:] == ("test",) * 5


@pytest.mark.parametrize(
    ("name", "split", "group"),
    [
        ("arc_challenge_train", "train", "arc_challenge"),
        ("gsm8k-test", "test", "gsm8k"),
        ("mmlu_val", "val", "mmlu"),
        ("MATH_prealgebra", None, "MATH_prealgebra"),
        ("contest", None, "contest"),
    ],
)
def test_split_from_name(name: str, split: str | None, group: str):
    assert split_from_name(name) == split
    assert strip_split(name) == group


def test_unique_ids():
    assert unique_ids(["a", "b", "a", "a#2", "a"]) == ("a", "b", "a#3", "a#2", "a#4")


def _table(**kw) -> RoutingTable:
    base = dict(
        scores=torch.zeros(3, 2),
        costs=torch.zeros(3, 2),
        arm_names=("x", "y"),
        query_ids=("0", "1", "2"),
        split=("train", "test", "test"),
    )
    return RoutingTable(**{**base, **kw})


def test_embedding_count_mismatch():
    with pytest.raises(TableError, match="embedding count must match"):
        _table(embeddings=torch.zeros(4, 5))


def test_empty_split():
    with pytest.raises(TableError, match=r"split \['val'\] is empty"):
        _table().rows("val")
