"""RunningMetrics: sums of open outcomes and learner metrics, curves, state round trip."""

from __future__ import annotations

import pytest
import torch

from torchroute.metrics import RunningMetrics


def _outcome(t: int) -> dict[str, torch.Tensor]:
    """Round ``t`` of two trials with B = 2 contexts and a 3-vector per context."""
    base = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float32) * (t + 1)
    return {"reward": base, "cost": base[..., None] * torch.tensor([1.0, 0.5, 0.25])}


def test_sums_over_contexts_and_rounds_in_float64():
    m = RunningMetrics(2, "cpu", curve_keys=("reward",))
    for t in range(3):
        m.add(_outcome(t))
        m.mark()
    assert m.rounds == 6  # 3 rounds x B = 2
    # by hand: per trial, (1 + 2) * (1 + 2 + 3) and (3 + 4) * 6
    expected = torch.tensor([18.0, 42.0], dtype=torch.float64)
    assert m.sums["reward"].dtype == torch.float64
    torch.testing.assert_close(m.sums["reward"], expected, rtol=0, atol=0)
    torch.testing.assert_close(
        m.sums["cost"], expected[:, None] * torch.tensor([1.0, 0.5, 0.25], dtype=torch.float64)
    )
    rounds, curve = m.curve()
    assert rounds == [2, 4, 6] and curve.shape == (3, 1, 2)
    torch.testing.assert_close(curve[:, 0, 0], torch.tensor([3.0, 9.0, 18.0], dtype=torch.float64))


def test_float32_inputs_accumulate_without_float32_rounding():
    m = RunningMetrics(1, "cpu")
    tiny = torch.full((1, 1), 1e-8, dtype=torch.float32)
    m.add({"x": torch.ones(1, 1)})
    for _ in range(1000):
        m.add({"x": tiny})
    # in float32, 1 + 1e-8 == 1: float64 sums keep the small increments
    assert m.sums["x"].item() == pytest.approx(1.0 + 1000 * float(tiny), rel=1e-12)


def test_learner_metrics_are_per_round_means():
    m = RunningMetrics(2, "cpu")
    for t in range(4):
        m.add({"r": torch.zeros(2, 1)})
        m.add_learner_stats({"loss": torch.tensor([1.0, 2.0]) * t})
    torch.testing.assert_close(
        m.learner_means()["loss"], torch.tensor([1.5, 3.0], dtype=torch.float64)
    )
    with pytest.raises(ValueError, match=r"learner metric 'loss' must be \[R=2\]"):
        m.add_learner_stats({"loss": torch.zeros(3)})
    assert RunningMetrics(2, "cpu").learner_means() == {}


def test_bad_outcome_shapes_are_named():
    m = RunningMetrics(2, "cpu")
    with pytest.raises(ValueError, match=r"outcome 'reward' must be \[R=2, B\]"):
        m.add({"reward": torch.zeros(3, 1)})
    with pytest.raises(ValueError, match=r"outcome 'reward' must be \[R=2, B\]"):
        m.add({"reward": torch.zeros(2)})


def test_all_finite_sees_every_sum():
    m = RunningMetrics(2, "cpu")
    assert bool(m.all_finite())
    m.add({"r": torch.zeros(2, 1)})
    assert bool(m.all_finite())
    m.add_learner_stats({"loss": torch.tensor([0.0, float("inf")])})
    assert not bool(m.all_finite())


def test_state_round_trip_and_curve_key_mismatch():
    m = RunningMetrics(2, "cpu", curve_keys=("reward",))
    for t in range(2):
        m.add(_outcome(t))
        m.add_learner_stats({"loss": torch.ones(2)})
        m.mark()
    fresh = RunningMetrics(2, "cpu", curve_keys=("reward",))
    fresh.load_state_dict(m.state_dict())
    for t in range(2, 4):
        for metrics in (m, fresh):
            metrics.add(_outcome(t))
            metrics.mark()
    assert fresh.rounds == m.rounds
    for key in m.sums:
        assert torch.equal(fresh.sums[key], m.sums[key])
    assert torch.equal(fresh.learner_sums["loss"], m.learner_sums["loss"])
    assert torch.equal(fresh.curve()[1], m.curve()[1])
    empty_rounds, empty = RunningMetrics(3, "cpu", curve_keys=("a", "b")).curve()
    assert empty_rounds == [] and empty.shape == (0, 2, 3)
    with pytest.raises(ValueError, match="records curves"):
        RunningMetrics(2, "cpu", curve_keys=("regret",)).load_state_dict(m.state_dict())


def test_learner_trajectory_is_the_interval_mean_and_survives_a_state_round_trip():
    metrics = RunningMetrics(2, "cpu", ("reward",))
    for t in range(6):  # loss = t per trial 0, 10 t per trial 1; "late" appears at round 4
        metrics.add({"reward": torch.ones(2, 1)})  # one context per round
        stats = {"loss": torch.tensor([t, 10.0 * t])}
        if t >= 3:
            stats["late"] = torch.tensor([1.0, 2.0])
        metrics.add_learner_stats(stats)
        if t in (1, 3, 5):  # marks after rounds 2, 4, 6 (two rounds per interval)
            metrics.mark()
    restored = RunningMetrics(2, "cpu", ("reward",))
    restored.load_state_dict(metrics.state_dict())
    for m in (metrics, restored):
        traj = m.learner_trajectory()
        expected = torch.tensor([[0.5, 5.0], [2.5, 25.0], [4.5, 45.0]], dtype=torch.float64)
        torch.testing.assert_close(traj["loss"], expected)
        assert torch.isnan(traj["late"][0]).all()
        # interval 2 holds one round with "late" (t = 3) over a two-round interval
        want = torch.tensor([[0.5, 1.0], [1.0, 2.0]], dtype=torch.float64)
        torch.testing.assert_close(traj["late"][1:], want)
