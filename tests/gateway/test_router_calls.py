"""What the gateway keeps beside the serve ``Router``: the models of a request by probability,
and in its ledger the backend calls, the cost known before feedback, withdrawn requests,
the tries a stop cut short; all of it as the log says after a restart."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.gateway.helpers import ARMS, build_router
from torchroute.gateway.ledger import Attempt, Ledger


def _attempt(rid: str, model: str, outcome: str, cost: float | None) -> Attempt:
    return Attempt(rid, model, 0.5, "routed", outcome, 3, 4, cost, "bob", time.time())


def test_ranked_follows_the_logged_probabilities(tmp_path):
    router = build_router(tmp_path / "r.pt")
    (first,) = router.route(texts=["teach me"])
    router.feedback([first["request_id"]], [1.0], [0.0])  # now the learner prefers one
    (decision,) = router.route(texts=["teach me"])
    rid = decision["request_id"]
    ranked = router.ranked(rid)
    (blob,) = router.log.db.execute(
        "SELECT probabilities FROM routes WHERE request_id = ?", (rid,)
    ).fetchone()
    probs = np.frombuffer(blob, dtype=np.float64)
    # by hand: most probable first, ties in the order of the models
    expected = sorted(range(len(ARMS)), key=lambda a: (-probs[a], a))
    assert ranked == [(ARMS[a], probs[a]) for a in expected]
    assert ranked[0] == (decision["model"], pytest.approx(decision["propensity"]))
    assert router.ranked("unknown") == []
    router.close()


def test_costs_and_withdrawals_survive_a_restart(tmp_path):
    state = tmp_path / "r.pt"
    router = build_router(state)
    ledger = Ledger(router)
    answered, fell_back, never = (router.route(texts=[t])[0] for t in ("a", "b", "c"))
    a, b = answered["request_id"], fell_back["request_id"]
    ledger.add(_attempt(a, answered["model"], "ok", 0.25))
    ledger.add(_attempt(a, answered["model"], "ok", 0.5))  # a second turn
    ledger.add(_attempt(a, "not-routed", "ok", 9.0))  # not the routed model
    other = next(m for m in ARMS if m != fell_back["model"])
    ledger.add(_attempt(b, fell_back["model"], "429", None))
    ledger.add(_attempt(b, other, "ok", 1.0), withdraw=True)
    assert ledger.known_cost(a) == pytest.approx(0.75)
    assert ledger.known_cost(b) is None
    assert ledger.spend() == {"bob": pytest.approx(10.75)}
    router.close()

    again = build_router(state)
    ledger = Ledger(again)
    assert ledger.known_cost(a) == pytest.approx(0.75)
    assert again.request_status(b) == "withdrawn"
    assert again.status()["withdrawn"] == 1 and again.status()["pending"] == 2
    assert [t.outcome for t in ledger.attempts(b)] == ["429", "ok"]
    assert ledger.recover() == ([], [never["request_id"]])  # routed, never called
    again.withdraw([never["request_id"]])
    assert again.request_status(never["request_id"]) == "withdrawn"
    assert again.feedback([b], [1.0], [1.0])["unknown"] == [b]  # withdrawn: nothing learned
    again.close()


def test_a_try_running_at_a_stop_is_interrupted_and_keeps_its_charge(tmp_path):
    """A try is logged as it starts, charged its reservation; a stop before its end (no
    close: as kill -9) leaves it so, and the next start marks it interrupted."""
    state = tmp_path / "r.pt"
    router = build_router(state)
    ledger = Ledger(router)
    (decision,) = router.route(texts=["cut short"])
    rid = decision["request_id"]
    pos = ledger.begin(_attempt(rid, decision["model"], "running", 0.125))
    assert ledger.spend() == {"bob": pytest.approx(0.125)}  # held while it runs
    router.log.db.close()  # the process dies: nothing more is written

    again = build_router(state)
    ledger = Ledger(again)
    assert ledger.recover() == ([rid], [])
    (row,) = ledger.attempts(rid)
    assert (row.outcome, row.key, row.cost) == ("interrupted", "bob", pytest.approx(0.125))
    assert ledger.spend() == {"bob": pytest.approx(0.125)}
    assert pos == 0
    again.close()


def test_a_log_written_before_the_ledger_moved_reads_as_it_is(tmp_path):
    """The ``attempts`` table that serve created before (same columns) is the ledger's:
    its rows, written as the earlier code wrote them, count as they did."""
    state = tmp_path / "r.pt"
    router = build_router(state)
    (decision,) = router.route(texts=["old"])
    rid = decision["request_id"]
    router.log.db.executescript(
        "CREATE TABLE attempts (request_id TEXT NOT NULL REFERENCES routes(request_id), "
        "pos INTEGER NOT NULL, model TEXT NOT NULL, propensity REAL NOT NULL, reason TEXT NOT "
        "NULL, outcome TEXT NOT NULL, input_tokens INTEGER, output_tokens INTEGER, cost REAL, "
        "key TEXT, timestamp REAL NOT NULL, PRIMARY KEY (request_id, pos));"
        f"INSERT INTO attempts VALUES ('{rid}', 0, '{decision['model']}', 0.5, 'routed', 'ok', "
        "3, 4, 0.25, 'alice', 1.0);"
    )
    router.close()
    again = build_router(state)
    ledger = Ledger(again)
    assert ledger.recover() == ([], [])
    assert ledger.spend() == {"alice": pytest.approx(0.25)}
    assert ledger.known_cost(rid) == pytest.approx(0.25)
    again.close()
