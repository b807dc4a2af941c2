"""CABS-D / CABS-C options (standard expert, meta-learner, targets, graph rule) against
independent references: standalone learners, numpy loops, dense weighted least squares."""

from __future__ import annotations

import inspect
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from tests.learners.helpers import F64, LinearProblem, feedback_for
from torchroute.envs import SingleChoiceEnv
from torchroute.learners import CABSC, CABSD, LinTS, LinUCB, NeuralUCB
from torchroute.loop import simulate
from torchroute.models import MultiHeadOracle, RewardOracle
from torchroute.types import Context, Problem

R, K, D = 3, 5, 6


def _oracle(k: int = K, embed_dim: int = D) -> MultiHeadOracle:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return MultiHeadOracle(embed_dim, k, feature_dim=4, hidden=8).eval()


def _rho() -> torch.Tensor:
    return torch.tensor([0.0, 100.0, 500.0])


def _cabs_d(horizon: int = 40, k: int = K, **kw) -> CABSD:
    kw.setdefault("oracle_input", "x")
    return CABSD(R, k, D, _rho(), _oracle(k), horizon, lam=1.0, **kw).double()


def _surrogates(learner: CABSD | CABSC, x, action, y):
    """Oracle surrogates of every arm through the independent ``RewardOracle`` module."""
    cabs_c = learner.cabs_c if isinstance(learner, CABSD) else learner
    with torch.no_grad():
        s, _ = RewardOracle(cabs_c.oracle.double(), prune=False)(x, action, y, _rho().double())
    return s


@pytest.mark.parametrize(
    ("standard", "cls", "args"),
    [("linucb", LinUCB, {"alpha": 0.7}), ("lints", LinTS, {"v": 0.5})],
)
def test_standard_expert_with_all_weight_is_the_standalone_learner(standard, cls, args):
    learner = _cabs_d(standard=standard, standard_args=args)
    learner.log_weights[:, 1] = -math.inf  # the meta puts all weight on the standard expert
    alone = cls(R, K, D, lam=1.0, **args).double()
    problem, gen = LinearProblem(R, K, D, seed=2), torch.Generator().manual_seed(0)
    for _ in range(20):
        context = problem.context()
        twin = torch.Generator().manual_seed(0)
        twin.set_state(gen.get_state())  # the expert draws first from CABS-D's generator
        reference = alone.act(context, twin)
        decision = learner.act(context, gen)
        assert torch.equal(decision.action, reference.action)
        torch.testing.assert_close(learner._pending[2], reference.probs, rtol=0, atol=0)
        reward = problem.reward(context)
        learner.update(context, decision, feedback_for(learner, decision, reward), gen)
        alone.update(context, reference, feedback_for(alone, reference, reward))
        assert torch.equal(learner.mixture()[:, 1].sum(-1), torch.zeros(R, dtype=F64))
    torch.testing.assert_close(learner.expert.theta, alone.theta, rtol=0, atol=1e-12)


def _numpy_single_ix(rounds):
    """EXP3-IX over the two experts, one trial: ``rounds`` of (p1, p2, A, i, r, s)."""
    log_w, delta, out = np.zeros(2), 0.0, []
    for p1, p2, graph, i, r, s in rounds:
        mu = np.exp(log_w - log_w.max())
        mu /= mu.sum()
        eta = math.sqrt(math.log(2) / (1 + delta))
        gam = eta / 2
        q = mu[0] * p1 + mu[1] * p2
        l1 = (1 - r) * p1[i] / (q[i] + gam)
        l2 = 0.0
        for j in range(len(q)):
            if graph[i, j]:
                seen = sum(q[k] for k in range(len(q)) if graph[k, j])
                loss = 1 - r if j == i else 1 - s[j]
                l2 += loss * p2[j] / (seen + gam)
        est = np.array([l1, l2])
        delta += float((mu * est * est).sum())
        log_w = log_w - eta * est
        log_w -= np.log(np.exp(log_w).sum())
        out.append((q, log_w.copy(), delta, eta))
    return out


