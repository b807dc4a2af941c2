"""``rng=per_trial``: a trial's numbers are those of a run of that trial alone.

The reference for each trial is an env built for that trial only (its own constructor call,
not ``select_trials``) and a learner built for it; the trial is then run among other trials
and at other positions. Learners cover every kind of draw: tie-breaks (uniform), LinTS
noise (normal), categorical actions, NeuralUCB's initial weights and replay draws, CABS's
graph draws, subset draws with Beta (gamma) env noise and TS gamma samples, and the
low-rank simulator's item (multinomial) and reward noise (normal).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
import torch

from tests.test_loop import _InterruptAt
from torchroute.checkpoint import load_checkpoint
from torchroute.envs import LowRankExperts, SingleChoiceEnv
from torchroute.envs.subset import SubsetEnv
from torchroute.functional.random import TrialRNG, trial_keys
from torchroute.learners import (
    CABSC,
    HPG,
    LinTS,
    LogLinearPG,
    MoEGating,
    NeuralUCB,
    OMDApproachability,
    SquareCB,
    TSSubset,
)
from torchroute.loop import simulate
from torchroute.models import MultiHeadOracle

F64 = torch.float64
SEED = 3


def _oracle(table):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return MultiHeadOracle(6, 4, feature_dim=4, hidden=8, arm_names=table.arm_names).eval()


TABLE_LEARNERS = {
    "lints": lambda p, table: LinTS.from_problem(p, v=0.5),
    "squarecb": lambda p, table: SquareCB.from_problem(p),
    "neural_ucb": lambda p, table: NeuralUCB.from_problem(
        p, hidden=8, capacity=16, batch_size=4, steps=2
    ),
    "cabs_c_neural": lambda p, table: CABSC.from_problem(
        p, oracle=_oracle(table), solver="neural", neural={"hidden": 8, "capacity": 16}
    ),
}
TRIALS = [(0.0, 0), (300.0, 1), (900.0, 2), (0.0, 3)]


def _run(env, make, **kw):
    """``make(problem)`` on ``env`` with per-trial streams (initial ones in the problem)."""
    init = TrialRNG(trial_keys(env.trials(), SEED, stream="init"))
    learner = make(replace(env.problem(), init_rng=init))
    return simulate(learner, env, seed=SEED, rng="per_trial", log_every=4, progress=False, **kw)


def _rows(result, trials: list[int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The summary and curve rows of ``trials`` (in that order), numbered 0, 1, ..."""
    summary = result.summary.iloc[trials].reset_index(drop=True)
    curve = result.curve
    parts = [curve[curve["trial"] == t].assign(trial=i) for i, t in enumerate(trials)]
    curve = pd.concat(parts).sort_values(["round", "trial"], kind="stable")
    return summary, curve.reset_index(drop=True)


def _assert_same(result, trials, reference, rtol: float = 0.0):
    """The rows of ``trials`` in ``result`` are ``reference``'s: bit for bit (``rtol=0``),
    else every float column to relative ``rtol`` (absolute ``rtol / 100`` near zero)."""
    summary, curve = _rows(result, trials)
    close = {"check_exact": True} if rtol == 0 else {"rtol": rtol, "atol": rtol * 1e-2}
    pd.testing.assert_frame_equal(summary, reference.summary, **close)
    pd.testing.assert_frame_equal(curve, reference.curve, **close)


@pytest.mark.parametrize("name", sorted(TABLE_LEARNERS))
def test_table_trials_alone_among_others_and_moved(tiny_table, name):
    def env_of(trials):
        rho, seeds = zip(*trials)
        return SingleChoiceEnv(tiny_table, rho=list(rho), seeds=list(seeds))

    def make(problem):
        return TABLE_LEARNERS[name](problem, tiny_table)

    full = _run(env_of(TRIALS), make)
    for i in (0, 2):
        _assert_same(full, [i], _run(env_of([TRIALS[i]]), make))
    moved = _run(env_of([TRIALS[2], TRIALS[0]]), make)
    _assert_same(full, [2, 0], moved)


def _subset_env(index: list[int]) -> SubsetEnv:
    g = torch.Generator().manual_seed(0)
    r, k, d = 4, 5, 2
    args = {
        "means": torch.rand(r, 2, 2, k, generator=g, dtype=F64),
        "costs": torch.rand(r, d, k, generator=g, dtype=F64),
        "lower": torch.full((r, d), -torch.inf, dtype=F64),
        "upper": torch.full((r, d), 1.5, dtype=F64),
    }
    trials = pd.DataFrame({"seed": range(r)}).iloc[index].reset_index(drop=True)
    picked = {key: value[index] for key, value in args.items()}
    return SubsetEnv(**picked, draws=2, horizon=12, trials=trials, kappa=20.0, dtype=F64)


@pytest.mark.parametrize(
    "make",
    [TSSubset.from_problem, OMDApproachability.from_problem, MoEGating.from_problem],
    ids=["ts_subset", "omd", "moe_gating"],
)
def test_subset_trials_with_beta_noise_alone_and_moved(make):
    full = _run(_subset_env([0, 1, 2, 3]), make)
    _assert_same(full, [1], _run(_subset_env([1]), make))
    _assert_same(full, [3, 1], _run(_subset_env([3, 1]), make))


