"""CABS-C / CABS-D (docs/papers/cabs.md) against independent references."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from tests.learners.helpers import F64, LinearProblem, feedback_for
from tests.test_loop import _InterruptAt
from torchroute.checkpoint import load_checkpoint
from torchroute.envs import SingleChoiceEnv
from torchroute.functional.graph_program import graph_squarecb_value
from torchroute.learners import CABSC, CABSD, RidgeLearner
from torchroute.loop import simulate
from torchroute.models import MultiHeadOracle, RewardOracle
from torchroute.types import Context, Feedback

R, K, D = 3, 4, 6


def _oracle(arm_names=None, embed_dim=D, k=K):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return MultiHeadOracle(embed_dim, k, feature_dim=4, hidden=8, arm_names=arm_names).eval()


def _env(table, **kw):
    kw.setdefault("rho", [0.0, 300.0, 900.0, 0.0])
    kw.setdefault("seeds", [0, 0, 1, 2])
    return SingleChoiceEnv(table, dtype=torch.float64, **kw)


def test_identity_graph_is_the_bandit_ridge_solver():
    """No surrogates; with plain targets the ridge state equals a bandit ridge learner's."""
    rho = torch.zeros(R)
    learner = CABSC(R, K, D, rho, _oracle(), lam=1.0, graph="identity", targets="plain").double()
    bandit = RidgeLearner(R, K, D, lam=1.0).double()
    problem, gen = LinearProblem(R, K, D, seed=0), torch.Generator().manual_seed(0)
    for _ in range(30):
        context = problem.context()
        decision = learner.act(context, gen)
        reward = problem.reward(context)
        metrics = learner.update(context, decision, feedback_for(learner, decision, reward), gen)
        assert torch.equal(metrics["surrogates"], torch.zeros(R, dtype=F64))
        bandit.update(context, decision, feedback_for(bandit, decision, reward))
    torch.testing.assert_close(learner.rs.theta, bandit.theta, rtol=0, atol=1e-12)
    torch.testing.assert_close(learner.rs.a_inv, bandit.a_inv, rtol=0, atol=1e-12)
    assert torch.equal(learner.counts, torch.zeros(R, K, dtype=torch.long))


def test_act_solves_the_program_on_the_ridge_predictions():
    learner = CABSC(R, K, D, torch.zeros(R), _oracle(), graph="complete", eps_floor=0.0)
    learner.rs.theta.copy_(torch.randn(R, K, D, generator=torch.Generator().manual_seed(1)))
    context = LinearProblem(R, K, D, seed=1).context()
    decision = learner.act(context.to(torch.float32), torch.Generator().manual_seed(0))
    losses = 1 - torch.einsum("rkd,rbd->rbk", learner.rs.theta.double(), context.x)
    graph = torch.ones(R, 1, K, K, dtype=torch.bool)
    v = graph_squarecb_value(decision.probs, losses, graph, 4.0)
    # no vertex or uniform distribution does better (a convex program's optimum)
    for cand in [torch.full((R, 1, K), 1.0 / K), torch.eye(K)[None, None, 0].expand(R, 1, K)]:
        assert (v <= graph_squarecb_value(cand, losses, graph, 4.0) + 1e-5).all()


def test_surrogate_targets_by_hand():
    """Complete graph, IQR off: IPS targets r/p_i and (s_j - b_j)/(A[:, j]^T p) = s_j - b_j."""
    rho = torch.tensor([0.0, 100.0, 500.0])
    oracle = _oracle()
    learner = CABSC(R, K, D, rho, oracle, lam=1.0, graph="complete", iqr="off").double()
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(R, 1, D, generator=gen, dtype=F64)
    emb = torch.randn(R, 1, D, generator=gen, dtype=F64)
    context = Context(x=x, embedding=emb)
    decision = learner.act(context, gen)
    score = torch.rand(R, 1, K, generator=gen, dtype=F64)
    reward = score.clone()
    played = torch.nn.functional.one_hot(decision.action, K).bool()
    fb = Feedback(reward=reward * played, observed=played, score=score * played)
    metrics = learner.update(context, decision, fb, gen)
    assert torch.equal(metrics["surrogates"], torch.full((R,), K - 1.0, dtype=F64))
    # independent path: the RewardOracle module of torchroute.models
    y = score.gather(2, decision.action[..., None])[..., 0]
    s, _ = RewardOracle(oracle.double(), prune=False)(emb, decision.action, y, rho.double())
    p_i = decision.probs.gather(2, decision.action[..., None])[..., 0]
    target = torch.where(played, (reward.gather(2, decision.action[..., None]) / p_i[..., None]), s)
    # ridge with lam = 1 on one observation per arm: theta = x y / (1 + |x|^2)
    expected = x[:, 0, None, :] * target[:, 0, :, None] / (1 + (x * x).sum(-1))[:, :, None]
    torch.testing.assert_close(learner.rs.theta, expected, rtol=1e-10, atol=1e-12)
    # bias = s - r^ (r^ = 0 before the first update) on the surrogate arms
    torch.testing.assert_close(learner.bias, torch.where(played[:, 0], 0.0, s[:, 0]))


