"""The low-rank experts simulator (docs/papers/hpg.md) and its learners end to end."""

from __future__ import annotations

import math
import shutil

import pandas as pd
import pytest
import torch

from torchroute.envs import LowRankExperts
from torchroute.envs.low_rank_experts import low_rank_experts_table
from torchroute.learners import (
    EXP3,
    HPG,
    EuclideanQuadPG,
    FlattenedNPG,
    LogLinearPG,
    ParameterFreeHPG,
)
from torchroute.loop import simulate
from torchroute.tracking import NullTracker
from torchroute.types import Decision

F64 = torch.float64
SMALL = {"num_experts": 3, "rank": 2, "latent_dim": 4, "item_dim": 4, "num_items": 6}


def _env(**kw):
    kw = {**SMALL, "horizon": 20, "dtype": F64, **kw}
    return LowRankExperts(seeds=kw.pop("seeds", [0, 1]), dims=kw.pop("dims", [6, 10]), **kw)


def _decision(probs):
    return Decision(probs, probs.argmax(-1))


def test_trials_padding_and_labels():
    env = _env()
    assert env.trials().to_dict("list") == {
        "dim": [6, 6, 10, 10],
        "seed": [0, 1, 0, 1],
        "s": [2] * 4,
        "L": [4] * 4,
        "M": [3] * 4,
    }
    x = torch.cat([env.context(t).x for t in range(env.horizon)], 1)  # [R, T, 10]
    torch.testing.assert_close(x.norm(dim=-1), torch.ones(4, 20, dtype=F64))
    assert (x[:2, :, 6:] == 0).all() and (x[2:, :, 6:] != 0).any()
    problem = env.problem()
    assert problem.dim == 10 and problem.labels["dim"].tolist() == [6.0, 6.0, 10.0, 10.0]
    # the latent world depends on the seed only
    torch.testing.assert_close(env.item_logits[0], env.item_logits[2])
    assert not torch.equal(env.item_logits[0], env.item_logits[1])


def test_expected_reward_is_the_mean_of_the_sampled_rewards():
    env = _env(noise=0.5, seeds=[3], dims=[6])
    ctx = env.context(0)
    means, _, _ = env.expected_rewards(ctx.x)
    n = 20000
    x = ctx.x.expand(1, n, 6)
    gen = torch.Generator().manual_seed(0)
    for arm in range(3):
        action = torch.full((1, n), arm)
        probs = torch.nn.functional.one_hot(action, 3).to(F64)
        fb, out = env.step(type(ctx)(x=x), Decision(probs, action), gen)
        sem = out["reward"].std() / n**0.5
        assert abs(out["reward"].mean() - means[0, 0, arm]) < 5 * sem
        torch.testing.assert_close(out["expected_reward"][0, 0], means[0, 0, arm])
        assert fb.only_played and fb.observed[0, :, arm].all()


def test_comparator_is_low_rank_with_the_given_nuclear_norm():
    # latent_dim 8 > 2 * rank: the rank bound can be broken (a 4 x 4 comparator cannot)
    env = _env(comparator_tau=3.0, latent_dim=8, item_dim=8, dims=[8, 10])
    assert env.comparator.shape[-1] == 8 > 2 * SMALL["rank"]
    nuc = torch.linalg.matrix_norm(env.comparator, ord="nuc")  # [R, M]
    torch.testing.assert_close(nuc.amax(-1), torch.full((4,), 3.0, dtype=F64))
    ranks = torch.linalg.matrix_rank(env.comparator, atol=1e-10)
    assert (ranks <= 2 * SMALL["rank"]).all()


