"""SubsetEnv: rewards, costs and metrics against brute force; bad inputs; TREC; resume."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from torchroute.envs.subset import SubsetEnv
from torchroute.envs.subset.trec import load_trec_pool, trec_subset_env
from torchroute.loop import simulate
from torchroute.types import Decision

F64 = torch.float64


def _env(r=3, k=5, n=2, d=2, draws=2, horizon=20, kappa=None, blocks=1, **over):
    g = torch.Generator().manual_seed(0)
    args = {
        "means": torch.rand(r, blocks, n, k, generator=g, dtype=F64),
        "costs": torch.rand(r, d, k, generator=g, dtype=F64),
        "lower": torch.full((r, d), -torch.inf, dtype=F64),
        "upper": torch.full((r, d), 1.5, dtype=F64),
        "draws": draws,
        "horizon": horizon,
        "trials": pd.DataFrame({"seed": range(r)}),
        "kappa": kappa,
        "dtype": F64,
    }
    args.update(over)
    return SubsetEnv(**args), args


def test_set_reward_and_cost_match_brute_force():
    env, args = _env()
    env.context(0)
    action = torch.tensor([[[0, 0]], [[1, 3]], [[4, 2]]])
    probs = torch.full((3, 1, 5), 0.2, dtype=F64)
    feedback, outcome = env.step(env.context(0), Decision(probs, action))
    for r, arms in enumerate([[0], [1, 3], [4, 2]]):
        v = args["means"][r, 0]
        want = sum(max(float(v[n, i]) for i in arms) for n in range(2))
        assert feedback.set_reward[r, 0].item() == pytest.approx(want)
        for j in range(2):
            cost = sum(float(args["costs"][r, j, i]) for i in arms)
            assert outcome[f"cost_{j}"][r, 0].item() == pytest.approx(cost)
    assert not feedback.observed.any()


def test_r2_is_the_distance_of_the_average_cost_to_the_box():
    env, _ = _env()
    sums = {"reward": torch.ones(3, dtype=F64), "r1_opt": torch.zeros(3, dtype=F64)}
    sums["cost_0"] = torch.tensor([2.0, 4.0, 1.0], dtype=F64)  # averages 1, 2, 0.5 (u = 1.5)
    sums["cost_1"] = torch.tensor([4.0, 2.0, 1.0], dtype=F64)  # averages 2, 1, 0.5
    out = env.summarize(sums, rounds=2)
    torch.testing.assert_close(out["r2"], torch.tensor([0.5, 0.5, 0.0], dtype=F64))
    torch.testing.assert_close(out["feasible"], torch.tensor([0.0, 0.0, 1.0], dtype=F64))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"draws": 0}, "draws"),
        ({"draws": 6}, "draws"),
        ({"costs": torch.rand(3, 2, 4, dtype=F64)}, "costs"),
        ({"upper": torch.full((3, 2), -1.0, dtype=F64)}, "target box"),
        ({"lower": torch.full((3, 2), 50.0, dtype=F64)}, "target box"),
    ],
)
def test_bad_inputs_name_the_field(change, field):
    with pytest.raises(ValueError, match=field):
        _env(**change)


def test_safe_set_outside_the_reachable_policies_is_refused():
    with pytest.raises(ValueError, match="target box"):
        _env(upper=torch.full((3, 2), 0.3, dtype=F64))


def test_non_finite_facet_values_are_refused():
    means = torch.rand(3, 1, 2, 5, dtype=F64)
    means[0, 0, 0, 0] = torch.nan
    with pytest.raises(ValueError, match="facet values"):
        _env(means=means)


def test_opt_policy_beats_uniform_and_is_safe():
    from torchroute.functional.subset import expected_sum_max

    env, args = _env(upper=torch.full((3, 2), 1.3, dtype=F64))
    _, hi = env.safe_set()
    q = env.q_opt
    spend = torch.einsum("rdk,rk->rd", args["costs"], q)
    assert (spend <= hi + 1e-6).all() and (q >= 1 / 50 - 1e-7).all()
    uniform = torch.full_like(q, 0.2)
    if bool((torch.einsum("rdk,rk->rd", args["costs"], uniform) <= hi).all()):
        mean = args["means"][:, 0]
        assert (expected_sum_max(q, mean, 2) >= expected_sum_max(uniform, mean, 2) - 1e-7).all()


def test_trec_pool_matches_an_independent_count(shared_data):
    path = shared_data / "trec_crowd"
    pool = load_trec_pool(path, num_groups=3)
    crowd = np.loadtxt(path / "trec_crowd.txt", dtype=int)
    truth = dict(np.loadtxt(path / "trec_truth.txt", dtype=int))
    per_worker: dict[int, list[int]] = {}
    for item, worker, label in crowd:
        if item in truth:
            per_worker.setdefault(worker, []).append(int(label == truth[item]))
    kept = {w: v for w, v in per_worker.items() if len(v) >= 5}
    assert len(pool["count"]) == len(kept)
    assert sorted(pool["count"].tolist()) == sorted(float(len(v)) for v in kept.values())
    assert pool["correct"].sum() == sum(sum(v) for v in kept.values())


def test_trec_env_trials_and_regime_state_is_restored(shared_data):
    env = trec_subset_env(
        [0, 1], path=str(shared_data / "trec_crowd"), horizon=30, constraints=["tight", "none"]
    )
    assert env.num_trials == 8 and env.num_arms == 50 and env.num_facets == 3
    trials = env.trials()
    assert set(trials["env"]) == {"stochastic", "regime"}
    regime = torch.tensor((trials["env"] == "regime").to_numpy())
    # regime blocks differ; stochastic blocks repeat one block
    assert not torch.equal(env.means[regime][:, 0], env.means[regime][:, 1])
    assert torch.equal(env.means[~regime][:, 0], env.means[~regime][:, 5])
    state = {k: v.clone() for k, v in env.state_dict().items()}
    other = trec_subset_env(
        [0, 1], path=str(shared_data / "trec_crowd"), horizon=30, constraints=["tight", "none"]
    )
    other.means.mul_(0.5)  # a different schedule must be overwritten, not re-drawn
    other.load_state_dict(state)
    assert torch.equal(other.means, env.means)


def test_subset_env_resume_is_bit_exact(tmp_path):
    import shutil

    from torchroute.learners import OMDApproachability
    from torchroute.tracking import NullTracker

    class CopyAt(NullTracker):
        def log(self, metrics, step):
            if step == 20:
                shutil.copy(tmp_path / "ck.pt", tmp_path / "mid.pt")

    def run(**kw):
        env, _ = _env(kappa=20.0, blocks=2, horizon=40)
        learner = OMDApproachability.from_problem(env.problem())
        return simulate(learner, env, seed=3, progress=False, log_every=10, **kw)

    full = run()
    run(ckpt_every=15, ckpt_path=tmp_path / "ck.pt", tracker=CopyAt())
    resumed = run(resume_from=tmp_path / "mid.pt")
    pd.testing.assert_frame_equal(resumed.summary, full.summary)
    pd.testing.assert_frame_equal(resumed.curve, full.curve)


def test_feasibility_at_both_tolerances_on_a_hand_made_trajectory():
    """Costs (0.5, 1, 2), one arm per round, upper bound 1, T = 2000: trial 0 plays arm 1
    always but once arm 2 (average 1 + 1/2000: R2 = 5e-4, feasible at 1e-3 only), trial 1
    five times arm 2 (R2 = 2.5e-3: neither), trial 2 arm 0 once and arm 1 otherwise (inside)."""
    t_max = 2000
    env, _ = _env(
        k=3, d=1, draws=1, horizon=t_max,
        costs=torch.tensor([[[0.5, 1.0, 2.0]]] * 3, dtype=F64),
        lower=torch.full((3, 1), -torch.inf, dtype=F64),
        upper=torch.full((3, 1), 1.0, dtype=F64),
    )  # fmt: skip
    sums = {}
    probs = torch.full((3, 1, 3), 1 / 3, dtype=F64)
    for t in range(t_max):
        arms = [2 if t == 7 else 1, 2 if t < 5 else 1, 0 if t == 3 else 1]
        action = torch.tensor(arms).view(3, 1, 1)
        _, outcome = env.step(env.context(t), Decision(probs, action))
        for key, value in outcome.items():
            sums[key] = sums.get(key, 0) + value.sum(1)
    out = env.summarize(sums, t_max)
    torch.testing.assert_close(out["r2"], torch.tensor([5e-4, 2.5e-3, 0.0], dtype=F64))
    torch.testing.assert_close(out["feasible"], torch.tensor([0.0, 0.0, 1.0], dtype=F64))
    torch.testing.assert_close(out["feasible_1e3"], torch.tensor([1.0, 0.0, 1.0], dtype=F64))
    # the final policy's value per block (one block): E max over one draw from q = 1/3 each
    means = env.means[:, 0]  # [R, N, K]
    want = means.mean(-1).sum(-1)  # sum_n mean_i V[n, i] for one uniform draw
    torch.testing.assert_close(out["qT_value_0"], want)


def test_block_values_kept_are_those_of_a_fresh_env_and_follow_a_reordering():
    """The noisy block values are kept per (seed, world) and for the last policy: asked
    again, for a reordered selection of the trials, or after new means, they equal a fresh
    env's (which draws everything anew)."""
    env, args = _env(r=4, kappa=20.0, blocks=2)
    g = torch.Generator().manual_seed(5)
    q = torch.rand(4, 5, generator=g, dtype=F64)
    q = q / q.sum(-1, keepdim=True)
    first = env.block_values(q)
    assert env.block_values(q) is first  # the same policy: the answer kept
    torch.testing.assert_close(_env(r=4, kappa=20.0, blocks=2)[0].block_values(q), first)
    order = [2, 0, 3, 1]
    uniform = torch.full((4, 5), 0.2, dtype=F64)  # the same policy in every trial
    everywhere = env.block_values(uniform)
    moved = env.select_trials(order)
    torch.testing.assert_close(moved.block_values(uniform), everywhere[order], rtol=0, atol=0)
    torch.testing.assert_close(moved.block_values(q[order]), first[order], rtol=0, atol=0)
    state = env.state_dict()
    state["means"] = state["means"].flip(0)
    env.load_state_dict(state)
    fresh, _ = _env(r=4, kappa=20.0, blocks=2, means=args["means"].flip(0))
    torch.testing.assert_close(env.block_values(q), fresh.block_values(q), rtol=0, atol=0)
