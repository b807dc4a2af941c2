"""The residual learners' soft shift (``change_hazard``): each model's score moves by the
posterior of one change in its residuals, in proportion to the evidence.

Checked on the synthetic drift stream of the change test's tests (the first of four models
drops by 0.3 half-way; 64 trials, full feedback): the shift of every cell against the model
written out in numpy on the learner's own memory and bias (with ``restart_lam`` 1 and 10, the
segment prior), the scores against base + correction + shift, the drifted model found long
before the test fires, the stationary twin left almost where it was, and the refusals.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.learners.test_residual_restart import (
    MEMORY,
    T0,
    D,
    K,
    R,
    T,
    _base,
    _base_train,
    _play,
    _round,
    _train,
)
from torchroute.errors import OptionError
from torchroute.learners.anchors import MLPScoreRouter
from torchroute.learners.residual import ResidualLinTS, ResidualLinUCB

HAZARD = 1e-3


def _posterior(y: np.ndarray, sigma2: float, lam: float, hazard: float) -> tuple[float, float]:
    """``(P(change), sum_s P(s) mean after s)`` of ``y``, one split at a time: each
    segment's log marginal likelihood with its mean integrated out (the determinant lemma
    for ``sigma^2 I + sigma^2 / lam 1 1^T``)."""

    def log_marginal(seg: np.ndarray) -> float:
        m, total = len(seg), seg.sum()
        quad = (seg @ seg - total**2 / (m + lam)) / sigma2
        return -0.5 * (m * np.log(2 * np.pi * sigma2) + np.log1p(m / lam) + quad)

    n = len(y)
    if n < 2:
        return 0.0, 0.0
    none = log_marginal(y)
    logw = np.array(
        [0.0]
        + [np.log(hazard) + log_marginal(y[:s]) + log_marginal(y[s:]) - none for s in range(1, n)]
    )
    p = np.exp(logw - logw.max())
    p /= p.sum()
    after = np.array([0.0] + [y[s:].sum() / (n - s + lam) for s in range(1, n)])
    return float(p[1:].sum()), float(p[1:] @ after[1:])


def _learner(cls=ResidualLinUCB, **options):
    hp = {"v": 0.3} if cls is ResidualLinTS else {}
    options = {"lam": 1e4, "restart_memory": MEMORY, "change_hazard": HAZARD, **options}
    return cls(R, K, D, _base(), _train(), projection=0, **hp, **options).double()


@pytest.fixture(scope="module")
def shifted():
    """Drift and stationary streams, the shift alone (no test) and with the test."""
    made = {}
    for name, options in {"alone": {}, "with_test": {"restart_delta": 0.01}}.items():
        for drift in (True, False):
            learner = _learner(**options)
            out = _play(learner, range(T), drift)
            made[name, drift] = (learner, out)
    return made


def _assert_shift_is_the_posterior(learner, segment_lam: float) -> np.ndarray:
    """Every ninth trial's shift of each model against :func:`_posterior` of its memory
    with the segment prior ``segment_lam``; returns the shifts ``[R, K]``."""
    test = learner.restart
    theta = learner.correction.theta[..., 0].numpy()
    got = test.shift.numpy()
    for r in range(0, R, 9):
        for k in range(K):
            y = test.values[r, k, : test.count[r, k]].numpy()
            p, after = _posterior(y, 0.25, segment_lam, HAZARD)
            assert got[r, k] == pytest.approx(after - p * theta[r, k], abs=1e-9)
    return got


@pytest.mark.parametrize("name", ["alone", "with_test"])
def test_every_cells_shift_is_the_posterior_written_out(shifted, name):
    _assert_shift_is_the_posterior(shifted[name, True][0], 1.0)


def test_the_shifts_segment_prior_is_restart_lam():
    """``restart_lam`` (10, as the RouterBench preset gives it) is the prior precision of
    the segment after a change: the shift against the numpy posterior with that precision,
    on 50 rounds before the drift and 150 after, where the drifted model is shifted down."""
    learner = _learner(restart_lam=10.0)
    _play(learner, range(T0 - 50, T0 + 150), True)
    got = _assert_shift_is_the_posterior(learner, 10.0)
    assert np.median(got[:, 0]) < -0.15


def test_the_scores_are_base_plus_correction_plus_shift(shifted):
    learner, _ = shifted["alone", True]
    probe = _round(0, torch.Generator().manual_seed(9), False)[0]
    base = learner.base.predict(probe)[0].double()
    expected = base + learner.correction.theta[:, None, :, 0] + learner.restart.shift[:, None]
    torch.testing.assert_close(learner.predict_quality(probe), expected, rtol=0, atol=1e-12)


def test_the_drifted_model_is_shifted_long_before_the_test_fires(shifted):
    learner, out = shifted["alone", True]
    assert learner.restart.delta is None and learner.restart.restarts.sum() == 0
    assert all(m is None for m in out["reported"])  # no test: no restart metric
    # a bias held at the base (lam 1e4) barely moves; the shift carries the drop
    shift = learner.restart.shift
    assert learner.correction.theta[:, 0, 0].abs().max() < 0.03
    # the drop of 0.3 and the base's own error on that model's later residuals
    assert shift[:, 0].median() < -0.2
    assert shift[:, 1:].abs().median() < 0.01 and shift[:, 1:].abs().max() < 0.1
    # the drifted model is played less after the change than by the same learner without it
    plain = ResidualLinUCB(R, K, D, _base(), _train(), lam=1e4, projection=0).double()
    actions = torch.stack(_play(plain, range(T), True)["action"])[T0 + 50 :]
    with_shift = torch.stack(out["action"])[T0 + 50 :]
    assert (with_shift == 0).double().mean() < 0.5 * (actions == 0).double().mean()


def test_the_stationary_twin_is_barely_shifted(shifted):
    learner, _ = shifted["alone", False]
    assert learner.restart.shift.abs().median() < 0.01
    assert learner.restart.shift.abs().max() < 0.1


def test_with_the_test_the_shift_reads_the_memory_kept_after_a_restart(shifted):
    learner, _ = shifted["with_test", True]
    assert learner.restart.restarts[:, 0].min() >= 1  # every trial restarted the model
    # after the restart the bias is refit on the kept residuals: little left to shift
    assert learner.restart.shift[:, 0].abs().median() < 0.05


@pytest.mark.parametrize("cls", [ResidualLinUCB, ResidualLinTS])
def test_without_a_hazard_no_shift_state_and_no_change(cls):
    off = cls(R, K, D, _base(), _train(), lam=1e4, projection=0, restart_delta=0.01)
    assert "restart.shift" not in off.state_dict()  # checkpoints of earlier runs still load
    on = _learner(cls)
    assert "restart.shift" in on.state_dict()
    # before any update the shift is 0: the base router's choices, bit for bit
    probe = _round(0, torch.Generator().manual_seed(9), False)[0]
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    plain = cls(R, K, D, _base(), _train(), lam=1e4, projection=0).double()
    assert torch.equal(on.act(probe, g1).action, plain.act(probe, g2).action)


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"change_hazard": 0.0}, "change_hazard"),
        ({"change_hazard": 1.0}, "change_hazard"),
        ({"change_hazard": 1e-3, "projection": None}, "projection: 0"),
        ({"change_hazard": 1e-3, "projection": 0, "gamma": 0.9}, "change_hazard"),
        ({"change_hazard": 1e-3, "projection": 0, "restart_memory": 1}, "restart_memory"),
    ],
)
@pytest.mark.parametrize("cls", [ResidualLinUCB, ResidualLinTS])
def test_bad_hazard_options_are_refused_by_name(cls, options, key):
    router = MLPScoreRouter(4, K, D, torch.zeros(4), _base_train(), steps=2)
    with pytest.raises(OptionError, match=key) as built:
        cls(4, K, D, router, _base_train(), **options)
    assert "\n" not in str(built.value)
    with pytest.raises(OptionError, match=key):  # the config check, before any fit
        cls.check_options(**options)


def test_the_hazard_is_chosen_on_validation():
    for cls in (ResidualLinUCB, ResidualLinTS):
        assert "change_hazard" in cls.chosen_on_validation
