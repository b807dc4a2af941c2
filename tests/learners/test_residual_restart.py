"""The residual learners' change test (``restart_delta``): a Gaussian GLR test per (trial,
arm) on the residuals, and a local restart of that arm's correction.

The statistic is checked against a numpy loop over every split point, the memory against
Python lists, the detections on a synthetic stream whose first model drops by 0.3 half-way
(and on its stationary twin), the correction after a restart against a numpy ridge on the
residuals observed since, a checkpoint mid-stream, and the refusals.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch

from torchroute.errors import OptionError
from torchroute.functional.glr import gaussian_glr, glr_threshold
from torchroute.learners.anchors import MLPScoreRouter
from torchroute.learners.residual import ResidualLinTS, ResidualLinUCB
from torchroute.learners.residual_restart import GLRRestart
from torchroute.types import Context, Feedback, TrainSplit

F64 = torch.float64
R, K, D = 64, 4, 6
T, T0 = 700, 350  # rounds; the first model's score drops by 0.3 from round T0 on
MEMORY = 512  # the residuals the test reads (enough to find a drop of 0.3: the class doc)
P = torch.tensor([0.7, 0.5, 0.6, 0.4], dtype=F64)  # each model's chance of a score of 1


def _glr_loop(y: np.ndarray, sigma2: float) -> float:
    """``max_s s (n - s) / n (mean before - mean after)^2 / (2 sigma^2)``, one split at a time."""
    return _glr_split_loop(y, sigma2)[0]


def _glr_split_loop(y: np.ndarray, sigma2: float) -> tuple[float, int]:
    """The statistic and the first split ``s`` where it is reached (0 for fewer than 2)."""
    n, best, where = len(y), 0.0, 0
    for s in range(1, n):
        gap = y[:s].mean() - y[s:].mean()
        stat = s * (n - s) / n * gap**2 / (2 * sigma2)
        if stat > best or where == 0:
            best, where = max(stat, best), s
    return best, where


def test_the_statistic_is_a_loop_over_every_split_point():
    g = np.random.default_rng(0)
    m = 30
    values = g.normal(size=(7, 5, m)) * g.uniform(0.1, 2.0, size=(7, 5, 1))
    values[:3] += np.where(np.arange(m) < 12, 0.0, 1.5)  # some sequences with a change
    count = g.integers(0, m + 1, size=(7, 5))
    count[0, :3] = [0, 1, 2]
    padded = np.where(np.arange(m) < count[..., None], values, np.nan)  # never read
    stat = gaussian_glr(torch.tensor(padded), torch.tensor(count), 0.3)
    expected = np.vectorize(lambda i, j: _glr_loop(values[i, j, : count[i, j]], 0.3))(
        *np.indices(count.shape)
    )
    np.testing.assert_allclose(stat.numpy(), expected, rtol=1e-10, atol=1e-12)
    assert (expected[:3] > 5).any()  # a change is a large value
    threshold = glr_threshold(torch.tensor([1, 10, 256]), 0.01)
    np.testing.assert_allclose(
        threshold.numpy(), [math.log(3 * n**1.5 / 0.01) for n in (1, 10, 256)], rtol=1e-12
    )


@pytest.mark.parametrize("dense", [False, True], ids=["observed-cells", "every-cell"])
def test_the_memory_keeps_the_last_residuals_of_each_cell_in_order(dense, monkeypatch):
    if dense:  # the path off the CPU: every cell read, masked
        monkeypatch.setattr("torchroute.learners.residual_restart._observed_rows", lambda s: None)
    g = torch.Generator().manual_seed(1)
    r, k, b, memory = 3, 4, 2, 5
    test = GLRRestart(r, k, delta=1e-300, memory=memory, who="test")  # never reports
    kept: list[list[float]] = [[] for _ in range(r * k)]
    for _ in range(40):
        observed = torch.rand(r, b, k, generator=g) < 0.4
        residual = torch.rand(r, b, k, generator=g, dtype=F64)
        assert not test.step(observed, residual).any()
        for i in range(r):
            for j in range(b):
                for a in range(k):
                    if observed[i, j, a]:
                        kept[i * k + a] = (kept[i * k + a] + [float(residual[i, j, a])])[-memory:]
    for i in range(r):
        for a in range(k):
            n = int(test.count[i, a])
            assert n == len(kept[i * k + a])
            np.testing.assert_allclose(test.values[i, a, :n].numpy(), kept[i * k + a], rtol=1e-6)


@pytest.mark.parametrize("dense", [False, True], ids=["observed-cells", "every-cell"])
def test_each_rounds_detections_are_a_loop_over_python_lists(dense, monkeypatch):
    """With a test that fires (some cells shift by 2 half-way), each round's detections are
    those of the numpy loop statistic on the Python lists of kept residuals against the
    threshold, a detection keeps the list's residuals after the loop's best split point,
    and the memory wraps (``memory`` 12 of 60 rounds): the statistic reads the kept
    residuals alone, however many columns are held."""
    if dense:
        monkeypatch.setattr("torchroute.learners.residual_restart._observed_rows", lambda s: None)
    g = torch.Generator().manual_seed(5)
    r, k, memory, delta = 3, 4, 12, 0.2
    test = GLRRestart(r, k, delta=delta, memory=memory, who="test")
    kept: list[list[float]] = [[] for _ in range(r * k)]
    fired = 0
    for t in range(60):
        observed = torch.rand(r, 1, k, generator=g) < 0.7
        residual = 0.3 * torch.randn(r, 1, k, generator=g, dtype=F64)
        if t >= 25:
            residual[:, :, :2] += 2.0  # arms 0 and 1 shift
        changed = test.step(observed, residual)
        for i in range(r):
            for a in range(k):
                cell = i * k + a
                if not observed[i, 0, a]:
                    assert not changed[i, a]
                    continue
                kept[cell] = (kept[cell] + [float(residual[i, 0, a])])[-memory:]
                n = len(kept[cell])
                stat, split = _glr_split_loop(np.array(kept[cell]), 0.25)
                expect = stat >= math.log(3 * n**1.5 / delta)
                assert bool(changed[i, a]) == expect, (t, i, a, stat)
                if expect:
                    kept[cell], fired = kept[cell][split:], fired + 1
                assert int(test.count[i, a]) == len(kept[cell])
                held = test.values[i, a, : len(kept[cell])].double().numpy()
                np.testing.assert_allclose(held, kept[cell], rtol=1e-6)
    assert fired >= 6  # the shifted cells fire


def _train() -> TrainSplit:
    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(80, D - 1, generator=g), dim=-1)
    x = torch.cat([x, torch.ones(80, 1)], -1)
    scores = (torch.rand(80, K, generator=g) < P.float()).float()
    costs = torch.tensor([0.1, 0.2, 0.4, 0.8]).expand(80, K).clone()
    return TrainSplit(x, scores, costs)


def _base() -> MLPScoreRouter:
    rho = torch.linspace(0.0, 0.5, R)
    return MLPScoreRouter(R, K, D, rho, _train(), hidden=8, steps=30)


def _round(t: int, g: torch.Generator, drift: bool) -> tuple[Context, torch.Tensor]:
    """Round ``t``: contexts ``[R, 1, D]`` and 0/1 scores ``[R, 1, K]``."""
    x = torch.nn.functional.normalize(torch.randn(R, D - 1, generator=g, dtype=F64), dim=-1)
    x = torch.cat([x, torch.ones(R, 1, dtype=F64)], -1)[:, None]
    p = P.clone()
    if drift and t >= T0:
        p[0] -= 0.3
    return Context(x=x), (torch.rand(R, 1, K, generator=g, dtype=F64) < p).to(F64)


def _play(learner, rounds: range, drift: bool, seed: int = 3, gens=None):
    """Every model observed each round (full feedback). Returns per round the actions, the
    restart counts ``[R, K]``, the contexts and the residuals ``score - base_k(x)``."""
    g, g_act = gens or (torch.Generator().manual_seed(seed), torch.Generator().manual_seed(4))
    out = {"action": [], "restarts": [], "x": [], "residual": []}
    for t in rounds:
        context, score = _round(t, g, drift)
        decision = learner.act(context, g_act)
        observed = torch.ones(R, 1, K, dtype=torch.bool)
        zeros = torch.zeros(R, 1, K, dtype=F64)
        feedback = Feedback(reward=zeros, observed=observed, score=score, cost=zeros)
        metrics = learner.update(context, decision, feedback)
        out.setdefault("reported", []).append(metrics.get("restarts"))
        out["action"].append(decision.action.clone())
        if learner.restart is not None:
            out["restarts"].append(learner.restart.restarts.clone())
        out["x"].append(context.x[:, 0].numpy())
        y_hat = learner.base.predict(context)[0].double()
        out["residual"].append((score - y_hat)[:, 0].numpy())
    return out


@pytest.fixture(scope="module")
def streams():
    """The drift stream and its stationary twin (the same contexts and draws), 64 trials."""
    made = {}
    for drift in (True, False):
        learner = ResidualLinUCB(
            R, K, D, _base(), lam=1e4, restart_delta=0.01, restart_memory=MEMORY
        ).double()
        made[drift] = (learner, _play(learner, range(T), drift))
    return made


def test_the_drifted_model_restarts_after_the_change_in_every_trial(streams):
    _, out = streams[True]
    restarts = torch.stack(out["restarts"])  # [T, R, K]
    assert restarts[T0 - 1].sum() == 0  # nothing before the change
    first = (restarts[:, :, 0] > 0).long().argmax(0)  # [R] the round of the first restart
    assert (restarts[-1, :, 0] >= 1).all() and (first >= T0).all()
    assert restarts[-1, :, 1:].sum() == 0  # the other models never
    reported = torch.stack(out["reported"]).sum(0)  # [R] the update's metric, summed
    assert torch.equal(reported, restarts[-1].sum(-1).to(F64))
    delay = (first - T0).double()
    assert delay.median() < 200  # found within about half the memory of post-change data


def test_the_stationary_twin_never_restarts(streams):
    learner, _ = streams[False]
    assert learner.restart.restarts.sum() == 0


def test_after_a_restart_the_correction_is_a_ridge_on_the_residuals_since(streams):
    learner, out = streams[True]
    restarts = torch.stack(out["restarts"]).numpy()  # [T, R, K]
    x, residual = np.stack(out["x"], 1), np.stack(out["residual"], 1)  # [R, T, D], [R, T, K]
    theta = np.zeros((R, K, D))
    for r in range(R):
        for k in range(K):
            changes = np.flatnonzero(np.diff(restarts[:, r, k], prepend=0))
            since = changes[-1] + 1 if len(changes) else 0  # that round's data are dropped
            lam = 1.0 if len(changes) else 1e4
            xr, yr = x[r, since:], residual[r, since:, k]
            theta[r, k] = np.linalg.solve(lam * np.eye(D) + xr.T @ xr, xr.T @ yr)
    np.testing.assert_allclose(learner.correction.theta.numpy(), theta, rtol=1e-6, atol=1e-9)
    probe = _round(0, torch.Generator().manual_seed(9), False)[0]
    expected = learner.base.predict(probe)[0].double().numpy() + np.einsum(
        "rkd,rbd->rbk", theta, probe.x.numpy()
    )
    np.testing.assert_allclose(learner.predict_quality(probe).numpy(), expected, atol=1e-9)


def test_a_bias_correction_is_refit_on_the_residuals_after_the_change():
    """``projection: 0`` (a bias per model): the final bias of every (trial, model) against
    a numpy replay. Where the learner restarted, the replay finds the loop's best split point
    of the residuals kept at each restart round (the kept list replayed with its memory), and
    the bias is the mean of every residual from that point on, with precision ``restart_lam``
    = 1: ``sum / (1 + m)``; elsewhere the ridge on all residuals, ``sum / (lam + T)``."""
    learner = ResidualLinUCB(
        R, K, D, _base(), _train(), lam=1e4, projection=0, restart_delta=0.01,
        restart_memory=MEMORY,
    ).double()  # fmt: skip
    out = _play(learner, range(T), True)
    restarts = torch.stack(out["restarts"]).numpy()  # [T, R, K]
    residual = np.stack(out["residual"], 1)  # [R, T, K]
    assert restarts[-1, :, 0].min() >= 1 and restarts[-1, :, 1:].sum() == 0
    expected = np.empty((R, K))
    for r in range(R):
        for k in range(K):
            start = 0  # the first round the correction reads
            kept = 0  # the memory: rounds start_kept .. t
            for t in np.flatnonzero(np.diff(restarts[:, r, k], prepend=0)):
                first = max(kept, t + 1 - MEMORY)  # the memory holds at most MEMORY
                _, split = _glr_split_loop(residual[r, first : t + 1, k], 0.25)
                start = kept = first + split
            lam = 1.0 if start else 1e4
            expected[r, k] = residual[r, start:, k].sum() / (lam + T - start)
    got = learner.correction.theta[..., 0].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-9)
    # the drifted model's bias is near its mean residual after the change (the base's own
    # error and the drop of 0.3) in every trial: the restart came late, yet nothing after the
    # change point was thrown away
    after = residual[:, T0:, 0].mean(1)
    assert np.abs(got[:, 0] - after).max() < 0.08
    assert np.median(np.abs(got[:, 0] - after)) < 0.01
    assert (after - residual[:, :T0, 0].mean(1)).mean() < -0.25


@pytest.mark.parametrize("cls", [ResidualLinUCB, ResidualLinTS])
def test_with_no_test_the_learner_makes_the_same_choices_as_a_test_that_never_fires(cls):
    """``restart_delta: null`` keeps no restart state; a test that cannot fire (a delta so
    small that no residual sequence reaches the threshold) changes no decision, bit for bit."""
    hp = {"v": 0.3} if cls is ResidualLinTS else {}
    off = cls(R, K, D, _base(), lam=1.0, **hp).double()
    assert off.restart is None
    assert not any(key.startswith("restart") for key in off.state_dict())
    never = cls(R, K, D, _base(), lam=1.0, restart_delta=1e-300, **hp).double()
    a = torch.stack(_play(off, range(200), True)["action"])
    b = torch.stack(_play(never, range(200), True)["action"])
    assert torch.equal(a, b)
    assert never.restart.count.amax() == 200  # it did read the stream


def test_a_checkpoint_mid_stream_continues_identically():
    def make():
        return ResidualLinUCB(
            R, K, D, _base(), lam=1e4, restart_delta=0.01, restart_memory=MEMORY
        ).double()

    first = make()
    g, g_act = torch.Generator().manual_seed(3), torch.Generator().manual_seed(4)
    _play(first, range(450), True, gens=(g, g_act))
    assert first.restart.restarts.sum() > 0  # some restarts before the checkpoint
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    second = make()
    second.load_state_dict(torch.load(buffer, weights_only=True))
    state = (g.get_state(), g_act.get_state())
    a = _play(first, range(450, T), True, gens=(g, g_act))
    g2, g2_act = torch.Generator(), torch.Generator()
    g2.set_state(state[0])
    g2_act.set_state(state[1])
    b = _play(second, range(450, T), True, gens=(g2, g2_act))
    assert torch.equal(torch.stack(a["action"]), torch.stack(b["action"]))
    assert torch.equal(torch.stack(a["restarts"]), torch.stack(b["restarts"]))
    assert (a["restarts"][-1] > a["restarts"][0]).any()  # and some after it


def test_a_warm_start_is_the_corrections_prior_and_not_read_by_the_test():
    from torchroute.learners.warm_options import WarmStart
    from torchroute.learners.warm_start import WarmRows
    from torchroute.types import Problem

    learner = ResidualLinUCB(R, K, D, _base(), lam=1.0, restart_delta=0.5, restart_memory=4)
    learner = learner.double()
    context, score = _round(0, torch.Generator().manual_seed(2), False)
    x = torch.cat([context.x[:, 0], context.x[:, 0]])  # [2R, D]: 128 rows, 2 chunks
    y = torch.cat([score[:, 0] - 5.0, score[:, 0] + 5.0])[None].expand(R, -1, -1)  # a change
    rows = WarmRows(x=x, target=y, weight=torch.ones(2 * R, K, dtype=F64))
    problem = Problem(R, K, D, learner.base.rho, [str(k) for k in range(K)])
    learner.warm_start(rows, problem, WarmStart(source="train"))
    assert learner.restart is not None and learner.restart.count.sum() == 0
    assert learner.restart.restarts.sum() == 0
    plain = ResidualLinUCB(R, K, D, _base(), lam=1.0).double()
    plain.warm_start(rows, problem, WarmStart(source="train"))
    assert plain.correction.theta.abs().amax() > 0.1  # the rows did move the correction
    assert torch.equal(learner.correction.theta, plain.correction.theta)
    assert torch.equal(learner.correction.a_inv, plain.correction.a_inv)


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"restart_delta": 0.0}, "restart_delta"),
        ({"restart_delta": 1.0}, "restart_delta"),
        ({"restart_delta": float("nan")}, "restart_delta"),
        ({"restart_delta": 0.01, "restart_lam": 0.0}, "restart_lam"),
        ({"restart_lam": -1.0}, "restart_lam"),
        ({"restart_delta": 0.01, "restart_memory": 1}, "restart_memory"),
        ({"restart_delta": 0.01, "restart_memory": 2.5}, "restart_memory"),
        ({"restart_delta": 0.01, "gamma": 0.9}, "restart_delta"),
        ({"restart_delta": 0.01, "window": 10}, "restart_delta"),
    ],
)
@pytest.mark.parametrize("cls", [ResidualLinUCB, ResidualLinTS])
def test_bad_restart_options_are_refused_by_name(cls, options, key):
    with pytest.raises(OptionError, match=key) as built:
        cls(4, K, D, MLPScoreRouter(4, K, D, torch.zeros(4), _base_train(), steps=2), **options)
    assert "\n" not in str(built.value)
    with pytest.raises(OptionError, match=key):  # the config check, before any fit
        cls.check_options(**options)


def _base_train() -> TrainSplit:
    g = torch.Generator().manual_seed(0)
    x, scores = torch.randn(20, D, generator=g), torch.rand(20, K, generator=g)
    return TrainSplit(x, scores, torch.rand(20, K, generator=g))


def test_the_restart_options_are_chosen_on_validation_and_only_by_these_learners():
    from torchroute.learners.residual_squarecb import ResidualSquareCB

    for cls in (ResidualLinUCB, ResidualLinTS):
        assert {"restart_delta", "restart_lam"} <= set(cls.chosen_on_validation)
    assert "restart_delta" not in ResidualSquareCB.chosen_on_validation


def test_a_list_of_restart_options_is_a_set_of_candidates_each_checked():
    from torchroute.errors import ConfigError
    from torchroute.run.choose_on_validation import candidates_of

    target = "torchroute.learners.residual.ResidualLinUCB.from_problem"
    node = {"_target_": target, "restart_delta": [None, 0.01], "restart_lam": [1.0, 10.0]}
    found = candidates_of(node, "residual_linucb")
    assert found is not None and len(found.points) == 4
    assert {p["restart_delta"] for p in found.points} == {None, 0.01}
    with pytest.raises(ConfigError, match=r"learners\.residual_linucb.*restart_delta"):
        candidates_of({**node, "restart_delta": [None, 2.0]}, "residual_linucb")
    with pytest.raises(ConfigError, match="restart_delta"):  # the plain correction only
        candidates_of({**node, "gamma": [1.0, 0.9]}, "residual_linucb")


def test_a_restart_puts_back_the_prior_with_restart_lam_and_a_new_models_spread():
    g = torch.Generator().manual_seed(2)
    n, r = 40, 3
    x = torch.nn.functional.normalize(torch.randn(n, D - 1, generator=g), dim=-1)
    scores, costs = torch.rand(n, K, generator=g), torch.rand(n, K, generator=g)
    train = TrainSplit(torch.cat([x, torch.ones(n, 1)], -1), scores, costs)
    hidden = torch.tensor([False, False, False, True]).expand(r, -1)
    base = MLPScoreRouter(r, K, D, torch.zeros(r), train, hidden=8, steps=30).hide(hidden)
    learner = ResidualLinUCB(r, K, D, base, train, lam=50.0, restart_delta=0.01, restart_lam=2.0)
    learner = learner.double()
    corr = learner.correction
    corr.theta = torch.rand(r, K, D, generator=g, dtype=F64)  # a correction away from its prior
    corr.a_inv = corr.a_inv * 0.5
    before_theta, before_a = corr.theta.clone(), corr.a_inv.clone()
    changed = torch.zeros(r, K, dtype=torch.bool)
    changed[0, 3] = changed[1, 0] = True
    learner.restart.reset(corr, changed, learner.base.hidden)
    plain = torch.eye(D, dtype=F64) / 2.0  # I / restart_lam
    new = plain.clone()
    new[-1, -1] += learner.spread  # the bias column: the new model's spread
    torch.testing.assert_close(corr.a_inv[0, 3], new)
    torch.testing.assert_close(corr.a_inv[1, 0], plain)
    assert (corr.theta[changed] == 0).all()
    keep = ~changed
    assert torch.equal(corr.theta[keep], before_theta[keep])
    assert torch.equal(corr.a_inv[keep], before_a[keep])


def test_held_at_the_base_it_makes_the_bases_choices_until_the_test_moves_a_model():
    """``lam = 1e9`` (a leaderboard's first candidate): the correction does not move, so
    every choice is the base router's until the test restarts the drifted model (none
    before the change: the stream is stationary until then), which the learner then leaves."""
    learner = ResidualLinUCB(
        R, K, D, _base(), _train(), lam=1e9, alpha=0.3, projection=0, restart_delta=0.01,
        restart_memory=MEMORY,
    ).double()  # fmt: skip
    out = _play(learner, range(T), True)
    actions = torch.stack(out["action"])  # [T, R, 1]
    g = torch.Generator().manual_seed(3)  # the same contexts again (_play's seed)
    base = torch.stack([learner.base.act(_round(t, g, True)[0]).action for t in range(T)])
    first = (torch.stack(out["restarts"])[:, :, 0] > 0).long().argmax(0)  # [R]
    assert (first >= T0).all() and torch.equal(actions[:T0], base[:T0])
    before = torch.arange(T)[:, None] < first  # [T, R]: until each trial's first restart
    assert torch.equal(actions[before], base[before])
    assert (base[-100:] == 0).double().mean() > 0.8  # the base keeps the drifted model
    assert (actions[-100:] == 0).double().mean() < 0.2  # the learner has left it