@pytest.mark.parametrize("iqr", ["keep_large", "drop_large", "off"])
def test_iqr_rules_partition_the_neighbours(iqr):
    learner = CABSC(R, K + 4, D, torch.zeros(R), _oracle(k=K + 4), graph="complete", iqr=iqr)
    gen = torch.Generator().manual_seed(0)
    context = Context(x=torch.randn(R, 2, D, generator=gen), embedding=torch.randn(R, 2, D))
    action = torch.zeros(R, 2, dtype=torch.long)
    graph = learner.draw_graph(context, gen)
    _, mask = learner.surrogates(context, graph, action, torch.full((R, 2), 0.5))
    others = torch.arange(K + 4) != 0
    if iqr == "off":
        assert torch.equal(mask, others.expand_as(mask))
    assert not mask[..., 0].any()
    counts = {}
    for rule in ("keep_large", "drop_large"):
        learner.iqr = rule
        counts[rule] = learner.surrogates(context, graph, action, torch.full((R, 2), 0.5))[1]
    assert torch.equal(counts["keep_large"] ^ counts["drop_large"], others.expand_as(mask))


def test_cabs_d_weights_sum_to_one_and_mix_the_experts(tiny_table):
    env = _env(tiny_table)
    learner = CABSD.from_problem(env.problem(), oracle=_oracle(tiny_table.arm_names)).double()
    assert learner.grid.shape[1] == 6  # T = 20: L = ceil(log2 20) + 1
    torch.testing.assert_close(learner.grid[0, 0].double(), torch.tensor(1 / 20, dtype=F64))
    result = simulate(learner, env, seed=0, log_every=5, progress=False)
    mix = learner.mixture()
    torch.testing.assert_close(mix.sum((1, 2)), torch.ones(4, dtype=F64), rtol=0, atol=1e-12)
    assert not torch.equal(learner.log_weights, torch.zeros_like(learner.log_weights))
    assert {"surrogates", "played_prob", "cabs_c_weight"} <= set(result.summary.columns)
    assert ((result.summary["played_prob"] > 0) & (result.summary["played_prob"] <= 1)).all()


@pytest.mark.parametrize("solver", ["ridge", "neural"])
def test_cabs_d_kill_and_resume_bit_for_bit(tiny_table, tmp_path, solver):
    env = _env(tiny_table)
    neural = {"hidden": 8, "capacity": 16, "batch_size": 4} if solver == "neural" else None

    def make():
        with torch.random.fork_rng():
            torch.manual_seed(0)
            oracle = _oracle(tiny_table.arm_names)
            return CABSD.from_problem(
                env.problem(), oracle=oracle, solver=solver, neural=neural
            ).double()

    full = simulate(make(), env, seed=5, log_every=1, progress=False)
    ckpt = tmp_path / "run.pt"
    with pytest.raises(KeyboardInterrupt):
        simulate(
            make(), env, seed=5, log_every=1, ckpt_every=4, ckpt_path=ckpt,
            tracker=_InterruptAt(11), progress=False,
        )  # fmt: skip
    assert load_checkpoint(ckpt)["round"] == 8
    resumed = simulate(make(), env, seed=5, log_every=1, ckpt_path=ckpt, resume_from=ckpt,
                       progress=False)  # fmt: skip
    pd.testing.assert_frame_equal(resumed.summary, full.summary, check_exact=True)
    pd.testing.assert_frame_equal(resumed.curve, full.curve, check_exact=True)


def test_bad_input(tiny_table):
    problem = _env(tiny_table).problem()
    renamed = ["other0", *tiny_table.arm_names[1:]]
    for cls in (CABSC, CABSD):
        with pytest.raises(ValueError, match="needs an oracle"):
            cls.from_problem(problem)
        with pytest.raises(ValueError, match=r"'other0'.*not in the oracle"):
            cls.from_problem(problem, oracle=_oracle(renamed))
        with pytest.raises(ValueError, match=r"reads 8-d embeddings.*6-d"):
            cls.from_problem(problem, oracle=_oracle(tiny_table.arm_names, 8))
        with pytest.raises(ValueError, match="gamma"):
            cls.from_problem(problem, oracle=_oracle(tiny_table.arm_names), gamma=0.0)
        with pytest.raises(ValueError, match="targets must be one of"):
            cls.from_problem(problem, oracle=_oracle(tiny_table.arm_names), targets="x")
    learner = CABSC.from_problem(problem, oracle=_oracle(tiny_table.arm_names))
    with pytest.raises(ValueError, match=r"Context\.embedding"):
        learner.act(Context(x=torch.zeros(4, 1, 6)))
    with pytest.raises(ValueError, match="graph must be"):
        from torchroute.functional import graph_squarecb_probs

        graph_squarecb_probs(torch.zeros(2, 4), torch.eye(3, dtype=torch.bool), 1.0)