def test_linearized_regret_matches_eq9_for_a_quadratic_policy():
    """With ``pi = softmax(q^T W q)`` the env's ``log pi`` form equals eq. 9 with ``W``."""
    env = _env()
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(4, 3, 10, 10, generator=gen, dtype=F64)
    w = w + w.transpose(-1, -2)
    ctx = env.context(5)
    scores = torch.einsum("rbd,rmde,rbe->rbm", ctx.x, w, ctx.x)
    probs = torch.softmax(scores, -1)
    _, out = env.step(ctx, _decision(probs), gen)
    means, _, _ = env.expected_rewards(ctx.x)
    latent = ctx.x @ env.embed
    w_star = env.embed[:, None] @ env.comparator @ env.embed[:, None].transpose(-1, -2)
    star = torch.einsum("rbd,rmde,rbe->rbm", ctx.x, w_star, ctx.x)
    torch.testing.assert_close(
        star, torch.einsum("rbl,rmlk,rbk->rbm", latent, env.comparator, latent)
    )
    rbar = (probs * means).sum(-1, keepdim=True)
    expected = (probs * (means - rbar) * (star - scores)).sum(-1)
    torch.testing.assert_close(out["linearized_regret"], expected)
    torch.testing.assert_close(out["regret"], means.amax(-1) - out["expected_reward"])
    played = means.gather(-1, probs.argmax(-1, keepdim=True))[..., 0]  # the decision's arm
    torch.testing.assert_close(out["expected_reward"], played)


def test_blocks_mode_and_bad_input():
    env = _env(mode="blocks", block_length=5, latent_noise=0.0, query_noise=0.0)
    x = torch.cat([env.context(t).x for t in range(10)], 1)
    torch.testing.assert_close(x[:, 0], x[:, 4])  # one cluster per block, no spread
    assert not torch.allclose(x[:, 4], x[:, 5])
    with pytest.raises(ValueError, match="mode must be"):
        _env(mode="zigzag")
    with pytest.raises(ValueError, match="dims must be"):
        _env(dims=[2])
    with pytest.raises(ValueError, match="kernel_scale must be a finite number > 0"):
        _env(kernel_scale=0.0)


def _brute_force_rewards(env, trial, q):
    """``R_m(q)`` by explicit loops over models and items: ``sum_a xi_m(a | q) a^T Psi* q``
    with ``xi_m(a | q) = exp(a^T Psi_m q) / sum_a' exp(a'^T Psi_m q)``."""
    d = q.shape[-1]
    latent = env.embed[trial, :d].T @ q  # [L]
    n_items = env.item_rewards.shape[1]
    out = []
    for m in range(env.num_arms):
        logits = [float(env.item_logits[trial, m, a] @ latent) for a in range(n_items)]
        weights = [math.exp(v - max(logits)) for v in logits]
        rewards = [float(env.item_rewards[trial, a] @ latent) for a in range(n_items)]
        out.append(sum(w * r for w, r in zip(weights, rewards, strict=True)) / sum(weights))
    return torch.tensor(out, dtype=F64)


def test_to_table_scores_are_the_exact_expected_rewards():
    env = _env()
    table = env.to_table(num_queries=30, trial=2)  # seed 0 at d = 10
    assert table.scores.shape == (30, 3) and table.embeddings.shape == (30, 10)
    assert (table.costs == 0).all() and len(set(table.split)) == 3
    q = table.embeddings.double()
    torch.testing.assert_close(q.norm(dim=-1), torch.ones(30, dtype=F64), atol=1e-6, rtol=0)
    for i in range(30):
        want = (_brute_force_rewards(env, 2, q[i]) + 1) / 2
        torch.testing.assert_close(table.scores[i], want, rtol=0, atol=1e-12)
    assert float(table.scores.std(0).min()) > 0.01  # the experts differ per query
    # the default table of a trial is its online stream (unpadded)
    stream = torch.cat([env.context(t).x for t in range(env.horizon)], 1)  # [R, T, 10]
    own = env.to_table(trial=1)  # seed 1 at d = 6
    torch.testing.assert_close(own.embeddings.double(), stream[1, :, :6], rtol=0, atol=1e-7)
    same = low_rank_experts_table(num_queries=20, seed=1, dim=6, **SMALL)
    torch.testing.assert_close(same.scores, own.scores, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match=r"trial must be in 0\.\.3"):
        env.to_table(trial=4)


