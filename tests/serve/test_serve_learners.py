"""Every learner that simulates on a table can be served from its run folder.

Each test runs a small real ``simulate`` on a random table, serves one trial with
``load_router`` (the saved Problem, feature map and checkpoint; nothing rebuilt), and
checks the router against the run's own checkpoint or a hand-computed decision.
"""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import make_table, tiny_run_config
from torchroute.checkpoint import load_checkpoint, save_checkpoint
from torchroute.configs_path import config_dir
from torchroute.features import project_features
from torchroute.models import MultiHeadOracle, save_oracle
from torchroute.run import ConfigError, run_config
from torchroute.serve import load_router


def _run(out, learner: str, oracle=None, **params):
    """A small simulate run of one learner (its shipped config, ``params`` over it)."""
    extra = ["log_every=10", *([f"oracle_ckpt={oracle}"] if oracle is not None else [])]
    node = OmegaConf.load(config_dir() / "learner" / f"{learner}.yaml")
    run_config(tiny_run_config(out, {learner: OmegaConf.merge(node, params)}, *extra))
    return out


@pytest.fixture(scope="module")
def oracle_path(tmp_path_factory):
    table = make_table()
    torch.manual_seed(0)
    oracle = MultiHeadOracle(6, 4, feature_dim=5, hidden=8, arm_names=list(table.arm_names))
    return save_oracle(oracle.eval(), tmp_path_factory.mktemp("oracle") / "oracle.pt")


def _same_trial(router, run_dir, learner, trial):
    saved = load_checkpoint(run_dir / "checkpoints" / f"{learner}.pt")["learner"]
    mine = router.learner.state_dict()
    for key, value in saved.items():
        if isinstance(value, torch.Tensor) and value.shape == mine[key].shape:
            assert torch.equal(mine[key], value), key  # shared by the trials
        elif isinstance(value, torch.Tensor):
            assert torch.equal(mine[key], value[trial : trial + 1]), key


def test_neural_ucb_serves_its_checkpoint_and_learns_from_feedback(tmp_path):
    run_dir = _run(tmp_path / "run", "neural_ucb", hidden=8, capacity=16)
    router = load_router(run_dir, rho=100, seed=0, state_path=tmp_path / "r.pt")
    _same_trial(router, run_dir, "neural_ucb", 1)
    saved = load_checkpoint(run_dir / "checkpoints" / "neural_ucb.pt")["learner"]
    moments = router.learner._optim.state_dict()["state"]
    assert moments and torch.equal(
        moments[0]["exp_avg"], saved["_extra_state"]["state"][0]["exp_avg"][1:2]
    )
    before = {k: v.clone() for k, v in router.learner.params().items()}
    decisions = router.route(embeddings=make_table().embeddings[:8])
    ids = [d["request_id"] for d in decisions]
    assert router.feedback(ids, [0.9] * 8, [1e-4] * 8)["applied"] == ids
    after = router.learner.params()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_regressor_serves_the_oracles_argmax(tmp_path, oracle_path):
    run_dir = _run(tmp_path / "run", "regressor", oracle=oracle_path)
    router = load_router(run_dir, rho=100, seed=0, state_path=tmp_path / "r.pt")
    _same_trial(router, run_dir, "regressor", 1)
    emb = make_table().embeddings[:10]
    oracle = torch.load(oracle_path, weights_only=True)
    net = MultiHeadOracle(**oracle["config"])
    net.load_state_dict(oracle["state_dict"])
    with torch.no_grad():
        expected = (net.accuracy(emb) - 100 * net.cost(emb)).argmax(-1)
    got = [router.arm_names.index(d["model"]) for d in router.route(embeddings=emb)]
    assert got == expected.tolist()


def test_cabs_d_and_hpg_serve_the_trial_of_their_run(tmp_path, oracle_path):
    for learner, extra in (("cabs_d", {"oracle": oracle_path}), ("hpg", {})):
        run_dir = _run(tmp_path / learner, learner, **extra)
        router = load_router(run_dir, rho=100, seed=0, state_path=tmp_path / f"{learner}.pt")
        _same_trial(router, run_dir, learner, 1)
        decisions = router.route(embeddings=make_table().embeddings[:4])
        ids = [d["request_id"] for d in decisions]
        assert router.feedback(ids, [0.5] * 4, [1e-4] * 4)["applied"] == ids


def test_best_single_and_knn_keep_their_train_statistics_and_add_models(tmp_path):
    table = make_table()
    train = table.rows("train")
    for learner in ("best_single", "knn"):
        run_dir = _run(tmp_path / learner, learner)
        router = load_router(run_dir, rho=0, seed=0, state_path=tmp_path / f"{learner}.pt")
        if learner == "best_single":  # the arm with the best mean train score (rho = 0)
            best = int(table.scores[train].mean(0).argmax())
            assert {d["model"] for d in router.route(embeddings=table.embeddings[:5])} == {
                table.arm_names[best]
            }
        router.add_model("newcomer", 1e-4)
        assert router.arm_names[-1] == "newcomer"
        decisions = router.route(embeddings=table.embeddings[:5])
        assert {d["model"] for d in decisions} <= set(table.arm_names)  # no train data yet


def test_the_saved_features_are_the_runs(tmp_path):
    run_dir = _run(tmp_path / "run", "linucb")
    router = load_router(run_dir, state_path=tmp_path / "r.pt")
    table = make_table()
    expected = project_features(table.embeddings, table.rows("train"), 3)
    assert torch.equal(router.features(table.embeddings), expected)


def test_a_subset_run_of_an_older_format_is_refused_in_one_line(tmp_path):
    """A ``problem.pt`` that says ``SubsetProblem`` but holds no draws, costs or target box
    (written before subset runs were served) is refused before any learner is built."""
    run_dir = _run(tmp_path / "run", "linucb")
    payload = load_checkpoint(run_dir / "problem.pt")
    payload["problem"]["kind"] = "SubsetProblem"
    payload["problem"].pop("subset", None)
    save_checkpoint(run_dir / "problem.pt", {k: v for k, v in payload.items() if k != "format"})
    with pytest.raises(ConfigError, match=r"problem.pt: the saved problem of a subset run has no"):
        load_router(run_dir, state_path=tmp_path / "r.pt")
