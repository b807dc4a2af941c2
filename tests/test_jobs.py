"""``jobs=N``: the learners of a run in N worker processes give the files of one process.

The reference is the same configuration run in this process, one learner after the other
(``jobs=1``); a two-process run must write the same ``results.csv``, ``curves.csv``,
``runs/<learner>/`` and checkpoints. Failures: a learner that raises, a worker that dies.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from typing import ClassVar

import pandas as pd
import pytest
import torch

from tests.conftest import tiny_run_config
from torchroute.checkpoint import load_checkpoint
from torchroute.learners import EpsilonGreedy
from torchroute.run import ConfigError, run_config
from torchroute.run.jobs import PARENT_CHECK_S, threads_per_job


def _node(target: str, **hparams) -> dict:
    return {"_target_": target, "_partial_": True, **hparams}


LEARNERS = {
    "lints": _node("torchroute.learners.LinTS.from_problem"),
    "squarecb": _node("torchroute.learners.SquareCB.from_problem"),
    "neural_ucb": _node(
        "torchroute.learners.NeuralUCB.from_problem", hidden=8, capacity=16, batch_size=4
    ),
    "epsilon_greedy": _node("torchroute.learners.EpsilonGreedy.from_problem"),
}


class RaisingLearner(EpsilonGreedy):
    """Epsilon-greedy that raises at its third update (a learner whose run fails)."""

    def update(self, context, decision, feedback, generator=None):
        if int(self.rounds.max()) == 2:
            raise ValueError("planted failure in update")
        return super().update(context, decision, feedback, generator)


class DyingLearner(EpsilonGreedy):
    """Epsilon-greedy whose process exits at its third update (a worker killed mid-run)."""

    def update(self, context, decision, feedback, generator=None):
        if int(self.rounds.max()) == 2:
            os._exit(3)
        return super().update(context, decision, feedback, generator)


def _run(out_dir, learners=LEARNERS, *extra: str) -> pd.DataFrame:
    cfg = tiny_run_config(out_dir, learners, "rhos=[0,500,900]", "seeds=[0,1]", *extra)
    return run_config(cfg)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("one_process")
    return out, _run(out)


def test_two_processes_write_the_files_of_one(reference, tmp_path, caplog):
    out, whole = reference
    with caplog.at_level(logging.INFO, logger="torchroute.run.jobs"):
        parallel = _run(tmp_path, LEARNERS, "jobs=2")
    threads = threads_per_job(2)
    assert f"4 learners in 2 processes of {threads} intra-op thread(s) each" in caplog.text
    pd.testing.assert_frame_equal(parallel, whole, check_exact=True)
    for name in ("results.csv", "curves.csv"):
        pd.testing.assert_frame_equal(
            pd.read_csv(tmp_path / name), pd.read_csv(out / name), check_exact=True
        )
    for learner in LEARNERS:
        for name in ("summary.csv", "curve.csv", "fingerprint.json"):
            left, right = tmp_path / "runs" / learner / name, out / "runs" / learner / name
            assert left.read_bytes() == right.read_bytes(), (learner, name)
        ours = load_checkpoint(tmp_path / "checkpoints" / f"{learner}.pt")["learner"]
        theirs = load_checkpoint(out / "checkpoints" / f"{learner}.pt")["learner"]
        assert ours.keys() == theirs.keys()
        for key, value in theirs.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(ours[key], value), (learner, key)


def test_a_failing_learner_is_raised_and_the_others_keep_their_results(tmp_path, caplog):
    learners = {
        "lints": LEARNERS["lints"],
        "broken": _node(f"{__name__}.RaisingLearner.from_problem"),
        "squarecb": LEARNERS["squarecb"],
    }
    logs = caplog.at_level(logging.INFO, logger="torchroute.run.jobs")
    with logs, pytest.raises(ValueError, match="planted failure in update"):
        _run(tmp_path, learners, "jobs=2")
    assert "broken failed (planted failure in update); waiting for" in caplog.text
    assert (tmp_path / "runs" / "lints" / "summary.csv").is_file()  # ran beside it, kept
    assert not (tmp_path / "runs" / "broken").exists()
    assert not (tmp_path / "results.csv").exists()


@pytest.mark.slow  # spawns two workers (about 15-20 s on 2 busy cores)
def test_a_worker_that_dies_is_a_one_line_error_naming_the_unfinished(tmp_path):
    learners = {"dies": _node(f"{__name__}.DyingLearner.from_problem")}
    learners["lints"] = LEARNERS["lints"]
    with pytest.raises(ChildProcessError, match=r"jobs=2: a worker process died before \["):
        _run(tmp_path, learners, "jobs=2")
    assert not (tmp_path / "results.csv").exists()


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "two", "true"])
def test_bad_jobs_are_one_line_errors(tmp_path, value):
    with pytest.raises(ConfigError, match=r"jobs must be an integer >= 1, got"):
        _run(tmp_path, LEARNERS, f"jobs={value}")
    assert not tmp_path.joinpath("config.yaml").exists()


def test_jobs_do_not_go_with_torchrun(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigError, match=r"jobs=2 with torchrun \(WORLD_SIZE=2\)"):
        _run(tmp_path, LEARNERS, "jobs=2", "rng=per_trial")


def test_threads_are_shared_out_between_the_jobs():
    assert threads_per_job(2, threads=2) == 1
    assert threads_per_job(2, threads=16) == 8
    assert threads_per_job(3, threads=16) == 5
    assert threads_per_job(4, threads=2) == 1  # never below one


@pytest.mark.slow  # spawns two workers (about 15-20 s on 2 busy cores)
def test_workers_split_into_chunks_and_log_decisions_as_one_process(tmp_path, caplog):
    """``jobs`` beside ``trial_chunk`` and ``log_decisions``: the same files and logs."""
    learners = {name: LEARNERS[name] for name in ("lints", "squarecb")}
    extra = ("rng=per_trial", "trial_chunk=4", "log_decisions=true")
    one, two = tmp_path / "one", tmp_path / "two"
    _run(one, learners, *extra)
    with caplog.at_level(logging.INFO, logger="torchroute.run.jobs"):
        _run(two, learners, *extra, "jobs=2")
    assert "2 learners in 2 processes" in caplog.text
    logs = sorted(p.relative_to(one) for p in (one / "decisions").rglob("*") if p.is_file())
    assert len(logs) == 2 * 6  # one log per learner and trial
    for path in [*logs, "results.csv", "curves.csv"]:
        assert (one / path).read_bytes() == (two / path).read_bytes(), path
    checkpoints = sorted(p.name for p in (two / "checkpoints").iterdir())
    assert checkpoints == sorted(f"{n}.chunk{c}.pt" for n in learners for c in (0, 1))


def test_one_learner_left_runs_here_as_in_one_process(reference, tmp_path):
    """With ``jobs=2`` but a single learner to run no worker starts; the calling process
    builds it again (it kept none while checking) and writes what one process writes."""
    out, _ = reference
    _run(tmp_path, {"lints": LEARNERS["lints"]}, "jobs=2")
    for name in ("summary.csv", "curve.csv"):
        ours, theirs = tmp_path / "runs" / "lints" / name, out / "runs" / "lints" / name
        assert ours.read_bytes() == theirs.read_bytes(), name


class ThreadsAtBuild(EpsilonGreedy):
    """Epsilon-greedy that records torch's intra-op threads each time it is built."""

    seen: ClassVar[list[int]] = []

    @classmethod
    def from_problem(cls, problem, **hparams):
        cls.seen.append(torch.get_num_threads())
        return super().from_problem(problem, **hparams)


