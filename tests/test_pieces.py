"""Trial chunks and torchrun shards reproduce the single-process ``rng=per_trial`` run.

The reference is ``run_config`` in one process on every trial at once; the same
configuration then runs ``trial_chunk`` trials at a time, and as two ``torchrun`` ranks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import httpx
import pandas as pd
import pytest
import torch

from tests.conftest import REPO_ROOT, make_table
from tests.serve.test_serve_cli import Server
from torchroute.checkpoint import CheckpointError, load_checkpoint
from torchroute.cli import compose_config
from torchroute.run import ConfigError, run_config
from torchroute.run.shards import Piece, merge_logs, plan
from torchroute.serve import load_router

LEARNERS = ["lints", "squarecb", "neural_ucb"]


def _overrides(out_dir, *extra: str) -> list[str]:
    return [
        "experiment=default",
        "jobs=1",  # torchrun splits the trials; jobs would split the learners
        "~env.scenario",  # rounds_to_recover averages the seeds of each piece, not the run's
        "~learners.cabs_d",  # its oracle pre-trains from ${encoder}, removed below
        "~data",
        "+data._target_=tests.conftest.make_table",
        "~encoder",
        "~logger",
        "features.pca_dim=null",
        "rhos=[0.0,500.0,900.0]",
        "seeds=[0,1]",
        "+learner@learners.neural_ucb=neural_ucb",
        "learners.neural_ucb.hidden=8",
        "+learners.neural_ucb.capacity=16",
        "+learners.neural_ucb.batch_size=4",
        f"run_learners=[{','.join(LEARNERS)}]",
        "log_every=5",
        "progress=false",
        f"out_dir={out_dir}",
        *extra,
    ]


def _run(out_dir, *extra: str) -> pd.DataFrame:
    return run_config(compose_config("simulate", _overrides(out_dir, *extra)))


def _assert_serves_the_reference_trial(run_dir, reference_dir, learner, tmp_path):
    """The router of the last trial (rho 900, seed 1) of a run split into pieces holds the
    state that trial has in the single-process run's checkpoint."""
    router = load_router(run_dir, learner, rho=900, seed=1, state_path=tmp_path / "r.pt")
    whole = load_checkpoint(reference_dir / "checkpoints" / f"{learner}.pt")["learner"]
    state = router.learner.state_dict()
    for key, value in whole.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(state[key], value[5:6]), key
    decisions = router.route(embeddings=make_table().embeddings[:3])
    assert len(decisions) == 3


