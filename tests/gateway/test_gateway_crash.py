"""kill -9 of the gateway in the middle of a stream, then a restart: nothing lost, nothing
counted twice (routes, feedback, spend)."""

from __future__ import annotations

import signal

import httpx
import pytest

from tests.gateway.helpers import (
    ARMS,
    BOB,
    kill_mid_stream,
    start_gateway_process,
    write_backends,
)
from tests.gateway.stub_backend import ServerThread, stub_app
from torchroute.gateway.ledger import read_attempts
from torchroute.serve.log import RouterLog, log_path

AUTH = {"authorization": f"Bearer {BOB}"}


def _chat(url: str, text: str, **body) -> httpx.Response:
    payload = {"model": "router", "messages": [{"role": "user", "content": text}], **body}
    return httpx.post(f"{url}/v1/chat/completions", json=payload, headers=AUTH, timeout=30)


@pytest.mark.slow  # two gateway starts: ~10 s on two cores
def test_kill_9_mid_stream_then_restart_loses_and_doubles_nothing(tmp_path):
    state = tmp_path / "router.pt"
    with ServerThread(stub_app()) as stub:
        backends = write_backends(tmp_path / "backends.yaml", stub.url, timeout_s=30)
        proc, url = start_gateway_process(state, backends, tmp_path, "first")
        try:
            answered = _chat(url, "answered before the crash").json()["torchroute"]
            waiting = _chat(url, "waiting for its score").json()["torchroute"]
            done = httpx.post(
                f"{url}/v1/feedback",
                json={"request_id": answered["request_id"], "score": 0.5},
                headers=AUTH,
            )
            assert done.status_code == 200
            for arm in ARMS:  # a slow stream: 40 words 0.1 s apart
                httpx.post(
                    f"{stub.url}/_control",
                    json={"model": f"{arm}-up", "mode": "ok", "delay": 0.1, "words": 40},
                )
            payload = {
                "model": "router",
                "stream": True,
                "messages": [{"role": "user", "content": "a long answer"}],
            }
            streamed = kill_mid_stream(proc, url, AUTH, json=payload)
        finally:
            if proc.poll() is None:
                proc.kill()
        spent_before = answered["cost"] + waiting["cost"]

        proc, url = start_gateway_process(state, backends, tmp_path, "second")
        try:
            health = httpx.get(f"{url}/health").json()["routers"]["100"]
            # three routes: one answered, one pending with its cost, one withdrawn
            assert (health["feedback"], health["pending"], health["withdrawn"]) == (1, 1, 1)
            again = httpx.post(
                f"{url}/v1/feedback",
                json={"request_id": answered["request_id"], "score": 0.5},
                headers=AUTH,
            )
            assert again.status_code == 409  # not counted twice
            late = httpx.post(
                f"{url}/v1/feedback",
                json={"request_id": waiting["request_id"], "score": 1.0},
                headers=AUTH,
            )
            assert late.status_code == 200, late.text
            assert late.json()["cost"] == pytest.approx(waiting["cost"])
            cut = httpx.post(
                f"{url}/v1/feedback", json={"request_id": streamed, "score": 1.0}, headers=AUTH
            )
            assert cut.status_code == 409
            usage = httpx.get(f"{url}/v1/usage", headers=AUTH).json()["keys"][0]
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    log = RouterLog.read(log_path(state))
    rows = log.db.execute("SELECT request_id, status FROM routes").fetchall()
    assert dict(rows) == {answered["request_id"]: 1, waiting["request_id"]: 1, streamed: 4}
    feedback = log.db.execute("SELECT request_id FROM feedback").fetchall()
    assert sorted(r for (r,) in feedback) == sorted([answered["request_id"], waiting["request_id"]])
    (cut,) = read_attempts(log.db, streamed)
    assert (cut.outcome, cut.key) == ("interrupted", "bob")
    # restored, not doubled; the cut call charged what it held (tests/gateway/test_spend*)
    assert usage["spend"] == pytest.approx(spent_before + cut.cost)
    log.close()
