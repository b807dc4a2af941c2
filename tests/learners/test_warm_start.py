"""Warm starts: the closed-form ridge step against row-by-row updates and a numpy ridge,
the validation choice of the weight, decision logs with clipped importance weights, and
the run's build path."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import torch

from tests.conftest import make_table
from torchroute.envs.single_choice import SingleChoiceEnv
from torchroute.errors import ConfigError
from torchroute.learners import EXP3, Learner, LinUCB, NeuralUCB
from torchroute.learners.warm_options import WarmStart
from torchroute.learners.warm_start import ridge_absorb
from torchroute.run.build import build_learner
from torchroute.run.warm import apply_warm_start
from torchroute.types import Context, Decision, Feedback

F64 = torch.float64
RHO = [0.0, 300.0]


def _env(**kw) -> SingleChoiceEnv:
    return SingleChoiceEnv(make_table(n=90, k=3, d=4), rho=RHO, seeds=[0, 1], dtype=F64, **kw)


def _numpy_ridge(x, y, w, lam):
    """``(lam I + X^T W X)^{-1} X^T W y`` for one arm."""
    a = lam * np.eye(x.shape[1]) + (x * w[:, None]).T @ x
    return np.linalg.solve(a, (x * w[:, None]).T @ y), np.linalg.inv(a)


def test_ridge_absorb_equals_row_by_row_updates():
    g = torch.Generator().manual_seed(0)
    r, k, d, n = 2, 3, 4, 25
    x = torch.randn(n, d, generator=g, dtype=F64)
    y = torch.rand(r, n, k, generator=g, dtype=F64)
    w = (torch.rand(n, k, generator=g, dtype=F64) > 0.3).to(F64)
    seq = LinUCB(r, k, d, lam=2.0).double()
    for i in range(n):  # one context per round, the observed arms of row i
        ctx = Context(x[i][None, None].expand(r, 1, d).clone())
        obs = (w[i] > 0)[None, None].expand(r, 1, k)
        fb = Feedback(reward=torch.where(obs, y[:, i : i + 1], 0.0), observed=obs)
        seq.update(ctx, seq.act(ctx), fb)
    batched = LinUCB(r, k, d, lam=2.0).double()
    a_inv, theta = ridge_absorb(batched.a_inv, batched.theta, x, y, w, torch.ones(r, k, dtype=F64))
    torch.testing.assert_close(a_inv, seq.a_inv, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(theta, seq.theta, rtol=1e-9, atol=1e-11)


def test_train_warm_start_is_a_ridge_on_each_trials_utility():
    env = _env()
    problem = env.problem()
    learner = LinUCB.from_problem(problem, lam=1.5).double()
    apply_warm_start(learner, problem, WarmStart("train", weights=(2.0,)), "t")
    table = env.table
    rows = table.rows("train")
    x = problem.train.features.numpy()
    for t, rho in enumerate(RHO):
        u = np.clip(
            table.scores[rows].double().numpy() - rho * table.costs[rows].double().numpy(), 0, 1
        )
        for arm in range(3):
            theta, a_inv = _numpy_ridge(x, u[:, arm], np.full(len(rows), 2.0), 1.5)
            np.testing.assert_allclose(learner.theta[t, arm].numpy(), theta, rtol=1e-8, atol=1e-10)
            np.testing.assert_allclose(learner.a_inv[t, arm].numpy(), a_inv, rtol=1e-8, atol=1e-10)
    assert learner.rounds.tolist() == [0, 0]  # round 1 is still the first round


def test_a_hidden_model_takes_no_warm_rows():
    """A scenario's new model did not exist offline: its rows are left out, per trial."""
    problem = _env().problem()
    hidden = torch.tensor([[False, True, False], [False, False, False]])
    problem = dataclasses.replace(problem, hidden_arms=hidden)
    learner = LinUCB.from_problem(problem, lam=2.0, new_arm_bonus=0.5).double()
    apply_warm_start(learner, problem, WarmStart("train"), "t")
    assert torch.count_nonzero(learner.theta[0, 1]) == 0  # hidden in trial 0: prior kept
    torch.testing.assert_close(learner.a_inv[0, 1], torch.eye(problem.dim, dtype=F64) / 2.0)
    assert torch.count_nonzero(learner.theta[1, 1]) > 0  # trial 1 knows it
    n = problem.train.features.shape[0]
    assert learner.seen.tolist() == [[n, 0, n], [n, n, n]]  # the new-arm bonus still applies


