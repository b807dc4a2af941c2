"""What a run folder holds is checked before use: schema, then values.

A swapped file, an edited arm name or price, a NaN in a learner's state or in a serve
state, a feature map of another size: each is one line naming the file (exit 2 through
the command line), and nothing is written into the folder.
"""

from __future__ import annotations

import re
import shutil

import pytest
import torch

from tests.conftest import LINUCB_NODE, tiny_run_config
from torchroute.checkpoint import CheckpointError
from torchroute.cli import main
from torchroute.learners import LinUCB
from torchroute.run import run_config
from torchroute.serve import Router, load_router


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    run_config(tiny_run_config(out, {"linucb": LINUCB_NODE}, "rhos=[0]", "log_every=10"))
    return out


def _files(folder):
    return sorted((p.relative_to(folder), p.read_bytes()) for p in folder.rglob("*") if p.is_file())


def _edit(path, change):
    payload = torch.load(path, weights_only=True)
    change(payload)
    torch.save(payload, path)


def _problem(change):
    return lambda folder: _edit(folder / "problem.pt", lambda p: change(p["problem"]))


def _learner(change):
    return lambda folder: _edit(
        folder / "checkpoints" / "linucb.pt", lambda p: change(p["learner"])
    )


def _features(change):
    return lambda folder: _edit(folder / "features.pt", lambda p: change(p["features"]))


def _swap(source, target):
    return lambda folder: shutil.copy(folder / source, folder / target)


def _set(key, value):
    def change(state):
        state[key] = value

    return change


def _nan(state):
    state["theta"][0, 0, 0] = float("nan")


CASES = [
    (_swap("checkpoints/linucb.pt", "problem.pt"), "problem.pt is not a saved problem"),
    (_swap("problem.pt", "checkpoints/linucb.pt"), "linucb.pt is not a learner checkpoint"),
    (_swap("problem.pt", "features.pt"), "features.pt is not a feature map"),
    (_problem(_set("arm_names", ["a", "A", "c", "d"])), "arm name 'A' repeats 'a'"),
    (_problem(_set("arm_names", ["<b>x</b>", "b", "c", "d"])), "arm name '<b>x</b>' may only"),
    (_problem(_set("prices", torch.tensor([1.0, -1.0, 0.0, 0.0]))), "prices must be finite"),
    (_problem(_set("prices", torch.tensor([1.0, float("inf"), 0, 0]))), "prices must be finite"),
    (_problem(_set("num_trials", 3)), "holds 3 trials but the run's config.yaml has 1"),
    (_problem(_set("rho", torch.tensor([float("nan")]))), "rho must be finite"),
    (_learner(_nan), "learner state.theta holds NaN or infinite values"),
    (_features(_set("components", torch.zeros(3, 5))), "features.pt: mean and components"),
    (_features(_set("source", "evil")), "source must be one of"),
]


@pytest.mark.parametrize(("edit", "message"), CASES)
def test_a_bad_file_is_one_line_and_nothing_is_written(run_dir, tmp_path, capsys, edit, message):
    folder = tmp_path / "run"
    shutil.copytree(run_dir, folder)
    edit(folder)
    before = _files(folder)
    with pytest.raises(CheckpointError, match=re.escape(message)):
        load_router(folder, state_path=tmp_path / "state.pt")
    assert main(["serve", str(folder), "--port", "0", "--insecure-no-auth"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("torchroute serve: error: ") and "\n" not in err, err
    assert message in err, err
    assert _files(folder) == before


def _state(tmp_path, change):
    path = tmp_path / "router.pt"
    router = Router.fresh(
        LinUCB.from_problem, ["a", "b"], rho=0.0, dim=2, state_path=path, dtype=torch.float64
    )
    (decision,) = router.route(embeddings=[[1.0, 0.0]])
    router.feedback([decision["request_id"]], [0.5], [0.0])
    router.close()
    _edit(path, change)
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p["learner"]["theta"].fill_(float("nan")), "learner state.theta holds NaN"),
        (lambda p: p.update(arm_names=["a", "a"]), "arm name 'a' repeats 'a'"),
        (lambda p: p.update(prices=[1.0, float("inf")]), "prices must be 2 finite numbers"),
        (lambda p: p.update(prices=[1.0, -2.0]), "prices must be 2 finite numbers"),
    ],
)
def test_a_bad_serve_state_is_refused_not_served(tmp_path, change, message):
    path = _state(tmp_path, change)
    with pytest.raises(CheckpointError, match=message):
        Router.fresh(
            LinUCB.from_problem, ["a", "b"], rho=0.0, dim=2, state_path=path, dtype=torch.float64
        )
