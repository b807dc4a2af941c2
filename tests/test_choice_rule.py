"""The ``choose_on_validation`` rule: one choice per cost regime, and the first-listed
value kept unless another is better by more than one standard error
(:mod:`torchroute.run.choice_rule`, :func:`torchroute.run.choose_on_validation.pick`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tests.conftest import tiny_run_config
from torchroute.errors import ConfigError
from torchroute.run import RunOptions
from torchroute.run.choice_rule import ChoiceRule, check_choice_rule
from torchroute.run.choose_on_validation import (
    Candidates,
    block_utilities,
    paired_block_se,
    pick,
)


def _summary(utility: dict[int, list[float]], trials: list[tuple[float, int]]) -> pd.DataFrame:
    """Candidate-major rows ``rho, seed, avg_utility``."""
    rows = [
        {"rho": rho, "seed": seed, "avg_utility": utility[c][t]}
        for c in sorted(utility)
        for t, (rho, seed) in enumerate(trials)
    ]
    return pd.DataFrame(rows)


def test_one_choice_per_regime_takes_the_best_mean_over_its_rhos():
    cand = Candidates("r", ("lam",), ({"lam": 100}, {"lam": 1000}))
    trials = [(0.0, 0), (100.0, 0), (900.0, 0)]
    utility = {0: [0.50, 0.80, 0.30], 1: [0.70, 0.70, 0.20]}
    # per rho: rho 100 alone would take candidate 0 (0.80 > 0.70); its regime (low: rho 0
    # and 100) has means 0.65 (candidate 0) and 0.70 (candidate 1): candidate 1 for both
    per_rho = pick(cand, _summary(utility, trials), 3)
    assert per_rho.chosen == (1, 0, 0)
    groups = {0.0: "low", 100.0: "low", 900.0: "high"}
    per_regime = pick(cand, _summary(utility, trials), 3, ChoiceRule(per="regime"), groups)
    assert per_regime.chosen == (1, 1, 0)
    # each trial's val_utility is the chosen candidate's at the trial's own rho
    assert per_regime.val_utility == pytest.approx((0.70, 0.70, 0.30))
    assert list(per_regime.table["regime"]) == ["low", "low", "high"] * 2


def test_the_first_listed_value_stays_unless_another_is_better_by_one_se():
    """Three lams, listed preferred first (1000, 100, 10); two trials of one rho; J = 4
    blocks per trial. The standard error is computed here by hand from the blocks."""
    cand = Candidates("r", ("lam",), ({"lam": 1000}, {"lam": 100}, {"lam": 10}))
    trials = [(0.0, 0), (0.0, 1)]
    noisy = np.array(
        [
            [[0.60, 0.70, 0.50, 0.60], [0.50, 0.60, 0.60, 0.70]],  # lam 1000: mean 0.600
            [[0.70, 0.50, 0.60, 0.80], [0.50, 0.70, 0.70, 0.50]],  # lam 100: mean 0.625
            [[0.40, 0.40, 0.40, 0.40], [0.40, 0.40, 0.40, 0.40]],  # lam 10: mean 0.400
        ]
    )  # [C, R, J]
    blocks = noisy.reshape(6, 4)
    utility = {c: list(noisy[c].mean(axis=1)) for c in range(3)}
    # the paired SE of lam 1000 against the best (lam 100), by hand: block means over the two
    # trials 0.60/0.60/0.65/0.65 (lam 100) and 0.55/0.65/0.55/0.65 (lam 1000); the blocks'
    # variance from their successive differences -0.10, 0.15, -0.10
    diff = np.array([0.05, -0.05, 0.10, 0.0])
    se = math.sqrt((0.10**2 + 0.15**2 + 0.10**2) / (2 * 3)) / 2  # 0.0421
    assert se >= 0.625 - 0.600  # within one SE: the first-listed value stays
    assert paired_block_se(diff[None]) == pytest.approx([se])
    rule = ChoiceRule(prefer_first=("lam",))
    kept = pick(cand, _summary(utility, trials), 2, rule, None, blocks)
    assert kept.chosen == (0, 0)
    assert kept.table["val_se"].tolist()[0] == pytest.approx(se)
    assert kept.table["val_se"].tolist()[1] == 0.0  # the best against itself
    # without the rule, the best mean
    assert pick(cand, _summary(utility, trials), 2).chosen == (1, 1)
    # a clear gain (lam 100 better by 0.1 in every block: SE 0) moves the choice
    clear = noisy.copy()
    clear[1] = noisy[0] + 0.1
    utility = {c: list(clear[c].mean(axis=1)) for c in range(3)}
    moved = pick(cand, _summary(utility, trials), 2, rule, None, clear.reshape(6, 4))
    assert moved.chosen == (1, 1)


def test_a_step_in_the_difference_is_not_counted_as_noise():
    """A change half-way: the two candidates alike before it, the second ahead by 0.1 in
    every block after it. The blocks' standard deviation counts the step as noise (SE
    0.0189: 2.6 SE); their successive differences see one jump in seven (SE 0.0094: 5.3
    SE), as they would see noise alone."""
    step = np.array([0.0] * 4 + [0.1] * 4)
    deviation = step.std(ddof=1) / math.sqrt(8)
    successive = math.sqrt(0.1**2 / (2 * 7)) / math.sqrt(8)
    assert deviation == pytest.approx(0.0189, abs=1e-4)
    assert paired_block_se(step[None]) == pytest.approx([successive])
    assert successive == pytest.approx(0.0094, abs=1e-4)
    # noise that alternates block to block: its successive differences are twice its size,
    # s^2 = 7 x 0.04^2 / 14 (its standard deviation: 0.0214)
    noise = np.array([0.02, -0.02] * 4)
    assert paired_block_se(noise[None]) == pytest.approx([math.sqrt(0.0008 / 8)])
    assert paired_block_se(np.array([[0.3]])) == pytest.approx([0.0])  # one block: no spread


def test_a_margin_of_two_keeps_the_first_value_against_a_gain_of_one_and_a_half_se():
    """``margin: 2``: lam 100 ahead by 1.5 SE stays behind lam 1000 (the first listed),
    though the one-SE rule moves to it; ahead by a step of 5 SE it is chosen with either."""
    cand = Candidates("r", ("lam",), ({"lam": 1000}, {"lam": 100}))
    base = np.full(8, 0.6)
    wobble = np.array([0.01, -0.01] * 4)  # successive differences 0.02: SE 0.0053
    se = math.sqrt(7 * 0.02**2 / (2 * 7)) / math.sqrt(8)
    ahead = base + 1.5 * se + wobble
    for later, expected in (
        (ahead, {1.0: 1, 2.0: 0}),
        (base + np.array([0.0] * 4 + [0.1] * 4), {1.0: 1, 2.0: 1}),
    ):
        blocks = np.stack([base, later])  # one trial, [C R, J]
        utility = {0: [float(base.mean())], 1: [float(later.mean())]}
        for margin, chosen in expected.items():
            rule = ChoiceRule(prefer_first=("lam",), margin=margin)
            assert pick(cand, _summary(utility, [(0.0, 0)]), 1, rule, None, blocks).chosen == (
                chosen,
            )


def test_among_the_eligible_the_preferred_keys_come_first_then_the_utility():
    """Two keys: the base (not preferred) and lam (preferred first): within one SE the
    earliest lam wins, and among its bases the higher validation utility."""
    points = tuple({"base": b, "lam": lam} for b in ("m", "k") for lam in (1000, 10))
    cand = Candidates("r", ("base", "lam"), points)
    values = [0.60, 0.61, 0.605, 0.612]  # (m, 1000), (m, 10), (k, 1000), (k, 10)
    flat = np.array([[v] * 4 for v in values])  # one trial, four equal blocks: SE 0
    wobble = flat + np.array([0.0, 0.02, -0.02, 0.0])  # a paired SE of 0.0082 against the best
    wobble[3] = flat[3]
    utility = {c: [values[c]] for c in range(4)}
    chosen = pick(
        cand, _summary(utility, [(0.0, 0)]), 1, ChoiceRule(prefer_first=("lam",)), None, wobble
    )
    assert chosen.chosen == (2,)  # lam 1000 (preferred), base k (0.605 > 0.600)
    assert chosen.columns([0]) == {
        "chosen_base": ["k"],
        "chosen_lam": [1000],
        "chosen_val_utility": [pytest.approx(0.605)],
    }


def test_block_utilities_are_the_regret_increments_per_round():
    curve = pd.DataFrame(
        {
            "trial": [0, 0, 1, 1],
            "round": [2, 4, 2, 4],
            "cum_regret": [1.0, 1.5, 0.0, 2.0],
        }
    )
    assert block_utilities(curve, 2) == pytest.approx(np.array([[-0.5, -0.25], [0.0, -1.0]]))
    with pytest.raises(ConfigError, match="cum_regret"):
        block_utilities(curve.drop(columns="cum_regret"), 2)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("regime", "choose_on_validation must be a mapping"),
        ({"per": "seed"}, "choose_on_validation.per must be one of"),
        ({"prefer_first": "lam"}, "choose_on_validation.prefer_first must be a list"),
        ({"per": "rho", "prefer": ["lam"]}, "choose_on_validation has unknown keys"),
        ({"margin": 0}, "choose_on_validation.margin must be a number > 0"),
        ({"margin": "two"}, "choose_on_validation.margin must be a number > 0"),
        ({"margin": True}, "choose_on_validation.margin must be a number > 0"),
    ],
)
def test_a_bad_rule_fails_by_name(tmp_path, value, message):
    with pytest.raises(ConfigError, match=message):
        check_choice_rule(value)
    cfg = tiny_run_config(tmp_path, {})
    cfg.choose_on_validation = value
    cfg.learners = {"l": {"_target_": "torchroute.learners.LinUCB.from_problem"}}
    with pytest.raises(ConfigError, match=message):
        RunOptions.from_config(cfg)


def test_without_the_option_the_rule_is_the_old_one():
    assert check_choice_rule(None) == ChoiceRule(per="rho", prefer_first=(), margin=1.0)
    assert check_choice_rule({"margin": 2}).margin == 2.0
    assert not ChoiceRule().needs_blocks
