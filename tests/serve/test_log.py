"""The decision log: rows in SQLite, checkpoints every N feedbacks, replay, expiry, export."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

from torchroute.checkpoint import CheckpointError, load_checkpoint
from torchroute.learners import EpsilonGreedy, LinUCB, NeuralUCB
from torchroute.serve import Router
from torchroute.serve.export import export_log
from torchroute.serve.log import LogError

ARMS = ["small", "medium", "large"]
RHO, LAM, D = 2.0, 0.5, 4


def _router(path=None, factory=LinUCB.from_problem, lam=LAM, **kwargs) -> Router:
    return Router.fresh(
        lambda problem: factory(problem, lam=lam).double(),
        ARMS,
        rho=RHO,
        dim=D,
        prices=[0.01, 0.05, 0.2],
        dtype=torch.float64,
        state_path=path,
        **kwargs,
    )


def _x(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, D))


def _traffic(router: Router, n: int = 40, seed: int = 0) -> list[dict]:
    """Routes ``n`` queries, answers most of them in shuffled groups, adds a model midway."""
    rng = np.random.default_rng(seed)
    decisions = router.route(embeddings=_x(n // 2, seed))
    ids = [d["request_id"] for d in decisions]
    for part in np.array_split(rng.permutation(len(ids) - 3), 4):
        router.feedback(
            [ids[i] for i in part], rng.uniform(size=len(part)), rng.uniform(0, 0.1, len(part))
        )
    router.add_model("xl", 0.3)
    more = router.route(embeddings=_x(n - n // 2, seed + 1))
    later = [d["request_id"] for d in more[:-2]] + ids[-3:-1]
    router.feedback(later, rng.uniform(size=len(later)), np.zeros(len(later)))
    return decisions + more


def _assert_same_state(a: Router, b: Router) -> None:
    sa, sb = a.learner.state_dict(), b.learner.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        torch.testing.assert_close(sa[key], sb[key], atol=1e-8, rtol=0)


def test_every_route_and_feedback_is_a_row_of_the_sqlite_log(tmp_path):
    router = _router(tmp_path / "router.pt")
    decisions = router.route(embeddings=_x(3))
    ids = [d["request_id"] for d in decisions]
    router.feedback(ids[:2], [0.9, 0.4], [0.1, 0.0])
    db = sqlite3.connect(tmp_path / "router.sqlite")  # an independent reader
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    routes = db.execute("SELECT request_id, model, propensity, status FROM routes ORDER BY rowid")
    assert [tuple(r) for r in routes] == [
        (d["request_id"], d["model"], d["propensity"], s) for d, s in zip(decisions, (1, 1, 0))
    ]
    rows = db.execute(
        "SELECT request_id, score, cost, utility FROM feedback ORDER BY pos"
    ).fetchall()
    assert rows == [(ids[0], 0.9, 0.1, np.clip(0.9 - RHO * 0.1, 0, 1)), (ids[1], 0.4, 0.0, 0.4)]
    emb = np.frombuffer(db.execute("SELECT embedding FROM routes LIMIT 1").fetchone()[0])
    np.testing.assert_array_equal(emb, _x(3)[0])
    with pytest.raises(sqlite3.IntegrityError):  # the database itself refuses a second count
        db.execute("INSERT INTO feedback VALUES (?, 9, 0, 0, 0.5, 0, 0.5)", (ids[0],))


def test_the_state_is_checkpointed_every_n_feedbacks_not_per_call(tmp_path):
    path = tmp_path / "router.pt"
    router = _router(path, checkpoint_every=5)
    assert not path.exists()  # nothing to checkpoint before a change
    decisions = router.route(embeddings=_x(600))  # many pending requests
    ids = [d["request_id"] for d in decisions]
    for i in range(4):
        router.feedback([ids[i]], [0.5], [0.0])
    assert not path.exists()  # 4 feedbacks < 5: the log holds them
    router.feedback([ids[4]], [0.5], [0.0])
    assert load_checkpoint(path)["event"] == 5
    size, stamp = path.stat().st_size, path.stat().st_mtime_ns
    router.route(embeddings=_x(50, 1))
    router.feedback(ids[5:7], [0.5, 0.5], [0.0, 0.0])
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (size, stamp)
    assert "pending" not in load_checkpoint(path)  # pending requests live in the log


@pytest.mark.parametrize("factory", [LinUCB.from_problem, EpsilonGreedy.from_problem])
def test_restart_is_the_checkpoint_plus_the_log_and_equals_a_replay_from_scratch(tmp_path, factory):
    path = tmp_path / "router.pt"
    live = _router(path, factory, checkpoint_every=30)
    decisions = _traffic(live)
    assert load_checkpoint(path)["event"] < live._events  # events after the checkpoint
    restarted = _router(path, factory, checkpoint_every=30)
    _assert_same_state(restarted, live)
    assert restarted.status() == live.status() and restarted.arm_names == (*ARMS, "xl")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for part in tmp_path.glob("router.sqlite*"):  # the log alone (and its write-ahead file)
        shutil.copy(part, scratch / part.name)
    replayed = _router(scratch / "router.pt", factory)
    _assert_same_state(replayed, live)
    if factory is LinUCB.from_problem:  # and both equal the ridge fit of the logged feedback
        db = sqlite3.connect(tmp_path / "router.sqlite")
        rows = db.execute(
            "SELECT r.x, r.arm, f.utility FROM feedback f JOIN routes r USING (request_id)"
        ).fetchall()
        a = np.stack([LAM * np.eye(D)] * 4)
        b = np.zeros((4, D))
        for blob, arm, u in rows:
            x = np.frombuffer(blob)
            a[arm] += np.outer(x, x)
            b[arm] += u * x
        np.testing.assert_allclose(np.linalg.inv(live.learner.a_inv[0].numpy()), a, atol=1e-8)
        want_theta = np.linalg.solve(a, b[..., None])[..., 0]  # [K, d] ridge solutions
        np.testing.assert_allclose(live.learner.theta[0].numpy(), want_theta, atol=1e-8)
    # the next decisions of the restarted router are the live router's
    nxt = [(d["model"], d["propensity"]) for d in live.route(embeddings=_x(5, 9))]
    assert nxt == [(d["model"], d["propensity"]) for d in restarted.route(embeddings=_x(5, 9))]
    assert len(decisions) == 40


def test_a_learner_drawing_in_its_update_replays_exactly(tmp_path):
    def factory(problem, lam):
        init = torch.Generator().manual_seed(0)  # the same initial weights at every start
        return NeuralUCB.from_problem(problem, hidden=8, steps=2, batch_size=4, generator=init)

    live = _router(tmp_path / "router.pt", factory, checkpoint_every=1000)
    decisions = live.route(embeddings=_x(12))
    ids = [d["request_id"] for d in decisions]
    for part in (ids[:5], ids[5:9], ids[9:]):
        live.feedback(part, np.linspace(0.1, 0.9, len(part)), np.zeros(len(part)))
    replayed = _router(tmp_path / "router.pt", factory)  # no checkpoint yet: the whole log
    _assert_same_state(replayed, live)


def test_pending_requests_expire_after_the_ttl_and_beyond_max_pending(tmp_path):
    router = _router(tmp_path / "router.pt", pending_ttl=0.2, max_pending=3)
    (old,) = router.route(embeddings=_x(1))
    time.sleep(0.3)
    fresh = router.route(embeddings=_x(4, 1))  # the old one expires; one more is dropped
    status = router.status()
    assert (status["pending"], status["expired"], status["dropped"]) == (3, 1, 1)
    report = router.feedback([old["request_id"], fresh[0]["request_id"]], [0.5] * 2, [0.0] * 2)
    assert report == {
        "applied": [],
        "unknown": [old["request_id"], fresh[0]["request_id"]],
        "duplicate": [],
    }
    db = sqlite3.connect(tmp_path / "router.sqlite")
    statuses = dict(db.execute("SELECT request_id, status FROM routes"))
    assert statuses[old["request_id"]] == 2 and statuses[fresh[0]["request_id"]] == 3
    restarted = _router(tmp_path / "router.pt", pending_ttl=0.2, max_pending=3)
    assert restarted.status() == status


def test_a_state_or_log_of_another_configuration_is_refused(tmp_path):
    path = tmp_path / "router.pt"
    router = _router(path, checkpoint_every=1)
    (d,) = router.route(embeddings=_x(1))
    router.feedback([d["request_id"]], [0.5], [0.0])
    with pytest.raises(LogError, match=r"belongs to another configuration"):
        _router(path, lam=3.0)  # other hyper-parameters
    with pytest.raises(LogError, match=r"another configuration: learner is \"LinUCB\""):
        _router(path, EpsilonGreedy.from_problem)
    (tmp_path / "router.sqlite").rename(tmp_path / "kept.sqlite")
    other = tmp_path / "other.pt"
    _router(other, lam=3.0)  # its own log
    shutil.copy(path, other)  # a checkpoint copied next to another router's log
    with pytest.raises(CheckpointError, match=r"belongs to another configuration"):
        _router(other, lam=3.0)


def test_temp_files_of_an_interrupted_checkpoint_are_removed_on_start(tmp_path):
    _router(tmp_path / "router.pt", checkpoint_every=1).route(embeddings=_x(1))
    stale = tmp_path / ".router.pt.abc123.tmp"
    stale.write_bytes(b"")  # what kill -9 during a write leaves
    _router(tmp_path / "router.pt")
    assert not stale.exists()


def test_export_writes_the_decision_log_format(tmp_path):
    router = _router(tmp_path / "router.pt")
    decisions = _traffic(router)
    router.close()
    export_log(tmp_path / "router.sqlite", tmp_path / "log.parquet")
    table = pq.read_table(tmp_path / "log.parquet")
    types = {f.name: str(f.type) for f in table.schema}
    assert types == {
        "request_id": "string",
        "timestamp": "double",
        "embedding": "list<element: double>",
        "features": "list<element: double>",
        "arm": "string",
        "propensity": "double",
        "arms": "list<element: string>",
        "probabilities": "list<element: double>",
        "score": "double",
        "cost": "double",
        "learner": "string",
        "rho": "double",
    }
    frame = table.to_pandas()
    assert list(frame["request_id"]) == [d["request_id"] for d in decisions]
    assert list(frame["arm"]) == [d["model"] for d in decisions]
    assert list(frame["propensity"]) == [d["propensity"] for d in decisions]
    assert frame["request_id"].is_unique and (frame["propensity"] > 0).all()
    assert list(frame["arms"][0]) == ARMS and list(frame["arms"].iloc[-1]) == [*ARMS, "xl"]
    for arms, probs, arm, prop in zip(
        frame["arms"], frame["probabilities"], frame["arm"], frame["propensity"]
    ):
        assert len(probs) == len(arms) and probs[list(arms).index(arm)] == prop
        assert abs(sum(probs) - 1) < 1e-9
    answered = frame["score"].notna()
    assert answered.sum() == 37 and frame.loc[~answered, "cost"].isna().all()
    np.testing.assert_array_equal(np.stack(frame["embedding"][:20]), _x(20))
    assert set(frame["learner"]) == {"LinUCB"} and set(frame["rho"]) == {RHO}
    export_log(tmp_path / "router.sqlite", tmp_path / "log.csv")
    csv = pd.read_csv(tmp_path / "log.csv")
    assert json.loads(csv["arms"][0]) == ARMS and csv["score"].isna().sum() == 3
    with pytest.raises(ValueError, match=r"expected a \.parquet or \.csv"):
        export_log(tmp_path / "router.sqlite", tmp_path / "log.json")