def test_single_ix_meta_is_a_numpy_exponential_weights_loop():
    learner = _cabs_d(meta="single_ix", graph="paper")
    assert learner.log_weights.shape == (R, 2, 1) and not hasattr(learner, "grid")
    problem, gen = LinearProblem(R, K, D, seed=3), torch.Generator().manual_seed(1)
    rounds, states = [], []
    for _ in range(12):
        context = problem.context()
        eta = learner.learning_rate().clone()
        decision = learner.act(context, gen)
        _, graph, p1, p2, q = learner._pending
        reward = problem.reward(context).clamp(0, 1)
        y = reward.gather(2, decision.action[..., None])[..., 0]
        s = _surrogates(learner, context.x, decision.action, y)
        rounds.append((p1, p2, graph, decision.action, y, s))
        states.append((q.clone(), eta))
        learner.update(context, decision, feedback_for(learner, decision, reward), gen)
        states[-1] += (learner.log_weights[..., 0].clone(), learner.delta.clone())
    for trial in range(R):
        data = [
            (p1[trial, 0].numpy(), p2[trial, 0].numpy(), g[trial, 0].numpy(),
             int(a[trial, 0]), float(y[trial, 0]), s[trial, 0].numpy())
            for p1, p2, g, a, y, s in rounds
        ]  # fmt: skip
        for (q, eta, log_w, delta), (q_ref, log_w_ref, d_ref, eta_ref) in zip(
            states, _numpy_single_ix(data), strict=True
        ):
            np.testing.assert_allclose(q[trial, 0].numpy(), q_ref, rtol=0, atol=1e-10)
            assert float(eta[trial]) == pytest.approx(eta_ref, abs=1e-10)
            np.testing.assert_allclose(log_w[trial].numpy(), log_w_ref, rtol=0, atol=1e-10)
            assert float(delta[trial]) == pytest.approx(d_ref, abs=1e-10)
    assert (learner.delta > 0).all()


def test_meta_loss_sums_over_the_whole_neighbourhood_by_hand():
    """Paper meta, one round from uniform weights; IQR drops neighbours the meta loss keeps."""
    k = 9
    learner = _cabs_d(horizon=8, k=k, graph="complete", iqr="keep_large")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(R, 1, D, generator=gen, dtype=F64)
    context = Context(x=x)
    decision = learner.act(context, gen)
    _, graph, p1, p2, q = learner._pending
    reward = torch.rand(R, 1, k, generator=gen, dtype=F64)
    y = reward.gather(2, decision.action[..., None])[..., 0]
    s = _surrogates(learner, x, decision.action, y)
    _, kept = learner.cabs_c.surrogates(context, graph, decision.action, y)
    assert int(kept.sum()) < R * (k - 1)  # the IQR rule drops neighbours
    learner.update(context, decision, feedback_for(learner, decision, reward), gen)
    grid = [2.0**g / 8 for g in range(4)]  # T = 8: L = 4
    eta = min(grid[0], math.sqrt(math.log(8)))  # Delta_0 = 0, M = 2 L = 8
    for t in range(R):
        i, r = int(decision.action[t, 0]), float(y[t, 0])
        pq, pp1, pp2 = q[t, 0].tolist(), p1[t, 0].tolist(), p2[t, 0].tolist()
        est = [[0.0] * 4, [0.0] * 4]
        for g, gam in enumerate(grid):
            est[0][g] = (1 - r) * pp1[i] / (pq[i] + gam)
            # complete graph: N(i) = every arm, sum_{k: A[k, j]} q_k = 1
            est[1][g] = sum(
                (1 - r if j == i else 1 - float(s[t, 0, j])) * pp2[j] / (1.0 + gam)
                for j in range(k)
            )
        log_w = -eta * torch.tensor(est, dtype=F64)
        log_w -= torch.logsumexp(log_w.reshape(-1), 0)
        torch.testing.assert_close(learner.log_weights[t], log_w, rtol=0, atol=1e-12)


