"""``torchroute gateway`` refuses a start in one line, exit 2, before it writes, creates or
deletes anything; one state is served by one process; a generated key is never printed."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import LINUCB_NODE, tiny_run_config
from torchroute.cli import main
from torchroute.gateway.main import TOKEN_ENV
from torchroute.run import run_config
from torchroute.run.folder import RunFolder

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "a-long-enough-gateway-key-0123456789"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A real simulate run (rhos 0 and 100, seed 0) on the test table, no encoder."""
    out = tmp_path_factory.mktemp("gateway-run") / "run"
    run_config(tiny_run_config(out, {"linucb": LINUCB_NODE}))
    return out


@pytest.fixture(autouse=True)
def no_env_token(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)


def _backends(path: Path, run_dir: Path, drop: int = 0) -> Path:
    """A backends file with one entry per model of the run (the last ``drop`` left out)."""
    names = list(RunFolder(run_dir).problem.arm_names)
    names = names[: len(names) - drop]
    entry = {"base_url": "http://127.0.0.1:9/v1", "input_per_mtok": 1.0, "output_per_mtok": 1.0}
    models = {name: {**entry, "model": name} for name in names}
    path.write_text(yaml.safe_dump({"models": models}))
    return path


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` with its bytes (``None``: a folder)."""
    if not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
        for p in sorted(folder.rglob("*"))
    }


def _refused(argv: list[str], capsys, *needles: str) -> str:
    assert main(["gateway", *argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("torchroute gateway: error: ") and "\n" not in err, err
    assert "Traceback" not in captured.out + captured.err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def test_insecure_with_any_host_is_refused_as_serve_refuses_it(run_dir, tmp_path, capsys):
    backends = _backends(tmp_path / "backends.yaml", run_dir)
    base = [str(run_dir), "--backends", str(backends), "--port", "0"]
    _refused([*base, "--insecure-no-auth", "--allowed-hosts", "*"], capsys, "'*'", "--token")
    _refused([*base, "--allowed-hosts", "*"], capsys, "'*'", "needs a token of your own")
    _refused([*base, "--allowed-hosts", " , "], capsys, "--allowed-hosts", "expected")
    _refused([*base, "--host", "0.0.0.0"], capsys, "--allowed-hosts", "every interface")
    _refused([*base, "--insecure-no-auth", "--token", TOKEN], capsys, "contradicts", "--token")
    assert not (run_dir / "gateway").exists()


def test_every_message_names_the_users_flag(run_dir, tmp_path, capsys):
    backends = _backends(tmp_path / "backends.yaml", run_dir)
    base = [str(run_dir), "--backends", str(backends), "--port", "0", "--insecure-no-auth"]
    _refused([*base, "--max-body-bytes", "0"], capsys, "--max-body-bytes must be an integer")
    _refused([*base, "--max-prompt-chars", "0"], capsys, "--max-prompt-chars must be")
    _refused([*base, "--explore", "2"], capsys, "--explore must be a probability")
    _refused([*base, "--pending-ttl", "nan"], capsys, "--pending-ttl must be")
    _refused([*base, "--also-rho", "7"], capsys, "--also-rho 7 is not in the run's rhos")
    _refused([*base, "--rho", "7"], capsys, "--rho 7 is not in the run's rhos")
    _refused([*base, "--also-rho", "0"], capsys, "--also-rho repeats")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    _refused([*base, "--state-dir", str(blocker)], capsys, "--state-dir", "is a file")
    folder = tmp_path / "folder"
    folder.mkdir()
    _refused(
        [str(run_dir), "--backends", str(folder), "--insecure-no-auth"],
        capsys,
        f"--backends {folder} is a folder; expected a YAML file",
    )
    _refused([*base[:-1], "--keys", str(folder)], capsys, f"--keys {folder} is a folder")
    _refused([*base[:-1], "--keys", str(tmp_path / "none.yaml")], capsys, "--keys", "no such")
    state = tmp_path / "states"
    (state / "router_rho0.pt").mkdir(parents=True)
    _refused([*base, "--state-dir", str(state)], capsys, "--state-dir", "is a folder")
    (state / "router_rho0.pt").rmdir()
    (state / "gateway.token").mkdir()
    _refused([*base[:-1], "--state-dir", str(state)], capsys, "--state-dir", "token file")
    assert _tree(state) == {"gateway.token": None}
    assert not (run_dir / "gateway").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_refused_fresh_start_leaves_the_state_byte_identical(run_dir, tmp_path, capsys):
    states = tmp_path / "states"
    states.mkdir()
    for name in ("router_rho0.pt", "router_rho0.sqlite", "router_rho100.sqlite"):
        (states / name).write_bytes(b"routes, attempts, feedback and spend of " + name.encode())
    before = _tree(states)
    backends = _backends(tmp_path / "backends.yaml", run_dir)
    base = [str(run_dir), "--backends", str(backends), "--insecure-no-auth"]
    fresh = ["--state-dir", str(states), "--fresh", "--overwrite-state", "--also-rho", "100"]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        _refused([*base, *fresh, "--port", str(port)], capsys, f"--port {port} is in use")
    assert _tree(states) == before
    free = ["--port", str(_free_port())]
    _refused([*base, *fresh, *free, "--also-rho", "50"], capsys, "--also-rho 50")
    assert _tree(states) == before
    short = _backends(tmp_path / "short.yaml", run_dir, drop=1)
    _refused([*base[:2], str(short), *base[3:], *fresh, *free], capsys, "has no backend")
    assert _tree(states) == before
    # a refused start in the run's default state folder creates no folder
    _refused([*base[:2], str(short), *base[3:], *free], capsys, "has no backend")
    assert not (run_dir / "gateway").exists()


def _start(argv: list[str], tmp_path: Path, tag: str) -> tuple[subprocess.Popen, Path, Path]:
    out, err = tmp_path / f"{tag}.out", tmp_path / f"{tag}.err"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop(TOKEN_ENV, None)
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "torchroute", *argv],
            cwd=ROOT,
            env=env,
            stdout=stdout,
            stderr=stderr,
        )
    return proc, out, err


def _wait_for(url: str, proc: subprocess.Popen, err: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, err.read_text()
        assert time.monotonic() < deadline, "no answer in 120 s"
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.TransportError:
            time.sleep(0.2)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.slow  # two processes started: ~15 s on two cores
def test_one_state_one_process_and_the_generated_key_is_never_printed(run_dir, tmp_path):
    states = tmp_path / "states"
    backends = _backends(tmp_path / "backends.yaml", run_dir)
    port = _free_port()
    argv = ["gateway", str(run_dir), "--backends", str(backends), "--state-dir", str(states)]
    gateway, out, err = _start([*argv, "--port", str(port)], tmp_path, "gateway")
    try:
        _wait_for(f"http://127.0.0.1:{port}/health", gateway, err)
        key_file = states / "gateway.token"
        key = key_file.read_text().strip()
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        models = f"http://127.0.0.1:{port}/v1/models"
        assert httpx.get(models, headers={"authorization": f"Bearer {key}"}).status_code == 200
        assert httpx.get(models).status_code == 401
        state = states / "router_rho0.pt"
        serve = [str(run_dir), "--state", str(state), "--insecure-no-auth", "--port", "0"]
        before = _tree(states)
        second, _, second_err = _start(["serve", *serve, "--no-encoder"], tmp_path, "serve")
        try:
            assert second.wait(timeout=120) == 2
        finally:
            _stop(second)
        message = second_err.read_text().strip()
        assert "\n" not in message and "Traceback" not in message, message
        assert "torchroute serve: error: --state" in message
        assert f"in use by another process (pid {gateway.pid})" in message
        assert str(states) in message
        assert _tree(states) == before  # the running gateway's state untouched
    finally:
        _stop(gateway)
    printed = out.read_text() + err.read_text()
    assert key not in printed
    assert str(key_file) in out.read_text()
    # stopped: the state is free again, and the same key is kept for the next start
    gateway, out, err = _start([*argv, "--port", str(port)], tmp_path, "again")
    try:
        _wait_for(f"http://127.0.0.1:{port}/health", gateway, err)
        assert key_file.read_text().strip() == key
    finally:
        _stop(gateway)
    assert key not in out.read_text() + err.read_text()


def test_a_budget_is_checked_and_refused_for_a_utility_learner_before_writing(
    run_dir, tmp_path, capsys
):
    backends = _backends(tmp_path / "backends.yaml", run_dir)
    state = tmp_path / "states"
    base = [str(run_dir), "--backends", str(backends), "--port", "0", "--insecure-no-auth"]
    base += ["--state-dir", str(state)]
    _refused([*base, "--budget", "-1"], capsys, "--budget must be a mean cost per request > 0")
    _refused([*base, "--budget-eta", "0.1"], capsys, "--budget-eta goes with --budget")
    _refused([*base, "--budget", "0.001"], capsys, "--budget: LinUCB learns the utility at rho=0")
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"keys": {"carol": {"sha256": "a" * 64, "budget": 0.001}}}))
    _refused(
        [*base[:-3], "--state-dir", str(state), "--keys", str(keys)],
        capsys,
        "the budget of key 'carol': LinUCB learns the utility",
    )
    assert not state.exists()
