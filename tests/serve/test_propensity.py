"""Honest propensities: with the state frozen, the reported probabilities are the frequencies."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from torchroute.learners import (
    EXP3,
    EpsilonGreedy,
    FullFeedbackLinUCB,
    LinTS,
    LinUCB,
    NeuralUCB,
    RandomRouter,
    SquareCB,
)
from torchroute.serve import Router

ARMS = ["a", "b", "c"]
D = 3
N = 2000  # routes of the same query with the state frozen


def _router(factory) -> Router:
    return Router.fresh(lambda p: factory(p).double(), ARMS, rho=0.0, dim=D, dtype=torch.float64)


def _trained(factory, steps: int = 12) -> Router:
    """A router after a few feedbacks (a posterior that is neither flat nor certain)."""
    router = _router(factory)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        decisions = router.route(embeddings=rng.normal(size=(2, D)))
        router.feedback(
            [d["request_id"] for d in decisions], rng.uniform(0.3, 0.7, 2).tolist(), [0.0, 0.0]
        )
    return router


LEARNERS = {
    "linucb_fresh": (LinUCB.from_problem, 0),  # every arm tied: 1/3 each, not 1.0
    "linucb": (LinUCB.from_problem, 12),  # deterministic: 1.0
    "lints": (lambda p: LinTS.from_problem(p, v=0.3), 12),  # posterior draws
    "epsilon_greedy": (lambda p: EpsilonGreedy.from_problem(p, eps0=0.3), 12),
    "epsilon_greedy_fresh": (lambda p: EpsilonGreedy.from_problem(p, eps0=0.3), 0),  # ties
    "squarecb": (SquareCB.from_problem, 12),
    "random": (RandomRouter.from_problem, 0),
    "exp3": (lambda p: EXP3.from_problem(p, horizon=100), 12),
    "neuralucb": (
        lambda p: NeuralUCB.from_problem(p, hidden=8, generator=torch.Generator().manual_seed(0)),
        12,
    ),
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.slow) if n == "neuralucb" else n  # ~10 s
        for n in LEARNERS
    ],
)
def test_reported_probabilities_match_the_empirical_frequencies(name):
    factory, steps = LEARNERS[name]
    router = _trained(factory, steps)
    before = {
        k: v.clone() for k, v in router.learner.state_dict().items() if isinstance(v, torch.Tensor)
    }
    query = np.array([[0.6, -0.3, 0.5]])
    decisions = router.route(embeddings=np.repeat(query, N, axis=0))  # one call: state frozen
    for key, value in before.items():
        assert torch.equal(router.learner.state_dict()[key], value), key
    table = router.log.table()
    probs = np.array(table["probabilities"][-N:])  # [N, K] as logged
    chosen = np.array([ARMS.index(d["model"]) for d in decisions])
    reported = np.array([d["propensity"] for d in decisions])
    np.testing.assert_array_equal(reported, probs[np.arange(N), chosen])
    assert (reported > 0).all() and (reported <= 1).all()
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-9)
    empirical = np.bincount(chosen, minlength=len(ARMS)) / N
    mean = probs.mean(0)
    sigma = np.sqrt(mean * (1 - mean) / N) + 1e-3
    assert (np.abs(empirical - mean) <= 5 * sigma).all(), (name, empirical, mean)
    if name == "linucb_fresh":
        np.testing.assert_allclose(probs, 1 / 3)
    if name == "linucb":
        assert (reported == 1.0).all()
    if name == "lints":  # a sampled rule: its propensity is not 1
        assert 0.05 < reported.mean() < 0.95


def test_a_full_feedback_learner_served_on_bandit_feedback_is_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="torchroute.serve.router"):
        _router(FullFeedbackLinUCB.from_problem)
    assert any("bandit feedback" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="torchroute.serve.router"):
        _router(LinUCB.from_problem)
    assert not caplog.records
