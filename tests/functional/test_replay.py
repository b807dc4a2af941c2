"""Replay (Li et al. 2011) batched over trials equals an explicit rejection-sampling loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchroute.functional.random import TrialRNG, uniform
from torchroute.learners import EpsilonGreedy, LinUCB
from torchroute.ope.replay import replay
from torchroute.types import Context, Decision, Feedback


def _log(n=60, k=3, d=4, seed=0, uniform_log=False):
    rng = np.random.default_rng(seed)
    x = torch.as_tensor(rng.normal(size=(n, d)))
    mu = np.full((n, k), 1 / k) if uniform_log else rng.dirichlet(np.ones(k) * 3, size=n)
    a = torch.as_tensor([rng.choice(k, p=row) for row in mu])
    prop = torch.as_tensor(mu[np.arange(n), a.numpy()])
    score = torch.as_tensor(rng.uniform(size=n))
    cost = torch.as_tensor(rng.uniform(size=n) * 1e-3)
    return x, a, prop, score, cost


def _explicit(make, keys, x, a, prop, score, cost, rho):
    """One trial at a time: act, accept on a match and a coin < c / mu, update only then."""
    c = float(prop.min())
    values, masks = [], []
    for r in range(len(rho)):
        learner = make(1)
        gen = TrialRNG(keys[r : r + 1])
        total, mask = [], []
        for i in range(len(a)):
            context = Context(x=x[i].reshape(1, 1, -1))
            decision = learner.act(context, gen)
            coin = float(uniform(gen, (1,), dtype=torch.float64)[0])
            ok = int(decision.action[0, 0]) == int(a[i]) and coin < min(1.0, c / float(prop[i]))
            mask.append(ok)
            if not ok:
                continue
            u = min(max(float(score[i]) - float(rho[r]) * float(cost[i]), 0.0), 1.0)
            observed = torch.zeros(1, 1, learner.num_arms, dtype=torch.bool)
            observed[0, 0, int(a[i])] = True
            reward = torch.where(observed, torch.tensor(u, dtype=x.dtype), 0.0)
            chosen = Decision(probs=decision.probs, action=a[i].reshape(1, 1))
            learner.update(context, chosen, Feedback(reward, observed, only_played=True), gen)
            total.append(u)
        values.append(np.mean(total))
        masks.append(mask)
    return np.array(values), np.array(masks)


@pytest.mark.parametrize("kind", ["linucb", "epsilon_greedy"])
@pytest.mark.parametrize("uniform_log", [True, False])
def test_replay_equals_rejection_sampling_loop(kind, uniform_log):
    x, a, prop, score, cost = _log(uniform_log=uniform_log)
    rho = torch.tensor([0.0, 100.0, 300.0], dtype=torch.float64)
    keys = torch.tensor([11, 22, 33])

    def make(r):
        if kind == "linucb":
            return LinUCB(r, 3, 4, alpha=0.5).double()
        return EpsilonGreedy(r, 3, 4, eps0=0.5, decay=0.01).double()

    got = replay(make(3), x, a, prop, score, cost, rho, TrialRNG(keys))
    want_value, want_mask = _explicit(make, keys, x, a, prop, score, cost, rho)
    assert got.mask.numpy().tolist() == want_mask.tolist()
    np.testing.assert_allclose(got.value.numpy(), want_value, atol=1e-12)
    assert got.accepted.tolist() == want_mask.sum(1).tolist()
    assert (got.accepted > 0).all()


def test_replay_rejects_scale_above_min_propensity():
    x, a, prop, score, cost = _log(n=10)
    with pytest.raises(ValueError, match="scale must be"):
        replay(LinUCB(1, 3, 4).double(), x, a, prop, score, cost, torch.zeros(1), scale=0.99)
