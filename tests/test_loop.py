from __future__ import annotations

import pandas as pd
import pytest
import torch

from torchroute.checkpoint import CheckpointError, load_checkpoint
from torchroute.envs import SingleChoiceEnv
from torchroute.learners import FullFeedbackLinUCB, LinUCB, SquareCB
from torchroute.loop import simulate


def _env(table):
    return SingleChoiceEnv(
        table, rho=[0.0, 300.0, 900.0, 0.0], seeds=[0, 0, 1, 2], dtype=torch.float64
    )


def _learner(cls=SquareCB):
    return cls(4, 4, 6).double()


def test_metrics_match_a_hand_rolled_loop(tiny_table):
    env = _env(tiny_table)
    result = simulate(_learner(), env, seed=3, log_every=7, progress=False)
    # replay by hand with the same generator
    learner, g = _learner(), torch.Generator().manual_seed(3)
    util, regret = torch.zeros(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    for t in range(env.horizon):
        ctx = env.context(t)
        dec = learner.act(ctx, g)
        fb, _ = env.step(ctx, dec)
        learner.update(ctx, dec, fb)
        u = env.utilities(ctx.index)[:, 0]
        chosen = u[torch.arange(4), dec.action[:, 0]]
        util += chosen
        regret += u.max(1).values - chosen
    s = result.summary
    torch.testing.assert_close(torch.tensor(s["avg_utility"].values), util / env.horizon)
    torch.testing.assert_close(torch.tensor(s["avg_regret"].values), regret / env.horizon)
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


@pytest.mark.parametrize("cls", [SquareCB, LinUCB, FullFeedbackLinUCB])
def test_resume_continues_bit_for_bit(tiny_table, tmp_path, cls):
    env = _env(tiny_table)
    full = simulate(_learner(cls), env, seed=5, log_every=4, progress=False)
    ckpt = tmp_path / "run.pt"
    with pytest.raises(KeyboardInterrupt):
        simulate(
            _learner(cls),
            env,
            seed=5,
            log_every=4,
            ckpt_every=8,
            ckpt_path=ckpt,
            tracker=_InterruptAt(12),
            progress=False,
        )
    assert load_checkpoint(ckpt)["round"] == 8
    resumed = simulate(
        _learner(cls), env, seed=5, log_every=4, ckpt_path=ckpt, resume_from=ckpt, progress=False
    )
    pd.testing.assert_frame_equal(resumed.summary, full.summary, check_exact=True)
    pd.testing.assert_frame_equal(resumed.curve, full.curve, check_exact=True)
    assert load_checkpoint(ckpt)["round"] == env.horizon


def test_resume_refuses_other_config_and_truncated_files(tiny_table, tmp_path):
    env = _env(tiny_table)
    ckpt = tmp_path / "run.pt"
    simulate(_learner(), env, ckpt_path=ckpt, config={"gamma": 4}, progress=False)
    with pytest.raises(CheckpointError, match="another configuration"):
        simulate(_learner(), env, resume_from=ckpt, config={"gamma": 8}, progress=False)
    with pytest.raises(CheckpointError, match="holds a SquareCB"):
        simulate(_learner(LinUCB), env, resume_from=ckpt, config={"gamma": 4}, progress=False)
    other = SingleChoiceEnv(
        tiny_table, rho=[1.0, 300.0, 900.0, 0.0], seeds=[0, 0, 1, 2], dtype=torch.float64
    )
    with pytest.raises(CheckpointError, match="another table, stream or rho"):
        simulate(_learner(), other, resume_from=ckpt, config={"gamma": 4}, progress=False)
    data = ckpt.read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        simulate(
            _learner(), env, resume_from=tmp_path / "cut.pt", config={"gamma": 4}, progress=False
        )
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")


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
