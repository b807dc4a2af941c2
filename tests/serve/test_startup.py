"""``torchroute serve`` refuses bad flags in one line, exit 2, before anything heavy loads."""

from __future__ import annotations

import shutil
import socket

import pandas as pd
import pytest
import torch
import yaml
from omegaconf import OmegaConf

import torchroute.serve.from_run
from tests.conftest import LINUCB_NODE, tiny_run_config
from torchroute.cli import main
from torchroute.configs_path import compose_config
from torchroute.learners import LinUCB
from torchroute.run import run_config
from torchroute.serve import Router
from torchroute.serve.security import TOKEN_ENV

TOKEN = "a-long-enough-token-0123456789"


class Reached(Exception):
    """Raised by the stand-in loader: the checks passed and the router would load now."""


@pytest.fixture(autouse=True)
def no_loading(monkeypatch):
    """Every refusal must come before the run (and its encoder) loads: loading fails loudly."""
    calls = []

    def loader(*args, **kwargs):
        calls.append(kwargs)
        raise Reached(kwargs)

    monkeypatch.setattr(torchroute.serve.from_run, "load_parts", loader)
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    return calls


@pytest.fixture
def run_dir(tmp_path):
    """A run folder as simulate leaves it (config.yaml, checkpoints/), two learners."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    config = OmegaConf.to_container(compose_config("simulate", ["rhos=[0,100]", "seeds=[0,1]"]))
    config["learners"] = {
        "linucb": {"_target_": "torchroute.learners.LinUCB.from_problem"},
        "lints": {"_target_": "torchroute.learners.LinTS.from_problem"},
    }
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    for name in ("linucb", "lints"):
        (run / "checkpoints" / f"{name}.pt").write_bytes(b"")
    return run


def _refused(argv, capsys, *needles):
    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("torchroute serve: error: ") and "\n" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def test_port_out_of_range_and_port_in_use(run_dir, capsys):
    base = [str(run_dir), "--learner", "linucb"]
    _refused([*base, "--port", "70000"], capsys, "--port must be in 0..65535, got 70000")
    _refused([*base, "--port", "-1"], capsys, "--port")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        _refused([*base, "--port", str(port)], capsys, f"--port {port} is in use")


def test_token_rules_and_the_bind_address(run_dir, capsys, monkeypatch):
    base = [str(run_dir), "--learner", "linucb", "--port", "0"]
    _refused([*base, "--host", "0.0.0.0"], capsys, "--allowed-hosts", "every")
    _refused([*base, "--host", "0.0.0.0", "--insecure-no-auth"], capsys, "only on loopback")
    _refused([*base, "--insecure-no-auth", "--token", TOKEN], capsys, "contradicts", "--token")
    _refused([*base, "--allowed-hosts", "*"], capsys, "'*'", "needs a token of your own")
    _refused([*base, "--allowed-hosts", "*", "--insecure-no-auth"], capsys, "needs a token")
    _refused([*base, "--token", "short"], capsys, "--token must be at least 16")
    _refused([*base, "--token", "x" * 10 + " " + "y" * 10], capsys, "without spaces")
    _refused([*base, "--host", "0.0.0.0", "--token", TOKEN], capsys, "--allowed-hosts", "every")
    monkeypatch.setenv(TOKEN_ENV, "short")
    _refused(base, capsys, f"{TOKEN_ENV} must be at least 16")


def test_the_learner_rho_and_seed_are_checked_with_the_right_flag_names(run_dir, capsys):
    base = [str(run_dir), "--port", "0"]
    _refused(base, capsys, "choose one with --learner", "'linucb'", "'lints'")
    _refused([*base, "--learner", "knn"], capsys, "--learner 'knn' is not in the run")
    _refused([*base, "--learner", "lints", "--rho", "50"], capsys, "--rho 50 is not in")
    _refused([*base, "--learner", "lints", "--seed", "7"], capsys, "--seed 7 is not in")
    _refused([str(run_dir / "nope"), "--port", "0"], capsys, "config.yaml not found")


def test_state_flags(run_dir, tmp_path, capsys, no_loading):
    base = [str(run_dir), "--learner", "linucb", "--port", "0"]
    folder = tmp_path / "folder"
    folder.mkdir()
    _refused([*base, "--state", str(folder)], capsys, "is a folder", "router.pt")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    _refused([*base, "--state", str(blocker / "router.pt")], capsys, "cannot write", "--state")
    _refused([*base, "--overwrite-state"], capsys, "--overwrite-state only goes with --fresh")
    for flag, value in (("--max-batch", "0"), ("--pending-ttl", "0"), ("--max-pending", "0")):
        _refused([*base, flag, value], capsys, flag)
    state = tmp_path / "state" / "router.pt"
    router = Router.fresh(LinUCB.from_problem, ["a", "b"], rho=0.0, dim=2, state_path=state)
    router.route(embeddings=[[1.0, 0.0]])
    router.close()
    _refused([*base, "--state", str(state), "--fresh"], capsys, "--fresh but", "--overwrite-state")
    assert (state.with_suffix(".sqlite")).is_file()  # nothing discarded
    stale = state.parent / f".{state.name}.x1.tmp"
    stale.write_bytes(b"")  # left by a kill -9 during a checkpoint write
    with pytest.raises(Reached):  # the router loads before anything of the state is touched
        main(["serve", *base, "--state", str(state), "--fresh", "--overwrite-state"])
    assert state.with_suffix(".sqlite").exists() and stale.exists()
    assert no_loading[-1]["fresh"] is True


def test_a_router_started_fresh_resumes_fresh(run_dir, tmp_path, no_loading):
    state = tmp_path / "router.pt"
    router = Router.fresh(LinUCB.from_problem, ["a", "b"], rho=0.0, dim=2, state_path=state)
    router.log.set_info("origin", "fresh")
    router.close()
    (run_dir / "checkpoints" / "linucb.pt").unlink()
    with pytest.raises(Reached):
        main(["serve", str(run_dir), "--learner", "linucb", "--port", "0", "--state", str(state)])
    assert no_loading[-1]["fresh"] is True


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("real")
    run_config(tiny_run_config(out, {"linucb": LINUCB_NODE}))
    return out


def test_a_checkpoint_of_another_configuration_is_refused(real_run, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(real_run, other)
    config = yaml.safe_load((other / "config.yaml").read_text())
    config["loop_seed"] = 7  # the run's config.yaml says another stream than the checkpoint
    (other / "config.yaml").write_text(yaml.safe_dump(config))
    _refused([str(other), "--port", "0"], capsys, "another configuration", "loop_seed")
    config["rhos"] = [0]  # one trial, where problem.pt holds two
    (other / "config.yaml").write_text(yaml.safe_dump(config))
    _refused([str(other), "--port", "0"], capsys, "problem.pt: holds 2 trials", "another run")
    with pytest.raises(Reached):  # the run's own checkpoint passes
        main(["serve", str(real_run), "--port", "0", "--rho", "100"])


def test_export_log_writes_the_table_without_serving(real_run, tmp_path, capsys):
    state = tmp_path / "router.pt"
    router = Router.fresh(
        LinUCB.from_problem, ["a", "b"], rho=100.0, dim=2, dtype=torch.float64, state_path=state
    )
    decisions = router.route(embeddings=[[1.0, 0.0], [0.0, 1.0]])
    router.feedback([decisions[0]["request_id"]], [0.75], [0.001])
    router.close()
    out = tmp_path / "out.parquet"
    argv = ["serve", str(real_run), "--rho", "100", "--state", str(state), "--export-log"]
    assert main([*argv, str(out)]) == 0
    frame = pd.read_parquet(out)
    assert list(frame["request_id"]) == [d["request_id"] for d in decisions]
    assert frame["score"].tolist()[0] == 0.75 and pd.isna(frame["score"].tolist()[1])
    assert "wrote" in capsys.readouterr().out
    missing = str(tmp_path / "none.pt")
    _refused(
        [str(real_run), "--state", missing, "--export-log", str(out)], capsys, "no decision log"
    )


def test_a_token_file_others_can_read_or_a_bad_one_is_refused(run_dir, tmp_path, capsys):
    state = tmp_path / "router.pt"
    base = [str(run_dir), "--learner", "linucb", "--port", "0", "--fresh", "--state", str(state)]
    token = tmp_path / "router.pt.token"
    token.write_text("x" * 40 + "\n")
    token.chmod(0o644)
    _refused(base, capsys, "can be read by other users", "chmod 600")
    token.chmod(0o600)
    token.write_text("short\n")
    _refused(base, capsys, f"the token file {token} must be at least 16", "delete the file")
    assert token.read_text() == "short\n"  # left as it was


def test_router_flags_are_named_as_given(run_dir, capsys):
    base = [str(run_dir), "--learner", "linucb", "--port", "0", "--insecure-no-auth"]
    _refused([*base, "--explore", "2"], capsys, "--explore must be a probability in [0, 1]")
    _refused([*base, "--explore", "nan"], capsys, "--explore")
    _refused([*base, "--checkpoint-every", "0"], capsys, "--checkpoint-every must be")
    _refused([*base, "--max-body-bytes", "0"], capsys, "--max-body-bytes must be")
    _refused([*base, "--allowed-hosts", ","], capsys, "--allowed-hosts ','", "expected")


def test_an_ipv4_mapped_loopback_is_loopback(run_dir, capsys, no_loading):
    base = [str(run_dir), "--learner", "linucb", "--fresh", "--insecure-no-auth"]
    with pytest.raises(Reached):  # accepted: the router would load now
        main(["serve", *base, "--host", "::ffff:127.0.0.1", "--port", "0"])
    _refused([*base, "--host", "::ffff:10.0.0.5", "--port", "0"], capsys, "only on loopback")


def test_a_token_file_that_is_a_folder_is_refused_before_loading(run_dir, tmp_path, capsys):
    state = tmp_path / "states" / "router.pt"
    (tmp_path / "states" / "router.pt.token").mkdir(parents=True)
    base = [str(run_dir), "--learner", "linucb", "--port", "0", "--fresh", "--state", str(state)]
    _refused(base, capsys, "--state: the token file", "is a folder", "expected a file")
    assert [p.name for p in state.parent.iterdir()] == ["router.pt.token"]


def test_a_refused_fresh_start_leaves_the_state_byte_identical(
    run_dir, tmp_path, capsys, monkeypatch
):
    state = tmp_path / "state" / "router.pt"
    router = Router.fresh(LinUCB.from_problem, ["a", "b"], rho=0.0, dim=2, state_path=state)
    router.route(embeddings=[[1.0, 0.0]])
    router.close()
    before = {p.name: p.read_bytes() for p in state.parent.iterdir()}
    base = [str(run_dir), "--learner", "linucb", "--state", str(state), "--insecure-no-auth"]
    fresh = [*base, "--fresh", "--overwrite-state"]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        _refused([*fresh, "--port", str(port)], capsys, f"--port {port} is in use")
    _refused([*fresh, "--port", "0", "--rho", "50"], capsys, "--rho 50 is not in")
    _refused([*fresh, "--port", "0", "--max-pending", "0"], capsys, "--max-pending")
    assert {p.name: p.read_bytes() for p in state.parent.iterdir()} == before
    monkeypatch.undo()  # the real loader: this run cannot load (it has no problem.pt)
    _refused([*fresh, "--port", "0"], capsys, "problem.pt not found")
    assert {p.name: p.read_bytes() for p in state.parent.iterdir()} == before


def test_budget_flags_are_checked_before_loading(run_dir, capsys):
    base = [str(run_dir), "--learner", "linucb", "--port", "0", "--insecure-no-auth"]
    _refused([*base, "--budget", "0"], capsys, "--budget must be a mean cost per request > 0")
    _refused([*base, "--budget", "inf"], capsys, "--budget must be finite")
    _refused([*base, "--budget", "1", "--budget-eta", "-1"], capsys, "--budget-eta must be")
    _refused([*base, "--budget-eta", "0.1"], capsys, "--budget-eta goes with --budget")


def test_a_budget_for_a_utility_learner_is_refused_before_the_state_is_written(
    real_run, tmp_path, capsys, monkeypatch
):
    monkeypatch.undo()  # the real loader: the run's LinUCB is loaded, then refused
    state = tmp_path / "state" / "router.pt"
    argv = [str(real_run), "--port", "0", "--no-encoder", "--insecure-no-auth", "--fresh"]
    argv += ["--state", str(state), "--budget", "0.001"]
    _refused(argv, capsys, "--budget: LinUCB learns the utility at rho=0", "objective: quality")
    assert not state.parent.exists()