def test_a_resumed_learner_left_alone_runs_with_a_workers_threads(tmp_path):
    """``jobs=2`` and a resume that leaves one learner to run: it runs in this process, built
    and run with a worker's intra-op threads (``threads // jobs``), as it would have been
    in the uninterrupted run, not with this process's."""
    import shutil

    learners = {
        "lints": LEARNERS["lints"],
        "recorder": _node("tests.test_jobs.ThreadsAtBuild.from_problem"),
    }
    before = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        _run(tmp_path, learners)  # jobs=1: both run here, each with 4 threads
        assert ThreadsAtBuild.seen[-1] == 4
        shutil.rmtree(tmp_path / "runs" / "recorder")  # it runs again, lints is reused
        ThreadsAtBuild.seen.clear()
        _run(tmp_path, learners, "jobs=2", f"resume={tmp_path / 'checkpoints' / 'recorder.pt'}")
        # checked here with this process's threads, then built to run with a worker's
        assert ThreadsAtBuild.seen == [4, threads_per_job(2, 4)]
        assert torch.get_num_threads() == 4  # restored
    finally:
        torch.set_num_threads(before)


def _record_pid_and_wait(folder: str, name: str) -> None:
    """A worker's call: write its pid to ``folder/name.pid``, then wait far longer than
    any test (a learner still running when its parent is killed)."""
    path = os.path.join(folder, f"{name}.pid")
    with open(path + ".part", "w") as handle:
        handle.write(str(os.getpid()))
    os.replace(path + ".part", path)
    time.sleep(600)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX parent-death test")
def test_workers_exit_when_their_parent_is_killed(tmp_path):
    """A parent killed by SIGTERM (no time to shut its pool down) leaves no worker behind:
    its worker, busy in a call, is gone within a few checks of its parent's end (one worker:
    each starts alike, and one costs half the start-up of two)."""
    script = (
        "import sys\n"
        "from torchroute.run.jobs import map_in_processes\n"
        "from tests.test_jobs import _record_pid_and_wait\n"
        f"map_in_processes(_record_pid_and_wait, {str(tmp_path)!r}, ['a'], 1)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=root, env=env)
    try:
        deadline = time.monotonic() + 120
        pids = []
        while time.monotonic() < deadline and not pids:
            pids = [int(p.read_text()) for p in sorted(tmp_path.glob("*.pid"))]
            time.sleep(0.2)
        assert len(pids) == 1, "the worker did not start"
        assert all(_alive(pid) for pid in pids)
        parent.send_signal(signal.SIGTERM)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 15 * PARENT_CHECK_S
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in pids), "a worker outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        for pid_file in tmp_path.glob("*.pid"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
