"""A router built from a simulate out_dir: the chosen trial, the features, missing files."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import LINUCB_NODE, make_table, tiny_run_config
from torchroute.checkpoint import CheckpointError, load_checkpoint
from torchroute.cli import main
from torchroute.features import project_features
from torchroute.run import ConfigError, RunOptions, load_features, run_config
from torchroute.serve import FeatureMap, load_router


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    run_config(tiny_run_config(out, {"linucb": LINUCB_NODE}, "seeds=[0,1]", "log_every=10"))
    return out


def _copy_inputs(run_dir, copy):
    """The files a run was built from, without its checkpoints."""
    copy.mkdir()
    for name in ("config.yaml", "problem.pt", "features.pt"):
        (copy / name).write_bytes((run_dir / name).read_bytes())


def test_feature_map_reproduces_project_features():
    emb = torch.randn(40, 6, generator=torch.Generator().manual_seed(0))
    rows = np.arange(25)
    for pca_dim in (None, 4):
        expected = project_features(emb, rows, pca_dim)
        assert torch.equal(FeatureMap.fit(emb, rows, pca_dim)(emb[30:]), expected[30:])


def test_the_router_serves_the_chosen_trial_with_the_runs_features(run_dir, tmp_path):
    router = load_router(run_dir, rho=100, seed=1, state_path=tmp_path / "r.pt")
    state = load_checkpoint(run_dir / "checkpoints" / "linucb.pt")["learner"]
    # rho-major grid (0, 0), (0, 1), (100, 0), (100, 1): the trial is the fourth
    assert torch.equal(router.learner.a_inv[0], state["a_inv"][3])
    assert torch.equal(router.learner.theta[0], state["theta"][3])
    assert router.rho == 100.0 and router.arm_names == tuple(make_table().arm_names)
    _, feats = load_features(RunOptions.from_config(OmegaConf.load(run_dir / "config.yaml")))
    torch.testing.assert_close(router.features(make_table().embeddings), feats)
    decisions = router.route(embeddings=make_table().embeddings[:5])
    assert {d["model"] for d in decisions} <= set(router.arm_names)
    rounds = int(router.learner.rounds[0])
    router.feedback([d["request_id"] for d in decisions], [0.5] * 5, [1e-4] * 5)
    assert int(router.learner.rounds[0]) == rounds + 5


def test_unknown_trials_learners_and_missing_checkpoints_are_one_line_errors(run_dir, tmp_path):
    with pytest.raises(ConfigError, match=r"no trial with rho=50.0, seed=0"):
        load_router(run_dir, rho=50)
    with pytest.raises(ConfigError, match=r"learner 'knn' is not in the run"):
        load_router(run_dir, learner="knn")
    with pytest.raises(FileNotFoundError, match=r"config\.yaml"):
        load_router(tmp_path)
    copy = tmp_path / "copy"
    _copy_inputs(run_dir, copy)
    with pytest.raises(CheckpointError, match=r"linucb.pt does not exist"):
        load_router(copy)
    fresh = load_router(copy, fresh=True, state_path=tmp_path / "fresh.pt")
    torch.testing.assert_close(fresh.learner.theta, torch.zeros_like(fresh.learner.theta))
    # without the feature map the run cannot be served: said before the (missing)
    # checkpoint is looked for or a learner built
    (copy / "features.pt").unlink()
    with pytest.raises(ConfigError, match=r"serving needs a run on a routing table"):
        load_router(copy)


def test_serve_cli_reports_a_missing_checkpoint_in_one_line(run_dir, tmp_path, capsys):
    copy = tmp_path / "copy"
    _copy_inputs(run_dir, copy)
    assert main(["serve", str(copy), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("torchroute serve: error: checkpoint") and "\n" not in err