def hpg_rtol(rounds: int, slots: int, dtype: torch.dtype = torch.float32) -> float:
    """HPG's guarantee across batch shapes: every reported number to relative
    ``rounds * slots * eps`` of its state's dtype (float32 by default, whatever the env's).

    Its mirror step runs batched matrix products and reductions (the secular solver and the
    eigen-update) whose kernels and summation order may depend on the batch's size and on
    the CPU (AVX-512 on Intel, AVX2 on most AMD EPYC, MKL's per-vendor paths), so a trial
    alone may differ from the same trial in a batch in its last bits. Each round's step is
    backward stable, ``O(n eps)`` relative for ``n = k + 1`` slots, and the projection does
    not amplify it, so the errors of the rounds add up. A decision that flips moves a
    trial's average reward by one round's reward over ``T`` (about 1e-2 here), far above it.
    """
    return rounds * slots * torch.finfo(dtype).eps


def check_low_rank_experts(make, rtol: float = 0.0) -> None:
    """Trials of the low-rank experts simulator (multinomial items, normal noise) alone and
    moved give the numbers they have among the others (to relative ``rtol``; 0: exactly)."""
    small = {"num_experts": 3, "rank": 2, "latent_dim": 4, "item_dim": 4, "num_items": 6}

    def env_of(seeds, dims):
        return LowRankExperts(seeds=seeds, dims=dims, horizon=12, noise=0.3, dtype=F64, **small)

    full = _run(env_of([0, 1], [6, 10]), make)  # trials (6, 0), (6, 1), (10, 0), (10, 1)
    _assert_same(full, [3], _run(env_of([1], [10]), make), rtol)
    _assert_same(full, [3, 2], _run(env_of([1, 0], [10]), make), rtol)


def test_low_rank_experts_trials_alone_and_moved():
    check_low_rank_experts(LogLinearPG.from_problem)


def test_hpg_trials_alone_and_moved_to_a_documented_tolerance():
    """HPG's trials alone, among others and moved: the same decisions, and every number
    equal to :func:`hpg_rtol` (not bit for bit: see there): 12 rounds, capacity 10."""
    rtol = hpg_rtol(rounds=12, slots=10 + 1)  # 1.6e-5
    check_low_rank_experts(lambda problem: HPG.from_problem(problem, rank=2), rtol)


def test_identical_labels_give_identical_trials(tiny_table):
    env = SingleChoiceEnv(tiny_table, rho=[300.0, 0.0, 300.0], seeds=[1, 0, 1])
    summary = _run(env, lambda p: LinTS.from_problem(p)).summary
    pd.testing.assert_frame_equal(
        summary.iloc[[0]].reset_index(drop=True), summary.iloc[[2]].reset_index(drop=True)
    )


def test_per_trial_run_resumes_bit_for_bit(tiny_table, tmp_path):
    env = SingleChoiceEnv(tiny_table, rho=[0.0, 300.0], seeds=[0, 1])

    def make(problem):
        return NeuralUCB.from_problem(problem, hidden=8, capacity=16, batch_size=4)

    full = _run(env, make)
    ckpt = tmp_path / "run.pt"
    with pytest.raises(KeyboardInterrupt):
        _run(env, make, ckpt_every=5, ckpt_path=ckpt, tracker=_InterruptAt(12))
    payload = load_checkpoint(ckpt)
    assert payload["round"] == 10 and "generator" not in payload
    assert payload["rng"]["counter"] > 0
    resumed = _run(env, make, ckpt_path=ckpt, resume_from=ckpt)
    pd.testing.assert_frame_equal(resumed.summary, full.summary, check_exact=True)
    pd.testing.assert_frame_equal(resumed.curve, full.curve, check_exact=True)
    with pytest.raises(ValueError, match="was written with rng=per_trial; resume with it"):
        simulate(make(env.problem()), env, resume_from=ckpt, progress=False)


def test_select_trials_is_the_env_of_those_trials(tiny_table):
    """Each env's ``select_trials`` gives the contexts and feedback of an env built for
    those trials."""
    full = SingleChoiceEnv(tiny_table, rho=[0.0, 300.0, 900.0], seeds=[0, 1, 2])
    built = SingleChoiceEnv(tiny_table, rho=[900.0, 0.0], seeds=[2, 0])
    picked = full.select_trials([2, 0])
    assert picked.trials().equals(built.trials()) and picked.num_trials == 2
    for t in (0, 5):
        assert torch.equal(picked.context(t).x, built.context(t).x)
    assert picked.fingerprint() == built.fingerprint()
    subset = _subset_env([0, 1, 2, 3]).select_trials([3, 1])
    assert subset.fingerprint() == _subset_env([3, 1]).fingerprint()
    assert torch.equal(subset.q_opt, _subset_env([3, 1]).q_opt)
    small = {"num_experts": 3, "rank": 2, "latent_dim": 4, "item_dim": 4, "num_items": 6}
    lre = LowRankExperts(seeds=[0, 1], dims=[6], horizon=5, **small).select_trials([1])
    assert (
        lre.fingerprint() == LowRankExperts(seeds=[1], dims=[6], horizon=5, **small).fingerprint()
    )
    with pytest.raises(ValueError, match=r"index must name trials in 0\.\.2, got \[3\]"):
        full.select_trials([3])
