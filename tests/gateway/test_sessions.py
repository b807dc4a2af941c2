"""Sessions: scoped to their key (another key with the same session id starts its own),
lapsing ``ttl`` seconds after their last turn, the least recent evicted over the bound."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.gateway.helpers import ALICE, BOB, build_router, keys, start_gateway, write_backends
from tests.gateway.stub_backend import ServerThread, stub_app
from torchroute.gateway import sessions as sessions_module
from torchroute.gateway.sessions import Sessions


class Clock:
    """A monotonic clock moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(sessions_module.time, "monotonic", clock)
    return clock


def test_a_session_lapses_ttl_seconds_after_its_last_turn(clock):
    sessions = Sessions(ttl=10.0)
    sessions.put(("alice", 1.0, "conv"), "r1", "small")
    clock.now += 8.0
    assert sessions.get(("alice", 1.0, "conv")).request_id == "r1"  # pushed back to +18
    clock.now += 8.0  # 16 s after the start, 8 after the last turn
    assert sessions.get(("alice", 1.0, "conv")).request_id == "r1"
    clock.now += 10.5
    assert sessions.get(("alice", 1.0, "conv")) is None
    sessions.put(("alice", 1.0, "conv"), "r2", "big")  # a new one starts
    assert sessions.get(("alice", 1.0, "conv")).request_id == "r2"


def test_over_the_bound_the_least_recent_session_is_evicted(clock):
    sessions = Sessions(ttl=60.0, max_sessions=2)
    sessions.put(("k", 1.0, "a"), "ra", "small")
    sessions.put(("k", 1.0, "b"), "rb", "small")
    assert sessions.get(("k", 1.0, "a")) is not None  # a is now the most recent
    sessions.put(("k", 1.0, "c"), "rc", "small")
    assert sessions.get(("k", 1.0, "b")) is None
    assert [sessions.get(("k", 1.0, s)).request_id for s in "ac"] == ["ra", "rc"]
    sessions.end("rb")  # evicted already: nothing to end
    sessions.end("ra")
    assert sessions.get(("k", 1.0, "a")) is None


def test_no_sessions_with_ttl_zero(clock):
    sessions = Sessions(ttl=0.0)
    sessions.put(("k", 1.0, "a"), "ra", "small")
    assert sessions.get(("k", 1.0, "a")) is None


def _turn(url: str, key: str, session: str, text: str) -> httpx.Response:
    payload = {"model": "router", "messages": [{"role": "user", "content": text}]}
    headers = {"authorization": f"Bearer {key}", "x-session-id": session}
    return httpx.post(f"{url}/v1/chat/completions", json=payload, headers=headers, timeout=30)


def test_a_session_is_scoped_to_its_key(tmp_path):
    """bob naming alice's session id starts his own: he cannot add turns (and spend) to
    her request."""
    router = build_router()
    with ServerThread(stub_app()) as stub:
        backends = write_backends(tmp_path / "backends.yaml", stub.url)
        with start_gateway(router, backends, keys=keys(), session_ttl=60) as gateway:
            first = _turn(gateway.url, ALICE, "shared", "hello there")
            hers = first.headers["x-request-id"]
            other = _turn(gateway.url, BOB, "shared", "hello from bob")
            assert other.status_code == 200
            assert other.headers["x-request-id"] != hers
            again = _turn(gateway.url, ALICE, "shared", "and again")
            assert again.headers["x-request-id"] == hers
    rows = router.log.db.execute(
        "SELECT key, reason FROM attempts WHERE request_id = ? ORDER BY pos", (hers,)
    ).fetchall()
    assert rows == [("alice", "routed"), ("alice", "session")]
    router.close()


def test_a_session_that_lapsed_routes_the_next_turn_anew(tmp_path):
    router = build_router()
    with ServerThread(stub_app()) as stub:
        backends = write_backends(tmp_path / "backends.yaml", stub.url)
        with start_gateway(router, backends, keys=keys(), session_ttl=0.3) as gateway:
            first = _turn(gateway.url, BOB, "conv", "hello")
            time.sleep(0.6)
            later = _turn(gateway.url, BOB, "conv", "are you there")
    assert later.headers["x-request-id"] != first.headers["x-request-id"]
    router.close()