def test_gap_preset_builds_a_simulator_table():
    from hydra.utils import instantiate

    from torchroute.cli import compose_config

    overrides = ["experiment=hpg_gap_simulator", "out_dir=x", "data.num_queries=40"]
    cfg = compose_config("simulate", overrides)
    assert cfg.encoder is None and cfg.features.bias and cfg.gap.held_out == "test"
    table = instantiate(cfg.data)
    assert table.scores.shape == (40, 8) and table.embeddings.shape == (40, 64)


def test_rank_curve_is_the_rank_trajectory():
    """With a nuclear radius that never binds and capacity d, every W_m after t updates has
    rank min(t, d) (queries in general position), so the loop's ``stat_rank`` at round T'
    is the mean of ``min(t + 1, d)`` over the interval's rounds ``t``; learners that report
    no rank get no such curve."""
    env = _env()
    learner = HPG(4, 3, 10, tau=1e6, beta=0.5, eta=0.5, capacity=10).to(F64)
    curve = simulate(learner, env, seed=3, progress=False, log_every=5).curve
    for dim in (6, 10):
        part = curve[curve["dim"] == dim]
        want = [sum(min(t + 1, dim) for t in range(int(r) - 5, int(r))) / 5 for r in part["round"]]
        assert part["stat_rank"].tolist() == pytest.approx(want, abs=1e-12)
    exp3 = simulate(EXP3(4, 3, eta=0.1).to(F64), _env(), seed=3, progress=False, log_every=5)
    assert "stat_rank" not in exp3.curve and "rank" not in exp3.summary


FACTORIES = {
    "HPG": lambda p: HPG.from_problem(p, rank=2, capacity=4),
    "ParameterFreeHPG": lambda p: ParameterFreeHPG.from_problem(p, capacity=4),
    "EXP3": EXP3.from_problem,
    "LogLinearPG": lambda p: LogLinearPG.from_problem(p, rank=2),
    "EuclideanQuadPG": lambda p: EuclideanQuadPG.from_problem(p, rank=2, capacity=4),
    "FlattenedNPG": lambda p: FlattenedNPG.from_problem(p, rank=2, capacity=4),
    "HPG-well-specified": lambda p: HPG.from_problem(p, rank=2, capacity=4),
}


class _CopyCheckpoint(NullTracker):
    def __init__(self, src, dst):
        self.src, self.dst = src, dst

    def log(self, metrics, step):
        if step == 15:
            shutil.copy(self.src, self.dst)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_learners_run_and_resume_bit_exact(name, tmp_path):
    make = FACTORIES[name]
    kw = {"generator": "well_specified"} if name.endswith("well-specified") else {}
    env = _env(**kw)
    full = simulate(make(env.problem()).to(F64), env, seed=4, progress=False, log_every=5)
    cols = set(full.summary.columns)
    assert {"dim", "seed", "linearized_regret", "avg_regret", "const_regret"} <= cols
    assert {"sup_regret", "avg_sup_regret", "avg_linearized_regret"} <= cols
    # the supremum over the nuclear ball is at least the fixed comparator's (inside the ball)
    assert (full.summary["sup_regret"] >= full.summary["linearized_regret"] - 1e-9).all()
    path, mid = tmp_path / "ck.pt", tmp_path / "mid.pt"
    env2 = _env(**kw)
    simulate(
        make(env2.problem()).to(F64), env2, seed=4, progress=False, log_every=5,
        ckpt_every=10, ckpt_path=path, tracker=_CopyCheckpoint(path, mid),
    )  # fmt: skip
    env3 = _env(**kw)
    resumed = simulate(
        make(env3.problem()).to(F64), env3, seed=4, progress=False, log_every=5,
        resume_from=mid,
    )  # fmt: skip
    pd.testing.assert_frame_equal(resumed.summary, full.summary)
    pd.testing.assert_frame_equal(resumed.curve, full.curve)