def _assert_same_files(left, right):
    for name in ("results.csv", "curves.csv"):
        pd.testing.assert_frame_equal(
            pd.read_csv(left / name), pd.read_csv(right / name), check_exact=True
        )


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The single-process, unchunked per-trial run."""
    out = tmp_path_factory.mktemp("reference")
    return out, _run(out, "rng=per_trial")


def test_chunks_reproduce_the_whole_run(reference, tmp_path):
    out, whole = reference
    chunked = _run(tmp_path, "rng=per_trial", "trial_chunk=4")  # 6 trials: [0, 4), [4, 6)
    pd.testing.assert_frame_equal(chunked, whole, check_exact=True)
    _assert_same_files(tmp_path, out)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == sorted(f"{n}.chunk{c}.pt" for n in LEARNERS for c in (0, 1))
    _assert_serves_the_reference_trial(tmp_path, out, "lints", tmp_path / "serve")


def test_resuming_chunks_reads_each_chunks_checkpoint(reference, tmp_path):
    out, _ = reference
    _run(tmp_path, "rng=per_trial", "trial_chunk=4")
    ckpt = tmp_path / "checkpoints" / "lints.chunk0.pt"
    shutil.rmtree(tmp_path / "runs" / "lints")  # lints runs again, from its checkpoints
    _run(tmp_path, "rng=per_trial", "trial_chunk=4", f"resume={ckpt}")
    _assert_same_files(tmp_path, out)
    shutil.rmtree(tmp_path / "runs" / "lints")
    shutil.copy(ckpt, ckpt.with_name("lints.chunk1.pt"))  # chunk 1 now holds chunk 0's trials
    with pytest.raises(CheckpointError, match=r"lints\.chunk1\.pt was written for another env"):
        _run(tmp_path, "rng=per_trial", "trial_chunk=4", f"resume={ckpt}")
    with pytest.raises(CheckpointError, match="written with trial_chunk=4, this run splits"):
        _run(tmp_path, "rng=per_trial", "trial_chunk=5", f"resume={ckpt}")
    with pytest.raises(CheckpointError, match="written with trial_chunk=4, this run splits"):
        _run(tmp_path, "rng=per_trial", f"resume={ckpt}")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["trial_chunk=2"], r"trial_chunk needs rng=per_trial \(with one shared generator"),
        (["rng=per_trial", "trial_chunk=0"], r"trial_chunk must be an integer >= 1 or null"),
        (["rng=mine"], r"rng must be one of \['shared', 'per_trial'\], got 'mine'"),
    ],
)
def test_bad_splits_are_one_line_errors(tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message):
        _run(tmp_path, *extra)


def test_torchrun_needs_per_trial_streams(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigError, match=r"torchrun \(WORLD_SIZE=2\) .* needs rng=per_trial"):
        _run(tmp_path)


@pytest.mark.slow
def test_torchrun_shards_reproduce_the_single_process_run(reference, tmp_path):
    """Two gloo ranks under torchrun: rank 0 writes exactly the single-process files."""
    out, _ = reference
    torchrun = [sys.executable, "-m", "torch.distributed.run"]  # the torchrun entry point
    args = [*torchrun, "--standalone", "--nproc_per_node=2", "-m", "torchroute", "simulate"]
    args += [*_overrides(tmp_path, "rng=per_trial"), "report=false"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("wrote ") == 1  # rank 0 only
    _assert_same_files(tmp_path, out)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == sorted(f"{n}.rank{r}of2.pt" for n in LEARNERS for r in (0, 1))
    for learner in ("lints", "neural_ucb"):
        _assert_serves_the_reference_trial(tmp_path, out, learner, tmp_path / learner)
    # and through the command line, from its per-rank checkpoints
    flags = ["--learner", "lints", "--rho", "900", "--seed", "1", "--insecure-no-auth"]
    server = Server(str(tmp_path), *flags, "--state", str(tmp_path / "cli" / "r.pt"))
    try:
        body = {"embeddings": make_table().embeddings[:2].tolist()}
        answer = httpx.post(f"{server.url}/route", json=body, timeout=30)
        assert answer.status_code == 200 and len(answer.json()["decisions"]) == 2
    finally:
        server.stop()
    ckpt = tmp_path / "checkpoints" / "lints.rank1of2.pt"
    with pytest.raises(CheckpointError, match=r"world size 2 \(torchrun processes\), this run"):
        _run(tmp_path, "rng=per_trial", f"resume={ckpt}")
    # the same world size resumes: lints runs again from its per-rank checkpoints
    shutil.rmtree(tmp_path / "runs" / "lints")
    (tmp_path / "results.csv").unlink()
    resumed = subprocess.run(
        [*args, f"resume={ckpt}"], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _assert_same_files(tmp_path, out)


def test_plan_splits_contiguously_by_rank_then_chunk():
    assert plan(10, None, 1, 0) == [Piece(0, 10)]
    assert [(p.start, p.stop) for p in plan(10, 3, 2, 1)] == [(5, 8), (8, 10)]
    assert [(p.start, p.stop) for p in plan(7, None, 3, 2)] == [(4, 7)]
    assert plan(10, 3, 2, 1)[1].checkpoint_name("hpg") == "hpg.rank1of2.chunk1.pt"
    with pytest.raises(ValueError, match="WORLD_SIZE=4 processes for 3 trials"):
        plan(3, None, 4, 0)


def test_merged_logs_are_trial_weighted_means():
    parts = [
        (4, [(5, {"avg_regret": 0.5, "round": 5}), (10, {"avg_regret": 0.25, "round": 10})]),
        (2, [(5, {"avg_regret": 1.0, "round": 5}), (10, {"avg_regret": 0.25, "round": 10})]),
    ]
    merged = merge_logs(parts)
    assert merged == [
        (5, {"avg_regret": pytest.approx((4 * 0.5 + 2 * 1.0) / 6), "round": 5}),
        (10, {"avg_regret": pytest.approx(0.25), "round": 10}),
    ]