def test_ips_weights_ridge_is_a_dense_weighted_least_squares_solve():
    lam, rounds = 1.0, 15
    learner = CABSC(
        R, K, D, _rho(), _oracle(), lam=lam, targets="ips_weights", iqr="off",
        graph="paper", oracle_input="x",
    ).double()  # fmt: skip
    problem, gen = LinearProblem(R, K, D, seed=4), torch.Generator().manual_seed(2)
    rows = [[[] for _ in range(K)] for _ in range(R)]  # (x, y, w) per trial and arm
    bias, counts = np.zeros((R, K)), np.zeros((R, K))

    def theta_ref(t, arm):
        a, b = lam * np.eye(D), np.zeros(D)
        for xv, yv, wv in rows[t][arm]:
            a += wv * np.outer(xv, xv)
            b += wv * yv * xv
        return np.linalg.solve(a, b)

    for _ in range(rounds):
        context = problem.context()
        decision = learner.act(context, gen)
        _, graph, p = learner._pending
        reward = problem.reward(context).clamp(0, 1)
        y = reward.gather(2, decision.action[..., None])[..., 0]
        s = _surrogates(learner, context.x, decision.action, y).numpy()
        for t in range(R):
            xv, i = context.x[t, 0].numpy(), int(decision.action[t, 0])
            a, pv = graph[t, 0].numpy(), p[t, 0].numpy()
            r_hat = np.array([xv @ theta_ref(t, j) for j in range(K)])
            new = [(i, float(y[t, 0]), 1.0 / pv[i])]
            for j in range(K):
                if j != i and a[i, j]:
                    seen = sum(pv[m] for m in range(K) if a[m, j])
                    new.append((j, s[t, 0, j] - bias[t, j], 1.0 / seen))
                    bias[t, j] = (bias[t, j] * counts[t, j] + s[t, 0, j] - r_hat[j]) / (
                        counts[t, j] + 1
                    )
                    counts[t, j] += 1
            for j, target, w in new:
                rows[t][j].append((xv, target, w))
        learner.update(context, decision, feedback_for(learner, decision, reward), gen)
    expected = np.array([[theta_ref(t, j) for j in range(K)] for t in range(R)])
    np.testing.assert_allclose(learner.rs.theta.numpy(), expected, rtol=0, atol=1e-8)
    np.testing.assert_allclose(learner.bias.numpy(), bias, rtol=0, atol=1e-8)
    assert any(w != 1.0 for t in range(R) for j in range(K) for *_, w in rows[t][j])


def test_neural_weighted_loss_and_replay():
    learner = NeuralUCB(2, 3, 4, hidden=5, nu=0.0, sample_weights=True, steps=0).double()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 2, 4, generator=gen, dtype=F64)
    target = torch.rand(2, 2, 3, generator=gen, dtype=F64)
    weight = torch.tensor([[[2.0, 0.0, 1.0], [0.0, 4.0, 0.0]]] * 2, dtype=F64)
    learner.fit_weighted(Context(x=x), torch.zeros(2, 2, dtype=torch.long), target, weight)
    torch.testing.assert_close(learner.replay_w[:, :2], weight)
    with torch.no_grad():
        f = torch.einsum("rbh,rhk->rbk", torch.relu(x @ learner.w0 + learner.b0[:, None]),
                         learner.w_out) + learner.b_out[:, None]  # fmt: skip
        loss = learner.loss(x, target, weight > 0, weight)
    expected = (weight * (f - target) ** 2).sum((1, 2)) / 3  # 3 observed cells per trial
    torch.testing.assert_close(loss, expected)
    with pytest.raises(ValueError, match="sample_weights=True"):
        NeuralUCB(2, 3, 4, hidden=5).fit_weighted(Context(x=x.float()), None, target, weight)


def test_oracle_is_an_alias_of_the_paper_graph_rule():
    context = Context(x=torch.randn(R, 2, D, dtype=F64))
    graphs = []
    for name in ("oracle", "paper", "affinity"):
        learner = CABSC(R, K, D, _rho(), _oracle(), graph=name, oracle_input="x").double()
        graphs.append(learner.draw_graph(context, torch.Generator().manual_seed(0)))
        assert learner.graph == ("paper" if name == "oracle" else name)
    assert torch.equal(graphs[0], graphs[1]) and not torch.equal(graphs[1], graphs[2])


def test_old_checkpoint_keys_of_the_squarecb_expert_load():
    learner = _cabs_d()
    learner.expert.theta.normal_()
    state = {
        (k.replace("expert.", "squarecb.", 1) if k.startswith("expert.") else k): v
        for k, v in learner.state_dict().items()
    }
    fresh = _cabs_d()
    fresh.load_state_dict(state)
    assert torch.equal(fresh.expert.theta, learner.expert.theta)


def test_bad_values_are_one_line_errors():
    cases = [
        ({"standard": "foo"}, "standard must be one of"),
        ({"meta": "x"}, "meta must be one of"),
        ({"targets": "y"}, "targets must be one of"),
        ({"graph": "z"}, "graph must be one of"),
        ({"standard": "lints", "solver": "neural"}, "takes standard 'squarecb' or 'linucb'"),
        ({"standard": "linucb", "standard_args": {"v": 1.0}}, r"take \['alpha', 'kernel'\]"),
    ]
    for kw, match in cases:
        with pytest.raises(ValueError, match=match) as err:
            _cabs_d(**kw)
        assert "\n" not in str(err.value)


CONFIGS = Path(__file__).parents[2] / "configs" / "learner"


