"""The well-specified low-rank experts generator and the sup-regret over the nuclear ball,
against explicit loops and a cvxpy solve of the comparator problem."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
import torch

from torchroute.envs import LowRankExperts
from torchroute.learners.base import FixedPolicy
from torchroute.loop import simulate
from torchroute.types import Decision

F64 = torch.float64
WELL = {"num_experts": 3, "rank": 1, "latent_dim": 4, "num_clusters": 4, "noise": 0.5}


def _env(**kw):
    kw = {**WELL, "horizon": 12, "dtype": F64, "generator": "well_specified", **kw}
    return LowRankExperts(seeds=kw.pop("seeds", [0, 1]), dims=kw.pop("dims", [5, 7]), **kw)


def test_well_specified_rewards_against_an_explicit_loop():
    env = _env()
    x = env.queries[:, :6]  # [R, 6, D]
    means, _, _ = env.expected_rewards(x)
    for r in range(env.num_trials):
        p = env.embed[r].numpy()  # [D, L]
        for m in range(env.num_arms):
            diag = np.diag(env.reward_matrix[r, m].numpy())
            support = np.flatnonzero(diag)
            assert len(support) == 2 * WELL["rank"] and set(np.abs(diag[support])) == {1.0}
            w_star = p @ np.diag(diag) @ p.T  # rank 2s, nuclear norm 2s
            assert np.linalg.matrix_rank(w_star, tol=1e-10) == 2 * WELL["rank"]
            assert np.linalg.svd(w_star, compute_uv=False).sum() == pytest.approx(2.0)
            for t in range(6):
                q = x[r, t].numpy()
                want = sum(diag[i] * float(p[:, i] @ q) ** 2 for i in range(p.shape[1]))
                assert float(means[r, t, m]) == pytest.approx(want, abs=1e-12)
                assert abs(want) <= 1 + 1e-12
    # the comparator is W* itself (nuclear norm 2 s = comparator_tau)
    torch.testing.assert_close(env.comparator, env.reward_matrix)


def test_well_specified_reward_is_the_mean_plus_gaussian_noise():
    env = _env(seeds=[3], dims=[5], noise=0.5)
    ctx = env.context(0)
    means, _, _ = env.expected_rewards(ctx.x)
    n = 20000
    x = ctx.x.expand(1, n, 5)
    gen = torch.Generator().manual_seed(0)
    action = torch.full((1, n), 1)
    probs = torch.nn.functional.one_hot(action, 3).to(F64)
    _, out = env.step(type(ctx)(x=x), Decision(probs, action), gen)
    assert abs(float(out["reward"].mean() - means[0, 0, 1])) < 5 * 0.5 / n**0.5
    assert float(out["reward"].std()) == pytest.approx(0.5, rel=0.03)


class _FixedQuadratic(FixedPolicy):
    """A fixed policy softmax(q^T A_m q) (does not learn)."""

    def __init__(self, a: torch.Tensor) -> None:
        super().__init__(a.shape[0], a.shape[1])
        self.register_buffer("a", a)

    def act(self, context, generator=None):
        scores = torch.einsum("rbd,rmde,rbe->rbm", context.x, self.a, context.x)
        probs = torch.softmax(scores, -1)
        return Decision(probs, probs.argmax(-1))


def _sup_by_cvxpy(queries, coef, policy_term, tau):
    """max over symmetric W_m with ||W_m||_* <= tau of policy_term + sum_t sum_m coef q^T W q."""
    t, d = queries.shape
    total = policy_term
    for m in range(coef.shape[1]):
        c = sum(coef[s, m] * np.outer(queries[s], queries[s]) for s in range(t))
        w = cp.Variable((d, d), symmetric=True)
        prob = cp.Problem(cp.Maximize(cp.trace(c @ w)), [cp.normNuc(w) <= tau])
        prob.solve(solver="SCS", eps=1e-9)
        total += prob.value
    return total


@pytest.mark.parametrize("generator", ["well_specified", "shared_subspace"])
def test_sup_regret_is_the_cvxpy_supremum_over_the_nuclear_ball(generator):
    kw = {} if generator == "well_specified" else {"item_dim": 4, "num_items": 6, "rank": 2}
    env = _env(generator=generator, **kw)
    gen = torch.Generator().manual_seed(5)
    d = env.queries.shape[-1]
    a = torch.randn(env.num_trials, env.num_arms, d, d, generator=gen, dtype=F64)
    a = 2 * (a + a.transpose(-1, -2))
    result = simulate(_FixedQuadratic(a), env, seed=1, progress=False, log_every=4)
    summary = result.summary
    tau = env.comparator_tau
    for r in range(env.num_trials):
        dim = int(env.dims[r])
        qs = env.queries[r, :, :dim].numpy()
        coef = np.zeros((env.horizon, env.num_arms))
        policy_term, lin = 0.0, 0.0
        w_star = (env.embed[r] @ env.comparator[r] @ env.embed[r].T).numpy()  # [M, D, D]
        for t in range(env.horizon):
            q = qs[t]
            means, _, _ = env.expected_rewards(env.queries[:, t : t + 1])
            rew = means[r, 0].numpy()
            logits = np.array([q @ a[r, m, :dim, :dim].numpy() @ q for m in range(env.num_arms)])
            pi = np.exp(logits - logits.max())
            pi /= pi.sum()
            c = pi * (rew - pi @ rew)
            coef[t] = c
            log_pi = np.log(pi)
            policy_term += float(-(c * log_pi).sum())
            star = np.array([q @ w_star[m, :dim, :dim] @ q for m in range(env.num_arms)])
            lin += float((c * (star - log_pi)).sum())
        want = _sup_by_cvxpy(qs, coef, policy_term, tau)
        assert float(summary["sup_regret"][r]) == pytest.approx(want, abs=1e-5)
        assert float(summary["linearized_regret"][r]) == pytest.approx(lin, abs=1e-10)
        assert float(summary["avg_sup_regret"][r]) == pytest.approx(want / env.horizon, abs=1e-6)
        assert want >= lin - 1e-6


def test_bad_generator_and_rank():
    with pytest.raises(ValueError, match="generator must be one of"):
        _env(generator="other")
    with pytest.raises(ValueError, match="latent_dim"):
        _env(rank=3)  # 2 s = 6 > L = 4
    with pytest.raises(ValueError, match="rounds must be an integer"):
        _env(rounds=0)
    assert _env(rounds=5).horizon == 5
