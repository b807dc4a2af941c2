"""Subset learners served from a real ``simulate`` run on a routing table (best-of-M).

The run is ``omd_approachability`` and ``contextual_omd`` on the shipped ``table_subset``
env over a small table whose better models cost more (two query groups). Each test serves
one trial with ``load_router`` and checks it against the run's checkpoint, a brute-force
enumeration of the draws, or the learner's update rule written out by hand.
"""

from __future__ import annotations

import itertools
import json
import sqlite3

import pytest
import torch
from fastapi.testclient import TestClient
from omegaconf import OmegaConf

from tests.conftest import make_priced_table, tiny_run_config
from torchroute.checkpoint import load_checkpoint
from torchroute.configs_path import config_dir
from torchroute.run import run_config
from torchroute.serve import load_router
from torchroute.serve.app import create_app
from torchroute.serve.export import export_log
from torchroute.serve.log import log_path
from torchroute.serve.subset_router import SubsetRouter

LEARNERS = ("omd_approachability", "contextual_omd")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("subset") / "run"
    nodes = {name: OmegaConf.load(config_dir() / "learner" / f"{name}.yaml") for name in LEARNERS}
    cfg = tiny_run_config(out, nodes, "rhos=[0]", "seeds=[0,1]", "log_every=5", "dtype=float64")
    cfg.data = OmegaConf.create({"_target_": "tests.conftest.make_priced_table", "groups": 2})
    cfg.env = OmegaConf.load(config_dir() / "env" / "table_subset.yaml")
    run_config(cfg)
    return out


def _embeddings(n: int) -> torch.Tensor:
    return make_priced_table().embeddings[:n]


def _set_probability(q: list[float], called: set[int], m: int) -> float:
    """P(the distinct values of m i.i.d. draws from q are ``called``), by enumeration."""
    total = 0.0
    for draws in itertools.product(range(len(q)), repeat=m):
        if set(draws) == called:
            p = 1.0
            for i in draws:
                p *= q[i]
            total += p
    return total


def test_omd_serves_its_trial_with_the_propensity_of_the_set(run_dir, tmp_path):
    router = load_router(run_dir, "omd_approachability", seed=1, state_path=tmp_path / "r.pt")
    assert isinstance(router, SubsetRouter)
    saved = load_checkpoint(run_dir / "checkpoints" / "omd_approachability.pt")["learner"]
    assert torch.equal(router.learner.q, saved["q"][1:2])  # trial (rho=0, seed=1)
    assert torch.equal(router.learner.w, saved["w"][1:2])
    assert router.arm_names == tuple(make_priced_table().arm_names)
    q = saved["q"][1].tolist()
    decisions = router.route(embeddings=_embeddings(6))
    for d in decisions:
        assert len(d["draws"]) == 2 and d["models"] == list(dict.fromkeys(d["draws"]))
        assert list(d["probabilities"].values()) == pytest.approx(q, abs=1e-12)
        called = {router.arm_names.index(m) for m in d["models"]}
        assert d["propensity"] == pytest.approx(_set_probability(q, called, 2), abs=1e-12)


def test_omd_feedback_is_the_sets_outcome_and_updates_by_the_rule(run_dir, tmp_path):
    router = load_router(run_dir, "omd_approachability", seed=0, state_path=tmp_path / "r.pt")
    learner = router.learner
    assert learner._pending == 0  # the test split's 20 rounds: two full primal steps
    q, mean, grad = learner.q[0].clone(), learner.reward_mean[0].item(), learner.grad_sum[0]
    assert torch.equal(grad, torch.zeros_like(grad))
    (d,) = router.route(embeddings=_embeddings(1))
    counts = torch.zeros(4, dtype=torch.float64)
    for name in d["draws"]:
        counts[router.arm_names.index(name)] += 1
    report = router.feedback([d["request_id"]], [0.8], [0.002])
    assert report["applied"] == [d["request_id"]]
    # g_i = (r - b_bar) / q_i * #{j : a_j = i}, accumulated until the next primal step
    assert torch.allclose(learner.grad_sum[0], (0.8 - mean) / q * counts, atol=1e-12)
    assert learner.rounds[0].item() == saved_rounds(run_dir) + 1
    with pytest.raises(ValueError, match=r"scores must be the set's outcome in \[0, 1\]"):
        router.feedback([router.route(embeddings=_embeddings(1))[0]["request_id"]], [1.5], [0])
    with pytest.raises(ValueError, match="a subset router takes no models"):
        router.feedback([d["request_id"]], [0.5], [0.0], models=["arm0"])
    with pytest.raises(ValueError, match="a model cannot be added"):
        router.add_model("newcomer", 0.001)
    router.close()