@pytest.mark.parametrize("name", ["cabs_c", "cabs_c_neural", "cabs_d", "cabs_d_neural"])
def test_configs_carry_the_literal_defaults(name):
    cfg = OmegaConf.load(CONFIGS / f"{name}.yaml")
    cls = CABSD if name.startswith("cabs_d") else CABSC
    keys = ("standard", "meta", "targets", "graph") if cls is CABSD else ("targets", "graph")
    defaults = {**inspect.signature(CABSC).parameters, **inspect.signature(cls).parameters}
    for key in keys:
        assert cfg[key] == defaults[key].default, key


@pytest.mark.parametrize(
    "hp",
    [
        {"standard": "lints", "standard_args": {"v": 0.5}, "meta": "single_ix"},
        {"solver": "neural", "standard": "linucb", "targets": "ips_weights", "graph": "affinity",
         "neural": {"hidden": 8, "capacity": 16, "batch_size": 4}, "meta": "single_ix"},
    ],
)  # fmt: skip
def test_options_run_through_simulate_and_the_single_ix_weights_move(tiny_table, hp):
    env = SingleChoiceEnv(tiny_table, rho=[0.0, 300.0], seeds=[0, 1], dtype=torch.float64)
    oracle = MultiHeadOracle(D, len(tiny_table.arm_names), feature_dim=4, hidden=8,
                             arm_names=tiny_table.arm_names).eval()  # fmt: skip
    learner = CABSD.from_problem(env.problem(), oracle=oracle, **hp).double()
    result = simulate(learner, env, seed=0, log_every=5, progress=False)
    torch.testing.assert_close(learner.mixture().sum((1, 2)), torch.ones(2, dtype=F64))
    assert not torch.allclose(learner.mixture()[:, 1, 0], torch.full((2,), 0.5, dtype=F64))
    assert result.summary["cabs_c_weight"].between(0, 1).all()


def test_the_linucb_preset_builds_its_expert():
    cfg = OmegaConf.load(CONFIGS / "cabs_d_linucb.yaml")
    del cfg["oracle"], cfg["warm_start"]  # keys of the run's build path, not of the factory
    factory = instantiate(cfg)
    names = [f"m{k}" for k in range(K)]
    problem = Problem(num_trials=R, num_arms=K, dim=D, rho=_rho(), arm_names=names, horizon=30)
    learner = factory(problem, oracle=_oracle())
    assert (learner.standard, learner.meta) == ("linucb", "single_ix")
    assert isinstance(learner.expert, LinUCB)
    assert (learner.expert.alpha, learner.expert.lam) == (1.0, 10.0)


def table_that_must_not_load():
    """A data node that fails the test if a run reads it."""
    raise AssertionError("the table was read before the learner options were checked")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"standard": "linucb", "solver": "neural", "standard_args": {"alpha": 1.0}},
            r"standard_args of standard='linucb' \(solver='neural'\) take \['nu'\], "
            r"got \['alpha'\]",
        ),
        ({"meta": "papr"}, r"meta must be one of \('paper', 'single_ix'\), got 'papr'"),
        ({"standard": "lints", "solver": "neural"}, r"no neural Thompson sampler"),
    ],
)
def test_bad_expert_options_fail_before_the_run_reads_or_writes_anything(
    tmp_path, options, message
):
    """Checked by CABSD.check_options before the table is read and an oracle pre-trained."""
    from tests.conftest import tiny_run_config
    from torchroute.run import ConfigError, run_config

    node = {"_target_": "torchroute.learners.CABSD.from_problem", "_partial_": True, **options}
    cfg = tiny_run_config(tmp_path / "out", {"cabs_d": node})
    cfg.data = OmegaConf.create(
        {"_target_": "tests.learners.test_cabs_options.table_that_must_not_load"}
    )
    with pytest.raises(ConfigError, match=rf"^learners\.cabs_d: CABSD: .*{message}"):
        run_config(cfg)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("target", ["CABSC", "CABSD"])
def test_bad_cabs_c_options_fail_before_the_run_reads_or_writes_anything(tmp_path, target):
    """CABS-C's named options (also passed through by CABS-D) are checked before the table
    is read."""
    from tests.conftest import tiny_run_config
    from torchroute.run import ConfigError, run_config

    node = {"_target_": f"torchroute.learners.{target}.from_problem", "_partial_": True}
    cfg = tiny_run_config(tmp_path / "out", {"cabs": {**node, "iqr": "of"}})
    cfg.data = OmegaConf.create(
        {"_target_": "tests.learners.test_cabs_options.table_that_must_not_load"}
    )
    with pytest.raises(ConfigError, match=r"^learners\.cabs: CABSC: iqr must be one of .*'of'"):
        run_config(cfg)
    assert not (tmp_path / "out").exists()
