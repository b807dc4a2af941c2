"""The loop: metrics against a hand-rolled replay, checkpoints, exact resume, bad runs."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from torchroute.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from torchroute.envs import SingleChoiceEnv
from torchroute.learners import (
    EpsilonGreedy,
    FullFeedbackLinUCB,
    LinTS,
    LinUCB,
    NeuralUCB,
    SquareCB,
)
from torchroute.loop import NonFiniteError, simulate


def _env(table, **kw):
    kw.setdefault("rho", [0.0, 300.0, 900.0, 0.0])
    kw.setdefault("seeds", [0, 0, 1, 2])
    return SingleChoiceEnv(table, dtype=torch.float64, **kw)


def _learner(cls=SquareCB):
    if cls is NeuralUCB:
        gen = torch.Generator().manual_seed(0)
        return NeuralUCB(4, 4, 6, hidden=8, capacity=16, batch_size=4, generator=gen).double()
    return cls(4, 4, 6).double()


def test_metrics_match_a_hand_rolled_loop(tiny_table):
    env = _env(tiny_table)
    result = simulate(_learner(), env, seed=3, log_every=7, progress=False)
    # replay by hand with the same generator; utilities from the table's own float64 formula
    learner, g = _learner(), torch.Generator().manual_seed(3)
    rho = torch.tensor([0.0, 300.0, 900.0, 0.0], dtype=torch.float64)
    util, regret = torch.zeros(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    acc, cost = torch.zeros(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    for t in range(env.horizon):
        ctx = env.context(t)
        dec = learner.act(ctx, g)
        fb, _ = env.step(ctx, dec, g)
        learner.update(ctx, dec, fb, g)
        rows, arm = ctx.index[:, 0], dec.action[:, 0]
        u = (tiny_table.scores[rows] - rho[:, None] * tiny_table.costs[rows]).clamp(0, 1)
        chosen = u[torch.arange(4), arm]
        util += chosen
        regret += u.max(1).values - chosen
        acc += tiny_table.scores[rows, arm]
        cost += tiny_table.costs[rows, arm]
    s = result.summary
    k = tiny_table.num_arms
    per_arm = [f"{name}_{j}" for name in ("share", "arm_accuracy", "arm_cost") for j in range(k)]
    assert list(s.columns) == [
        "rho", "seed", "rounds", "avg_utility", "avg_regret", "accuracy", "avg_cost", *per_arm
    ]  # fmt: skip
    for column, expected in [
        ("avg_utility", util),
        ("avg_regret", regret),
        ("accuracy", acc),
        ("avg_cost", cost),
    ]:
        torch.testing.assert_close(torch.tensor(s[column].values), expected / env.horizon)
    # accuracy and cost are different quantities here (a swap would be caught)
    assert not torch.allclose(acc, cost)
    assert list(s["rho"]) == [0.0, 300.0, 900.0, 0.0] and list(s["seed"]) == [0, 0, 1, 2]
    last = result.curve[result.curve["round"] == env.horizon]
    torch.testing.assert_close(torch.tensor(last["cum_regret"].values), regret)
    assert sorted(result.curve["round"].unique()) == [7, 14, 20]


class _InterruptAt:
    """A tracker that stops the run (like Ctrl-C) when the loop logs round ``stop``."""

    def __init__(self, stop: int) -> None:
        self.stop = stop

    def log(self, metrics, step):
        if step >= self.stop:
            raise KeyboardInterrupt

    def log_table(self, name, frame):
        pass

    def finish(self):
        pass


@pytest.mark.parametrize("cls", [SquareCB, LinUCB, FullFeedbackLinUCB, LinTS, NeuralUCB])
@pytest.mark.parametrize(("ckpt_every", "stop"), [(4, 6), (8, 12), (12, 19)])
def test_kill_and_resume_continues_bit_for_bit(tiny_table, tmp_path, cls, ckpt_every, stop):
    """Learning learners (ridge, sampling, an MLP with Adam) interrupted at several points."""
    env = _env(tiny_table)
    full = simulate(_learner(cls), env, seed=5, log_every=1, progress=False)
    ckpt = tmp_path / "run.pt"
    with pytest.raises(KeyboardInterrupt):
        simulate(
            _learner(cls),
            env,
            seed=5,
            log_every=1,
            ckpt_every=ckpt_every,
            ckpt_path=ckpt,
            tracker=_InterruptAt(stop),
            progress=False,
        )
    assert load_checkpoint(ckpt)["round"] == (stop - 1) // ckpt_every * ckpt_every
    resumed = simulate(
        _learner(cls), env, seed=5, log_every=1, ckpt_path=ckpt, resume_from=ckpt, progress=False
    )
    pd.testing.assert_frame_equal(resumed.summary, full.summary, check_exact=True)
    pd.testing.assert_frame_equal(resumed.curve, full.curve, check_exact=True)
    assert load_checkpoint(ckpt)["round"] == env.horizon


def test_resume_refuses_other_config_and_bad_files(tiny_table, tmp_path):
    env = _env(tiny_table)
    ckpt = tmp_path / "run.pt"
    simulate(_learner(), env, ckpt_path=ckpt, config={"gamma": 4}, progress=False)
    with pytest.raises(CheckpointError, match="another configuration"):
        simulate(_learner(), env, resume_from=ckpt, config={"gamma": 8}, progress=False)
    with pytest.raises(CheckpointError, match="holds a SquareCB"):
        simulate(_learner(LinUCB), env, resume_from=ckpt, config={"gamma": 4}, progress=False)
    other = _env(tiny_table, rho=[1.0, 300.0, 900.0, 0.0])
    with pytest.raises(CheckpointError, match="another environment"):
        simulate(_learner(), other, resume_from=ckpt, config={"gamma": 4}, progress=False)
    data = ckpt.read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        simulate(
            _learner(), env, resume_from=tmp_path / "cut.pt", config={"gamma": 4}, progress=False
        )
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")
    payload = load_checkpoint(ckpt)
    for bad_round in (-3, 10_000, 2.5):
        payload.pop("format")
        save_checkpoint(tmp_path / "bad.pt", {**payload, "round": bad_round})
        payload = load_checkpoint(tmp_path / "bad.pt")
        with pytest.raises(CheckpointError, match="has round"):
            simulate(
                _learner(), env, resume_from=tmp_path / "bad.pt", config={"gamma": 4},
                progress=False,
            )  # fmt: skip


def test_interrupted_checkpoint_write_keeps_the_previous_file(tiny_table, tmp_path, monkeypatch):
    from torchroute import io

    env = _env(tiny_table)
    ckpt = tmp_path / "run.pt"
    simulate(_learner(), env, ckpt_path=ckpt, progress=False)
    before = ckpt.read_bytes()

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(io.os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        simulate(_learner(), env, ckpt_path=ckpt, progress=False)
    assert ckpt.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run.pt"]


@pytest.mark.parametrize(
    ("learner", "message"),
    [
        (LinUCB(4, 3, 6), r"LinUCB was built for K \(arms\)=3 but SingleChoiceEnv has 4"),
        (LinUCB(4, 4, 5), r"LinUCB was built for d \(features\)=5 but SingleChoiceEnv has 6"),
        (LinUCB(2, 4, 6), r"LinUCB was built for R \(trials\)=2 but SingleChoiceEnv has 4"),
    ],
)
def test_learner_env_mismatch_is_a_one_line_error(tiny_table, learner, message):
    with pytest.raises(ValueError, match=message):
        simulate(learner.double(), _env(tiny_table), progress=False)


def test_non_finite_state_stops_the_run_naming_round_and_learner(tiny_table):
    """A NaN that reaches the state (here: planted in theta) is caught at the next log."""
    learner = _learner(EpsilonGreedy)
    learner.theta[1, 2, 0] = float("nan")
    with pytest.raises(NonFiniteError, match=r"learner 'eps'.*\['theta'\].*round 5"):
        simulate(learner, _env(tiny_table), log_every=5, progress=False, desc="eps")


def test_learner_metrics_are_averaged_per_round_into_the_results(tiny_table):
    """What ``update`` returns (NeuralUCB: its training loss) becomes a per-trial column."""
    env = _env(tiny_table)
    learner, g = _learner(NeuralUCB), torch.Generator().manual_seed(2)
    result = simulate(_learner(NeuralUCB), env, seed=2, progress=False)
    losses = torch.zeros(4, dtype=torch.float64)
    for t in range(env.horizon):
        ctx = env.context(t)
        dec = learner.act(ctx, g)
        fb, _ = env.step(ctx, dec, g)
        losses += learner.update(ctx, dec, fb, g)["loss"]
    assert list(result.summary.columns)[-1] == "loss"
    torch.testing.assert_close(torch.tensor(result.summary["loss"].values), losses / env.horizon)