def saved_rounds(run_dir) -> int:
    saved = load_checkpoint(run_dir / "checkpoints" / "omd_approachability.pt")["learner"]
    return int(saved["rounds"][0])


def test_the_log_keeps_the_sets_and_a_restart_replays_them(run_dir, tmp_path):
    state = tmp_path / "r.pt"
    router = load_router(run_dir, "omd_approachability", seed=0, state_path=state)
    decisions = router.route(embeddings=_embeddings(12))
    ids = [d["request_id"] for d in decisions]
    router.feedback(ids[:11], [0.5 + 0.04 * i for i in range(11)], [0.001] * 11)  # a QP step
    q_live = router.learner.q.clone()
    router.log.close()  # a crash: no checkpoint, the log holds everything
    again = load_router(run_dir, "omd_approachability", seed=0, state_path=state)
    assert torch.equal(again.learner.q, q_live)
    assert list(again.pending) == ids[11:]
    db = sqlite3.connect(log_path(state))
    rows = dict(db.execute("SELECT request_id, draws FROM subsets"))
    assert [json.loads(rows[i]) for i in ids] == [
        [again.arm_names.index(m) for m in d["draws"]] for d in decisions
    ]
    models = dict(db.execute("SELECT request_id, model FROM routes"))
    assert [json.loads(models[i]) for i in ids] == [d["models"] for d in decisions]
    db.close()
    again.close()
    with pytest.raises(ValueError, match="holds 12 subset decisions"):
        export_log(log_path(state), tmp_path / "log.parquet")
    assert not (tmp_path / "log.parquet").exists()


def test_contextual_omd_reads_the_query_group_over_http(run_dir, tmp_path):
    router = load_router(run_dir, "contextual_omd", seed=0, state_path=tmp_path / "r.pt")
    saved = load_checkpoint(run_dir / "checkpoints" / "contextual_omd.pt")["learner"]
    client = TestClient(create_app(router, allowed_hosts=["testserver"]))
    emb = _embeddings(2).tolist()
    missing = client.post("/route", json={"embeddings": emb})
    assert missing.status_code == 422 and "groups" in missing.json()["detail"]
    unknown = client.post("/route", json={"embeddings": emb, "groups": ["g0", "g7"]})
    assert unknown.status_code == 422 and "unknown group 'g7'" in unknown.json()["detail"]
    reply = client.post("/route", json={"embeddings": emb, "groups": ["g0", "g1"]})
    assert reply.status_code == 200
    decisions = reply.json()["decisions"]
    # a never-visited group would be uniform; each group's iterate differs after the run
    assert saved["visits"][0].min() > 0
    first, second = (list(d["probabilities"].values()) for d in decisions)
    assert first != pytest.approx(second)
    ids = [d["request_id"] for d in decisions]
    answer = client.post(
        "/feedback", json={"request_ids": ids, "scores": [1.0, 0.2], "costs": [0, 0]}
    )
    assert answer.status_code == 200 and answer.json()["applied"] == ids
    assert router.learner.visits[0].tolist() == (saved["visits"][0] + 1).tolist()
    added = client.post("/models", json={"name": "newcomer", "price": 0.001})
    assert added.status_code == 422
    assert client.get("/health").json()["groups"] == ["g0", "g1"]
    router.close()
