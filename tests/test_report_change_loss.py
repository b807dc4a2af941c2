"""The change loss and the share recovered on a hand-made results frame (numbers worked out
by hand below), the per-regime sentences, and an old results file without a refit row."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml

from torchroute.report.change_loss import paired_share, share_recovered, share_text
from torchroute.report.leaderboard import leaderboard_section, learner_families

TRIALS = [(0, 0), (0, 1), (900, 0), (900, 1)]  # low, low, high, high
AFTER = {
    "stat": [0.50, 0.60, 0.30, 0.40],
    "stat2": [0.45, 0.50, 0.20, 0.30],
    "refit": [0.60, 0.72, 0.31, 0.41],
    "warm": [0.56, 0.66, 0.35, 0.42],
    "cold": [0.52, 0.61, 0.20, 0.30],
}
VAL = {"stat": 0.5, "stat2": 0.4, "refit": 0.9}  # the refit is never the baseline
RECOVER = {"warm": [40.0, 60.0, math.nan, 30.0]}


def _results(learners=AFTER) -> pd.DataFrame:
    rows = []
    for learner, values in learners.items():
        for i, ((rho, seed), u) in enumerate(zip(TRIALS, values, strict=True)):
            rows.append(
                {
                    "learner": learner,
                    "rho": rho,
                    "seed": seed,
                    "rounds": 200,
                    "avg_utility": u,
                    "avg_utility_before": 0.7,
                    "avg_utility_after": u,
                    "val_utility": VAL.get(learner, math.nan),
                    "rounds_to_recover": RECOVER.get(learner, [10.0] * 4)[i],
                }
            )
    return pd.DataFrame(rows)


def _config(tmp_path, with_refit=True):
    learners = {
        "stat": {"_target_": "torchroute.learners.anchors.KNNScoreRouter.from_problem"},
        "stat2": {"_target_": "torchroute.learners.anchors.MLPScoreRouter.from_problem"},
        "cold": {"_target_": "torchroute.learners.LinTS.from_problem", "warm_start": None},
        "warm": {"_target_": "torchroute.learners.LinTS.from_problem", "warm_start": "train"},
    }
    if with_refit:
        learners["refit"] = {"_target_": "torchroute.learners.refit.StaticRefit.from_problem"}
    env = {"scenario": [{"kind": "drift", "arm": "best", "at": 0.5, "score_shift": -0.3}]}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"learners": learners, "env": env}))


def test_share_recovered_only_above_the_threshold():
    assert share_recovered(0.03, 0.06) == 0.5
    assert share_recovered(0.01, 0.019) is None
    assert share_recovered(0.01, math.nan) is None
    assert share_text(None) == "n/a (loss < 0.02)" and share_text(0.546) == "55%"
    assert share_text(0.546, 0.031) == "55% +- 3%"


def test_the_share_s_standard_error_against_a_bootstrap():
    """The linearised SE of the share against the spread of the share over 20,000
    resamples of the trials (a trial's three values drawn together)."""
    rng = np.random.default_rng(0)
    n = 400
    base = rng.uniform(0.3, 0.7, n)
    refit = base + 0.05 + rng.normal(0, 0.02, n)
    learner = base + 0.6 * (refit - base) + rng.normal(0, 0.005, n)
    rows = [
        {"learner": name, "rho": 0, "seed": i, "avg_utility_after": v}
        for name, values in {"b": base, "r": refit, "l": learner}.items()
        for i, v in enumerate(values)
    ]
    share, se = paired_share(pd.DataFrame(rows), "l", "b", "r", "avg_utility_after", "all")
    draw = rng.integers(0, n, (20_000, n))
    gain, loss = (learner - base)[draw].mean(1), (refit - base)[draw].mean(1)
    assert share == pytest.approx((learner - base).mean() / (refit - base).mean())
    assert se == pytest.approx(np.std(gain / loss), rel=0.05)
    # the pairing matters: the gain moves with the loss, so the share is steadier than the
    # gain's own SE over the loss would say (about 2.5 times here)
    assert se < 0.6 * (learner - base).std() / np.sqrt(n) / (refit - base).mean()


def test_the_refit_is_a_reference_not_a_static_router(tmp_path):
    _config(tmp_path)
    families = learner_families(tmp_path, list(AFTER))
    assert families["refit"] == "reference" and families["stat"] == "static"


def test_change_loss_table_and_sentences_by_hand(tmp_path):
    _config(tmp_path)
    text = "\n".join(leaderboard_section(_results(), pd.DataFrame(), tmp_path))
    # baseline on validation: stat (0.5) over stat2 (0.4); the refit (0.9) is no candidate
    assert "Baseline: stat, the best static router on validation" in text
    # low: refit - stat = .10, .12 -> +0.1100, SE sd(.10, .12) / sqrt(2) = 0.0100
    # high: .01, .01 -> +0.0100 +- 0.0000, below 0.02
    assert "| change loss | +0.1100 +- 0.0100 | +0.0100 +- 0.0000 |" in text
    # warm - stat: low .06, .06 -> S = .06 / .11 = 6/11 = 55%; its SE: the per-trial
    # .06 - S .10 = +.06/11 and .06 - S .12 = -.06/11, sd (.06/11) sqrt(2), SE .06/11,
    # over the loss .11: 4.96% -> 5%
    assert "| share recovered: warm | 55% +- 5% | n/a (loss < 0.02) |" in text
    # cold: .02, .01 -> S = .015 / .11 = 3/22 = 14%; .02 - S .10 = +.07/11, .01 - S .12 =
    # -.07/11: SE (.07/11) / .11 = 5.79% -> 6%
    assert "| share recovered: cold | 14% +- 6% | n/a (loss < 0.02) |" in text
    # warm recovers after (40 + 60) / 2 = 50 rounds of the 200 - 100 after the change
    low = (
        "- after, low: the best online learner warm is +0.0600 +- 0.0000 (above) against "
        "the best static router stat (chosen on validation); the change loss (refit - stat) "
        "is +0.1100 +- 0.0100, share recovered 55% +- 5%; rounds_to_recover 50 rounds = 50% of "
        "100 (2 of 2 trials)."
    )
    assert low in text
    # high: warm - stat = .05, .02 -> +0.0350, SE sd / sqrt(2) = 0.0150; one trial recovered
    assert (
        "- after, high: the best online learner warm is +0.0350 +- 0.0150 (above) against the "
        "best static router stat (chosen on validation); the change loss (refit - stat) is "
        "+0.0100 +- 0.0000, share recovered n/a (loss < 0.02); rounds_to_recover 30 rounds "
        "= 30% of 100 (1 of 2 trials)."
    ) in text
    assert "- before, low: the best online learner" in text
    assert "| reference | refit |" in text  # its own family row, not a static one


def test_an_old_results_file_without_a_refit_row_still_renders(tmp_path):
    _config(tmp_path, with_refit=False)
    old = {k: v for k, v in AFTER.items() if k != "refit"}
    results = _results(old).drop(columns=["rounds"])
    text = "\n".join(leaderboard_section(results, pd.DataFrame(), tmp_path))
    assert "Change loss" not in text and "change loss" not in text
    assert (
        "- after, low: the best online learner warm is +0.0600 +- 0.0000 (above) against "
        "the best static router stat (chosen on validation); rounds_to_recover 50 rounds "
        "(2 of 2 trials)."
    ) in text
