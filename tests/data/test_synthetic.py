"""Synthetic generators: determinism, ranges, and that routing by context pays."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchroute.data import DOMAINS, linear_contextual_table, synthetic_text_benchmark


@pytest.fixture(scope="module")
def bench():
    return synthetic_text_benchmark()


def test_shape_and_split(bench):
    assert bench.num_queries == 1500 and bench.num_arms == 8
    assert (bench.split.count("train"), bench.split.count("val")) == (900, 150)
    assert set(bench.groups) == set(DOMAINS)
    assert len(set(bench.text)) > 900  # the templates vary


def test_deterministic_given_seed(bench):
    again = synthetic_text_benchmark()
    assert again.fingerprint() == bench.fingerprint() and again.text == bench.text
    other = synthetic_text_benchmark(seed=1)
    assert other.fingerprint() != bench.fingerprint() and other.text != bench.text


def test_value_ranges(bench):
    assert set(torch.unique(bench.scores).tolist()) == {0.0, 1.0}
    assert (bench.costs > 0).all()
    assert float(bench.costs.min()) > 1e-6 and float(bench.costs.max()) < 5e-2
    mean_cost = bench.costs.mean(0)
    assert float(mean_cost.min()) > 1e-5 and float(mean_cost.max()) < 1e-2


@pytest.mark.parametrize("rho", [0.0, 300.0, 1000.0])
def test_best_arm_depends_on_domain(bench, rho: float):
    util = bench.utility(rho).numpy()
    groups = np.asarray(bench.groups)
    per_domain = np.stack([util[groups == d].mean(0) for d in DOMAINS])  # [D, K]
    assert len(set(per_domain.argmax(1).tolist())) >= 3
    by_domain = sum(per_domain[i].max() * np.mean(groups == d) for i, d in enumerate(DOMAINS))
    assert by_domain > util.mean(0).max() + 0.02  # routing by domain beats any single arm


def test_cost_changes_the_best_arm(bench):
    best = [int(bench.utility(rho).mean(0).argmax()) for rho in (0.0, 1000.0)]
    assert best[0] != best[1]
    assert bench.arm_names[best[0]] == "atlas-max"  # the priciest is the most accurate


def test_linear_table():
    table, theta = linear_contextual_table(200, 4, 6, seed=3, noise=0.0)
    x = table.embeddings.double()
    assert theta.shape == (4, 6) and x.shape == (200, 6)
    np.testing.assert_allclose(x.norm(dim=1).numpy(), 1.0, atol=1e-6)
    np.testing.assert_allclose(table.scores.numpy(), (x @ theta.T).numpy(), atol=1e-6)
    assert float(table.scores.min()) >= 0.1 - 1e-6 and float(table.scores.max()) <= 0.9 + 1e-6
    assert (table.costs > 0).all() and torch.unique(table.costs[:, 0]).numel() == 1
    coin, _ = linear_contextual_table(50, 3, 4, seed=3, bernoulli=True)
    assert set(torch.unique(coin.scores).tolist()) <= {0.0, 1.0}
    again, _ = linear_contextual_table(200, 4, 6, seed=3, noise=0.0)
    assert again.fingerprint() == table.fingerprint()
