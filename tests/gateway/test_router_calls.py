"""What the gateway adds to the serve ``Router``: the models of a request by probability,
backend calls in the decision log, the cost known before feedback, withdrawn requests;
all of it as the log says after a restart."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.gateway.helpers import ARMS, build_router
from torchroute.serve.log import Attempt


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
    answered, fell_back, never = (router.route(texts=[t])[0] for t in ("a", "b", "c"))
    a, b = answered["request_id"], fell_back["request_id"]
    router.record_attempt(_attempt(a, answered["model"], "ok", 0.25))
    router.record_attempt(_attempt(a, answered["model"], "ok", 0.5))  # a second turn
    router.record_attempt(_attempt(a, "not-routed", "ok", 9.0))  # not the routed model
    other = next(m for m in ARMS if m != fell_back["model"])
    router.record_attempt(_attempt(b, fell_back["model"], "429", None))
    router.record_attempt(_attempt(b, other, "ok", 1.0), withdraw=True)
    assert router.known_cost(a) == pytest.approx(0.75)
    assert router.known_cost(b) is None
    assert router.log.spend() == {"bob": pytest.approx(10.75)}
    assert router.log.unsettled() == [never["request_id"]]
    router.close()

    again = build_router(state)
    assert again.known_cost(a) == pytest.approx(0.75)
    assert again.request_status(b) == "withdrawn"
    assert again.status()["withdrawn"] == 1 and again.status()["pending"] == 2
    assert [t.outcome for t in again.attempts(b)] == ["429", "ok"]
    again.withdraw([never["request_id"]])
    assert again.request_status(never["request_id"]) == "withdrawn"
    assert again.feedback([b], [1.0], [1.0])["unknown"] == [b]  # withdrawn: nothing learned
    again.close()