@pytest.mark.parametrize("candidates", [(0.01, 1.0, 100.0), (1000.0, 0.001)])
def test_several_weights_are_chosen_per_trial_on_validation(candidates):
    env = _env()
    problem = env.problem()
    val = problem.validation
    assert val is not None and val.features.shape[0] == 15  # the table's 'val' rows
    chosen = LinUCB.from_problem(problem).double()
    apply_warm_start(chosen, problem, WarmStart("train", weights=candidates), "t")
    # reference: each weight alone, scored by hand on the validation rows
    vs, vc = val.scores.numpy(), val.costs.numpy()
    picked = []
    for t, rho in enumerate(RHO):
        u = np.clip(vs - rho * vc, 0, 1)
        best_value, best_theta, best_index = -1.0, None, None
        for i, w in enumerate(candidates):
            single = LinUCB.from_problem(problem).double()
            apply_warm_start(single, problem, WarmStart("train", weights=(w,)), "t")
            pred = val.features.numpy() @ single.theta[t].numpy().T  # [m, K]
            value = u[np.arange(len(u)), pred.argmax(1)].mean()
            if value > best_value:  # the first of equal values is kept
                best_value, best_theta, best_index = value, single.theta[t], i
        torch.testing.assert_close(chosen.theta[t], best_theta)
        picked.append(best_index)
    if candidates == (1000.0, 0.001):  # here validation picks the second weight
        assert picked == [1, 1], picked


def test_decision_log_rows_are_importance_weighted_and_clipped(tmp_path):
    env = _env()
    problem = env.problem()
    g = np.random.default_rng(0)
    n = 40
    feats = g.normal(size=(n, problem.dim))
    arm = g.integers(0, 3, size=n)
    prop = g.choice([0.05, 0.2, 0.5, 1.0], size=n)
    score = g.uniform(size=n)
    cost = g.uniform(size=n) * 1e-3
    score[3] = cost[3] = np.nan  # no feedback: dropped
    frame = pd.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "features": [json.dumps(list(f)) for f in feats],
            "arm": [problem.arm_names[a] for a in arm],
            "propensity": prop,
            "score": score,
            "cost": cost,
        }
    )
    path = tmp_path / "log.csv"
    frame.to_csv(path, index=False)
    before = path.read_bytes()
    learner = LinUCB.from_problem(problem, lam=1.0).double()
    apply_warm_start(learner, problem, WarmStart(str(path), clip=4.0), "t")
    assert path.read_bytes() == before
    keep = ~np.isnan(score)
    w = np.minimum(1 / prop, 4.0)
    for t, rho in enumerate(RHO):
        u = np.clip(score - rho * cost, 0, 1)
        for a in range(3):
            m = keep & (arm == a)
            theta, _ = _numpy_ridge(feats[m], u[m], w[m], 1.0)
            np.testing.assert_allclose(learner.theta[t, a].numpy(), theta, rtol=1e-8, atol=1e-10)


def test_neural_warm_start_fits_the_rows():
    env = _env()
    problem = env.problem()
    torch.manual_seed(0)
    cold = NeuralUCB.from_problem(problem, hidden=8, batch_size=16, lr=1e-2).double()
    warm = NeuralUCB.from_problem(problem, hidden=8, batch_size=16, lr=1e-2).double()
    warm.load_state_dict(cold.state_dict())
    apply_warm_start(warm, problem, WarmStart("train", epochs=(1, 20)), "t")
    train = problem.train
    u = torch.clamp(
        train.scores[None] - torch.tensor(RHO, dtype=F64)[:, None, None] * train.costs[None], 0, 1
    )
    x = train.features[None].expand(2, -1, -1)
    obs = torch.ones_like(u, dtype=torch.bool)
    assert (warm.loss(x, u, obs) < 0.5 * cold.loss(x, u, obs)).all()
    assert int(warm.replay_count[0]) == train.features.shape[0]
    assert warm.rounds.tolist() == [0, 0]


class _Counting(Learner):
    """Counts each arm's observed rewards and sums them (the default warm start replays
    the rows through this ``update``)."""

    def __init__(self, num_trials: int, num_arms: int) -> None:
        super().__init__(num_trials, num_arms)
        self.register_buffer("count", torch.zeros(num_trials, num_arms, dtype=F64))
        self.register_buffer("total", torch.zeros(num_trials, num_arms, dtype=F64))

    def act(self, context, generator=None):
        action = torch.zeros(context.x.shape[:2], dtype=torch.long)
        return Decision(torch.nn.functional.one_hot(action, self.num_arms).to(F64), action)

    def update(self, context, decision, feedback, generator=None):
        self.count += feedback.observed.sum(1)
        self.total += torch.where(feedback.observed, feedback.reward, 0.0).sum(1)
        self._tick(context)
        return {}


def test_the_default_warm_start_replays_known_arms_only():
    """A scenario's new model (hidden in trial 0) observes none of the replayed rows; every
    other arm observes every train row with its utility (numpy reference)."""
    env = _env()
    problem = env.problem()
    hidden = torch.tensor([[False, True, False], [False, False, False]])
    problem = dataclasses.replace(problem, hidden_arms=hidden)
    learner = _Counting(2, 3)
    apply_warm_start(learner, problem, WarmStart("train"), "t")
    rows = env.table.rows("train")
    scores, costs = env.table.scores[rows].double().numpy(), env.table.costs[rows].double().numpy()
    n = len(rows)
    for t, rho in enumerate(RHO):
        u = np.clip(scores - rho * costs, 0, 1).sum(0)  # [K]
        known = ~hidden[t].numpy()
        np.testing.assert_array_equal(learner.count[t].numpy(), np.where(known, n, 0))
        np.testing.assert_allclose(learner.total[t].numpy(), np.where(known, u, 0.0), rtol=1e-12)
    assert learner.rounds.tolist() == [0, 0]


