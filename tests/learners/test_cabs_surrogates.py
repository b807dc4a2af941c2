"""``surrogates="none"``: CABS-C/CABS-D keep the graph and its exploration, but the regression
solver sees only the played arm (against a numpy weighted least-squares reference)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.learners.helpers import F64, LinearProblem, feedback_for
from torchroute.learners import CABSC, CABSD
from torchroute.models import MultiHeadOracle

R, K, D = 3, 5, 6


def _oracle() -> MultiHeadOracle:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return MultiHeadOracle(D, K, feature_dim=4, hidden=8).eval()


def _rho() -> torch.Tensor:
    return torch.tensor([0.0, 100.0, 500.0])


@pytest.mark.parametrize("targets", ["ips", "ips_weights"])
def test_no_surrogates_is_the_ridge_fit_on_the_played_rows_only(targets):
    lam, rounds = 1.0, 15
    learner = CABSC(
        R, K, D, _rho(), _oracle(), lam=lam, targets=targets, iqr="off", graph="paper",
        oracle_input="x", surrogates="none",
    ).double()  # fmt: skip
    problem, gen = LinearProblem(R, K, D, seed=4), torch.Generator().manual_seed(2)
    rows = [[[] for _ in range(K)] for _ in range(R)]  # (x, target, weight) per trial and arm
    dropped = 0  # surrogate rows the default would have fed (dropped here by hand)
    for _ in range(rounds):
        context = problem.context()
        decision = learner.act(context, gen)
        _, graph, p = learner._pending
        reward = problem.reward(context).clamp(0, 1)
        metrics = learner.update(context, decision, feedback_for(learner, decision, reward), gen)
        assert torch.equal(metrics["surrogates"], torch.zeros(R, dtype=F64))
        for t in range(R):
            xv, i = context.x[t, 0].numpy(), int(decision.action[t, 0])
            r, pi = float(reward[t, 0, i]), float(p[t, 0, i])
            rows[t][i].append((xv, r / pi, 1.0) if targets == "ips" else (xv, r, 1.0 / pi))
            dropped += int(graph[t, 0, i].sum()) - 1
    assert dropped > 0  # the graph had surrogate edges to drop
    expected = np.zeros((R, K, D))
    for t in range(R):
        for arm in range(K):
            a, b = lam * np.eye(D), np.zeros(D)
            for xv, yv, wv in rows[t][arm]:
                a += wv * np.outer(xv, xv)
                b += wv * yv * xv
            expected[t, arm] = np.linalg.solve(a, b)
    np.testing.assert_allclose(learner.rs.theta.numpy(), expected, rtol=0, atol=1e-8)
    assert torch.equal(learner.bias, torch.zeros(R, K, dtype=F64))  # nothing de-biased


@pytest.mark.parametrize("meta", ["paper", "single_ix"])
def test_no_surrogates_keeps_cabs_d_graph_distribution_and_meta_step(meta):
    def build(surrogates: str) -> CABSD:
        return CABSD(
            R, K, D, _rho(), _oracle(), 40, lam=1.0, standard="linucb", meta=meta,
            iqr="off", oracle_input="x", surrogates=surrogates,
        ).double()  # fmt: skip

    default, ablated = build("oracle"), build("none")
    problem = LinearProblem(R, K, D, seed=5)
    g_default, g_ablated = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    context = problem.context()
    first, second = default.act(context, g_default), ablated.act(context, g_ablated)
    assert torch.equal(first.probs, second.probs) and torch.equal(first.action, second.action)
    for mine, theirs in zip(ablated._pending[1:], default._pending[1:], strict=True):
        assert torch.equal(mine, theirs)  # the graph, p_1, p_2 (CABS-C's distribution), q
    reward = problem.reward(context).clamp(0, 1)
    m_default = default.update(context, first, feedback_for(default, first, reward), g_default)
    m_ablated = ablated.update(context, second, feedback_for(ablated, second, reward), g_ablated)
    # the meta-learner reads the same surrogates, and the standard expert the same reward
    assert torch.equal(ablated.log_weights, default.log_weights)
    assert torch.equal(ablated.expert.theta, default.expert.theta)
    assert bool((m_default["surrogates"] > 0).any())
    assert torch.equal(m_ablated["surrogates"], torch.zeros(R, dtype=F64))
    # only CABS-C's regression differs: its played-arm-only fit
    played = torch.nn.functional.one_hot(first.action[:, 0], K).bool()  # [R, K]
    theta_a, theta_d = ablated.cabs_c.rs.theta, default.cabs_c.rs.theta
    assert torch.equal(theta_a[played], theta_d[played])
    assert not torch.equal(theta_a, theta_d)
    assert torch.equal(theta_a[~played], torch.zeros_like(theta_a[~played]))


def test_bad_surrogates_value_is_a_one_line_error():
    with pytest.raises(ValueError, match="surrogates must be one of") as err:
        CABSC(R, K, D, _rho(), _oracle(), surrogates="off")
    assert "\n" not in str(err.value)
