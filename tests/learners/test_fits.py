"""Each static router is fitted once: the fit memo counted by hand (how many Adam runs a run
makes), the option check that takes no step, and the best-arm classifier's one fit per
distinct label set against a per-trial loop."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import tiny_run_config
from torchroute.learners import anchors, fits
from torchroute.learners.anchors import BestArmClassifier, LogisticScoreRouter, label_sets
from torchroute.learners.fits import fits_skipped, fitted, forget_fits, skipping
from torchroute.learners.residual import ResidualLinUCB
from torchroute.run import run_config
from torchroute.types import Problem, TrainSplit

K, D = 3, 4
MLP = {"_target_": "torchroute.learners.anchors.MLPScoreRouter.from_problem", "_partial_": True}


def _split(n: int, seed: int) -> TrainSplit:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, D, generator=g)
    scores = torch.sigmoid(x @ torch.randn(D, K, generator=g))
    costs = torch.tensor([1e-4, 5e-4, 2e-3]).expand(n, K).clone()
    return TrainSplit(x, scores, costs)


def _problem(rho: list[float]) -> Problem:
    r = len(rho)
    names = [f"m{k}" for k in range(K)]
    train, val = _split(80, 0), _split(30, 1)
    return Problem(r, K, D, rho=torch.tensor(rho), arm_names=names, train=train, validation=val)


@pytest.fixture
def adam_runs(monkeypatch):
    """Every ``_adam`` call of the anchors as ``(steps, skipped)``, the memo empty."""
    forget_fits()
    calls: list[tuple[int, bool]] = []
    real = anchors._adam

    def counting(params, loss_fn, steps, lr):
        calls.append((steps, skipping()))
        return real(params, loss_fn, steps, lr)

    monkeypatch.setattr(anchors, "_adam", counting)
    yield calls
    forget_fits()


def test_the_memo_fits_once_per_key_and_hands_out_copies():
    forget_fits()
    made = []

    def fit():
        made.append(1)
        return {"w": torch.ones(2)}

    first = fitted(("k", 1), fit)
    first["w"].add_(5.0)  # a caller's change does not reach the kept weights
    second = fitted(("k", 1), fit)
    fitted(("k", 2), fit)
    assert len(made) == 2
    assert torch.equal(second["w"], torch.ones(2))
    forget_fits()


def test_the_memo_keeps_the_last_max_fits():
    forget_fits()
    made = []
    for i in range(fits.MAX_FITS + 1):
        fitted(i, lambda: made.append(1) or {"w": torch.zeros(1)})
    fitted(fits.MAX_FITS, lambda: made.append(1) or {"w": torch.zeros(1)})  # kept
    fitted(0, lambda: made.append(1) or {"w": torch.zeros(1)})  # the oldest: gone
    assert len(made) == fits.MAX_FITS + 2
    forget_fits()


def test_a_router_of_the_same_config_and_split_is_fitted_once(adam_runs):
    first = anchors.MLPScoreRouter.from_problem(_problem([0.0, 300.0]), steps=20)
    again = anchors.MLPScoreRouter.from_problem(_problem([100.0]), steps=20)  # other trials
    assert adam_runs == [(20, False)]
    assert torch.equal(first.w1, again.w1) and torch.equal(first.b2, again.b2)
    anchors.MLPScoreRouter.from_problem(_problem([0.0]), steps=21)  # another config: fitted
    LogisticScoreRouter.from_problem(_problem([0.0]), steps=20)  # another class: fitted
    assert len(adam_runs) == 3


def test_a_residual_learner_reuses_the_runs_fit_of_its_base(adam_runs):
    node = {**MLP, "steps": 20, "weight_decay": [1e-4, 1e-3]}
    problem = _problem([0.0, 300.0])
    router = anchors.MLPScoreRouter.from_problem(problem, steps=20, weight_decay=[1e-4, 1e-3])
    residual = ResidualLinUCB.from_problem(problem, base=node)
    assert adam_runs == [(20, False)]
    assert torch.equal(residual.base.w1, router.w1)
    assert torch.equal(residual.base.choice, router.choice)
    ResidualLinUCB.from_problem(problem, base={**node, "hidden": 8})  # not the run's router
    assert len(adam_runs) == 2


def test_an_option_check_takes_no_step_and_keeps_nothing(adam_runs):
    with fits_skipped():
        checked = LogisticScoreRouter.from_problem(_problem([0.0]), steps=20, l2=1e-3)
    assert adam_runs == [(20, True)]
    assert torch.equal(checked.weights, torch.zeros(1, D + 1, K))  # the initial weights
    fitted_router = LogisticScoreRouter.from_problem(_problem([0.0]), steps=20, l2=1e-3)
    assert adam_runs[1:] == [(20, False)]  # the check left nothing to reuse
    assert fitted_router.weights.abs().sum() > 0


def test_label_sets_against_a_loop():
    label = torch.tensor([[2, 0, 1], [0, 0, 1], [2, 0, 1], [1, 1, 1], [0, 0, 1]])
    sets, group = label_sets(label)
    expected, index = [], []
    for row in label.tolist():  # distinct rows in the order they first occur
        if row not in expected:
            expected.append(row)
        index.append(expected.index(row))
    assert sets.tolist() == expected and group.tolist() == index
    distinct = label[[0, 1, 3]]
    same, which = label_sets(distinct)
    assert same is distinct and which.tolist() == [0, 1, 2]


def test_the_classifier_fits_each_distinct_rho_once_as_a_loop_over_trials_would(adam_runs):
    rho = [0.0, 2000.0, 0.0, 2000.0, 400.0]
    router = BestArmClassifier.from_problem(_problem(rho), l2=[1e-5, 1e-3], steps=60)
    for r, value in enumerate(rho):  # the reference: each trial fitted alone
        alone = BestArmClassifier.from_problem(_problem([value]), l2=[1e-5, 1e-3], steps=60)
        torch.testing.assert_close(router.weights[r], alone.weights[0], rtol=1e-5, atol=1e-6)
        assert router.choice[r] == alone.choice[0]
    assert torch.equal(router.weights[0], router.weights[2])
    assert not torch.allclose(router.weights[0], router.weights[1])  # other labels


def test_a_parallel_run_checks_in_the_parent_without_fitting(adam_runs, monkeypatch, tmp_path):
    from torchroute.run import experiment

    def in_this_process(fn, job, names, jobs):  # the workers' calls, one after the other
        return {name: fn(job, name) for name in names}

    monkeypatch.setattr(experiment, "map_in_processes", in_this_process)
    node = {**MLP, "weight_decay": 1e-4, "steps": 7}
    learners = {
        "mlp": node,
        "residual": {
            "_target_": "torchroute.learners.residual.ResidualLinUCB.from_problem",
            "_partial_": True,
            "base": node,
        },
    }
    run_config(tiny_run_config(tmp_path, learners, "jobs=2"))
    # the parent's check of both (no step), then one fit for the MLP and its residual
    assert adam_runs == [(7, True), (7, True), (7, False)]
