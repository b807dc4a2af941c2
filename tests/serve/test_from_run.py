"""A router built from a simulate out_dir: the chosen trial, the features, missing files."""

from __future__ import annotations

import numpy as np
import pandas as pd
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


def _residual_run(out, rule: dict, *overrides: str):
    """A residual LinUCB on a kNN router with ``lam`` chosen on validation, run."""
    knn = {"_target_": "torchroute.learners.anchors.KNNScoreRouter.from_problem", "k": 3}
    node = {
        "_target_": "torchroute.learners.residual.ResidualLinUCB.from_problem",
        "_partial_": True,
        "base": {**knn, "_partial_": True},
        "lam": [0.01, 100.0],
    }
    cfg = tiny_run_config(out, {"r": node}, *overrides)
    cfg.choose_on_validation = OmegaConf.create(rule)
    run_config(cfg)


def _saved_trial(payload: dict, trial: int) -> dict:
    """The checkpoint entries of ``trial``, found by hand: a plain learner's rows, or the
    rows of the group whose ``index_<g>`` lists the trial."""
    state = payload["learner"]
    if payload["learner_class"] != "TrialGroups":
        return {k: v[trial] for k, v in state.items() if v.ndim}
    for g in range(len([k for k in state if k.startswith("index_")])):
        index = state[f"index_{g}"].tolist()
        if trial in index:
            prefix = f"groups.{g}."
            own = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
            return {k: v[index.index(trial)] for k, v in own.items() if v.ndim}
    raise AssertionError(f"no group holds trial {trial}")


@pytest.mark.parametrize(
    ("rule", "rhos", "groups"),
    [
        # per regime, report_regimes groups the choices and is part of what the checkpoints
        # store: one choice here, a plain checkpoint
        ({"per": "regime"}, [0, 100], False),
        # per rho: at rho 1e5 every utility clips to 0, a tie that keeps the first-listed
        # lam (0.01), and rho 0 chose otherwise: a group checkpoint
        ({}, [0, 100000], True),
    ],
)
def test_a_trial_is_served_with_the_values_it_chose_on_validation(tmp_path, rule, rhos, groups):
    out = tmp_path / "run"
    _residual_run(out, rule, "report_regimes=[50,80]", f"rhos={rhos}", "seeds=[0,1]")
    results = pd.read_csv(out / "results.csv")
    payload = load_checkpoint(out / "checkpoints" / "r.pt")
    assert (payload["learner_class"] == "TrialGroups") == groups
    trials = [(rho, seed) for rho in rhos for seed in (0, 1)]
    for trial, (rho, seed) in enumerate(trials):
        router = load_router(out, rho=rho, seed=seed, state_path=tmp_path / f"{trial}.pt")
        row = results[(results["rho"] == rho) & (results["seed"] == seed)]
        assert router.learner.lam == float(row["chosen_lam"].iloc[0])
        state = router.learner.state_dict()
        for key, value in _saved_trial(payload, trial).items():
            assert torch.equal(state[key][0], value), key


def test_played_state_reads_the_group_that_played_the_trial(tmp_path):
    from torchroute.learners import LinUCB
    from torchroute.learners.trial_groups import TrialGroups
    from torchroute.run.chosen_trial import played_state

    gen = torch.Generator().manual_seed(0)
    groups = [LinUCB(2, 3, 4), LinUCB(1, 3, 4)]
    for learner in groups:
        learner.theta = torch.randn(learner.theta.shape, generator=gen)
    both = TrialGroups(groups, [torch.tensor([2, 0]), torch.tensor([1])])
    payload = {"learner": both.state_dict(), "learner_class": "TrialGroups"}
    # trial 0 is the second trial of group 0, trial 1 the only one of group 1
    group, position, size = played_state(payload, 0, 3, tmp_path, "LinUCB")
    assert (position, size, group["learner_class"]) == (1, 2, "LinUCB")
    assert torch.equal(group["learner"]["theta"], groups[0].theta)
    group, position, size = played_state(payload, 1, 3, tmp_path, "LinUCB")
    assert (position, size) == (0, 1) and torch.equal(group["learner"]["theta"], groups[1].theta)
    plain = {"learner": groups[0].state_dict(), "learner_class": "LinUCB"}
    assert played_state(plain, 1, 2, tmp_path, "LinUCB") == (plain, 1, 2)
    with pytest.raises(CheckpointError, match="no group of its 2 holds trial 3"):
        played_state(payload, 3, 4, tmp_path, "LinUCB")


def test_a_missing_choice_table_is_a_one_line_error_naming_it(tmp_path):
    out = tmp_path / "run"
    _residual_run(out, {})
    (out / "runs" / "r" / "choice_on_validation.csv").unlink()
    with pytest.raises(ConfigError, match=r"runs/r/choice_on_validation.csv: the values r chose"):
        load_router(out, rho=0, seed=0, state_path=tmp_path / "s.pt")


def test_the_refit_reference_is_not_read_back(tmp_path):
    out = tmp_path / "run"
    knn = {"_target_": "torchroute.learners.anchors.KNNScoreRouter.from_problem", "k": 3}
    node = {
        "_target_": "torchroute.learners.refit.StaticRefit.from_problem",
        "_partial_": True,
        "base": {**knn, "_partial_": True},
    }
    run_config(tiny_run_config(out, {"refit": node}))
    with pytest.raises(ConfigError, match=r"learners.refit \(StaticRefit\) is refitted on the"):
        load_router(out, state_path=tmp_path / "s.pt")