def test_neural_warm_start_puts_every_known_row_into_z():
    """``Z_k = lam I + sum_i phi_i phi_i^T`` over the rows arm ``k`` observed, ``phi`` the
    trained network's last layer (numpy reference); a hidden model's ``Z`` stays
    ``lam I``."""
    problem = _env().problem()
    hidden = torch.tensor([[False, True, False], [False, False, False]])
    problem = dataclasses.replace(problem, hidden_arms=hidden)
    torch.manual_seed(0)
    lam = 2.0
    learner = NeuralUCB.from_problem(problem, hidden=8, batch_size=16, nu=1.0, lam=lam).double()
    apply_warm_start(learner, problem, WarmStart("train", epochs=(2,)), "t")
    x = problem.train.features[None].expand(2, -1, -1)
    with torch.no_grad():
        phi = learner(x)[1].numpy()  # [R, n, h]
    for t in range(2):
        for k in range(3):
            z = lam * np.eye(8)
            if not hidden[t, k]:
                z = z + phi[t].T @ phi[t]
            np.testing.assert_allclose(
                learner.z_inv[t, k].numpy(), np.linalg.inv(z), rtol=1e-7, atol=1e-10
            )


def test_other_learners_take_the_rows_through_update():
    env = _env()
    problem = env.problem()
    learner = EXP3.from_problem(problem).double()
    before = {k: v.clone() for k, v in learner.state_dict().items()}
    apply_warm_start(learner, problem, WarmStart("train"), "t")
    changed = [
        k
        for k, v in learner.state_dict().items()
        if k != "rounds" and not torch.equal(v, before[k])
    ]
    assert changed, "the warm rows left EXP3's state unchanged"
    with pytest.raises(ValueError, match="give one warm_weight"):
        apply_warm_start(
            EXP3.from_problem(problem), problem, WarmStart("train", weights=(1.0, 2.0)), "t"
        )


def test_build_path_reads_the_config_keys_and_refuses_bad_ones():
    problem = _env().problem()
    node = {"_target_": "torchroute.learners.LinTS.from_problem", "_partial_": True}
    cold = build_learner({**node, "warm_start": None}, problem, "lints", warm=True)
    assert torch.count_nonzero(cold.theta) == 0
    warm = build_learner({**node, "warm_start": "train"}, problem, "lints", warm=True)
    assert torch.count_nonzero(warm.theta) > 0
    # not warmed unless asked (a learner about to load a checkpoint)
    assert (
        torch.count_nonzero(build_learner({**node, "warm_start": "train"}, problem, "l").theta) == 0
    )
    with pytest.raises(ConfigError, match=r"lints\.warm_weight must be a finite number > 0"):
        build_learner({**node, "warm_start": "train", "warm_weight": [0]}, problem, "lints")
    static = {"_target_": "torchroute.learners.BestSingleArm.from_problem", "_partial_": True}
    with pytest.raises(ConfigError, match=r"learners\.bs\.warm_start applies to online learners"):
        build_learner({**static, "warm_start": "train"}, problem, "bs", warm=True)
    replay_val = SingleChoiceEnv(make_table(n=90, k=3, d=4), rho=RHO, seeds=[0, 1], split="val")
    with pytest.raises(ConfigError, match="validation split"):
        build_learner(
            {**node, "warm_start": "train", "warm_weight": [1, 2]},
            replay_val.problem(),
            "lints",
            warm=True,
        )


def test_cabs_d_keeps_its_oracle_and_warms_its_expert_and_solver():
    from torchroute.learners import CABSD
    from torchroute.models import MultiHeadOracle

    table = make_table(n=90, k=3, d=4)
    env = SingleChoiceEnv(table, rho=RHO, seeds=[0, 1], dtype=F64)
    problem = env.problem()
    oracle = MultiHeadOracle(4, 3, feature_dim=4, hidden=8, arm_names=table.arm_names).eval()
    learner = CABSD.from_problem(problem, oracle=oracle, meta="single_ix").double()
    before = {k: v.clone() for k, v in oracle.state_dict().items()}
    apply_warm_start(learner, problem, WarmStart("train"), "t")
    # the expert and CABS-C's solver equal a LinUCB-style ridge warmed alone on the rows
    alone = LinUCB.from_problem(problem, lam=learner.expert.lam).double()
    apply_warm_start(alone, problem, WarmStart("train"), "t")
    torch.testing.assert_close(learner.expert.theta, alone.theta)
    torch.testing.assert_close(learner.cabs_c.rs.theta, alone.theta)
    assert all(torch.equal(v, before[k]) for k, v in oracle.state_dict().items())
    assert learner.rounds.tolist() == [0, 0] and learner.expert.rounds.tolist() == [0, 0]
