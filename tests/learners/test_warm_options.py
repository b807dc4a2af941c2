"""The warm-start options of a learner config: every bad value is one line naming the key
and what it must be, refused before anything of the run is written."""

from __future__ import annotations

import math

import pytest

from tests.simulate_argv import small_simulate
from torchroute.cli import main
from torchroute.learners.warm_options import WarmStart

NODE = {"_target_": "torchroute.learners.LinUCB.from_problem", "_partial_": True}


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("warm_weight", math.nan, "warm_weight must be a finite number > 0"),
        ("warm_weight", math.inf, "warm_weight must be a finite number > 0"),
        ("warm_weight", [1.0, -math.inf], "warm_weight must be a finite number > 0"),
        ("warm_weight", True, "warm_weight must be a finite number > 0"),
        ("warm_weight", [], "warm_weight must be a finite number > 0"),
        ("warm_epochs", math.nan, "warm_epochs must be an integer >= 1"),
        ("warm_epochs", 1.5, "warm_epochs must be an integer >= 1"),
        ("warm_epochs", [2, 0], "warm_epochs must be an integer >= 1"),
        ("warm_clip", True, "warm_clip must be a finite number >= 1"),
        ("warm_clip", math.inf, "warm_clip must be a finite number >= 1"),
        ("warm_clip", 0.5, "warm_clip must be a finite number >= 1"),
        ("warm_start", 3, "warm_start must be null, 'train' or a decision log path"),
        ("warm_start", "", "warm_start must be null, 'train' or a decision log path"),
    ],
)
def test_a_bad_value_is_named_with_what_was_expected(key, value, expected):
    with pytest.raises(ValueError, match="^learners.l." + expected) as info:
        WarmStart.from_node({**NODE, "warm_start": "train", key: value}, "learners.l")
    assert "\n" not in str(info.value)


def test_the_options_are_read_and_the_node_keeps_the_rest():
    node = {**NODE, "alpha": 2.0, "warm_start": "train", "warm_weight": [1, 2.5]}
    node |= {"warm_epochs": 3, "warm_clip": 5}
    warm, rest = WarmStart.from_node(node, "learners.l")
    assert warm == WarmStart("train", (1.0, 2.5), (3,), 5.0) and warm.chooses
    assert rest == {**NODE, "alpha": 2.0}
    assert WarmStart.from_node(NODE, "k")[0] == WarmStart()  # cold by default


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (
            ["learners.linucb.warm_start=train", "+learners.linucb.warm_weight=nan"],
            "learners.linucb.warm_weight must be a finite number > 0",
        ),
        (
            ["learners.linucb.warm_start=train", "+learners.linucb.warm_weight=inf"],
            "learners.linucb.warm_weight must be a finite number > 0",
        ),
        (
            ["learners.linucb.warm_start=train", "+learners.linucb.warm_clip=true"],
            "learners.linucb.warm_clip must be a finite number >= 1, got True",
        ),
        (
            ["learners.linucb.warm_start=train", "+learners.linucb.warm_epochs=nan"],
            "learners.linucb.warm_epochs must be an integer >= 1",
        ),
        (
            ["learners.best_single.warm_start=train"],
            "learners.best_single.warm_start: a warm start applies to online learners; "
            "BestSingleArm does not learn online",
        ),
        (
            ["+learners.best_single.warm_start=train"],
            "learners.best_single.warm_start applies to online learners; BestSingleArm does "
            "not learn online",
        ),
    ],
)
def test_simulate_refuses_a_bad_warm_start_before_writing(tmp_path, capsys, extra, needle):
    """Exit 2, one line naming the key and what was expected, and no run folder: the
    corrected rerun then starts in the same folder."""
    out = tmp_path / "run"
    code = main(small_simulate(out, "run_learners=[linucb,best_single]", *extra))
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err
    assert not out.exists()
