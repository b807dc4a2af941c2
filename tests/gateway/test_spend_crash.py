"""kill -9 of the gateway in the middle of a capped key's stream, then a restart on the same
state: the cut call is charged what it held, under its key, and the cap counts it."""

from __future__ import annotations

import signal

import httpx
import pytest

from tests.gateway.helpers import ALICE, ARMS, kill_mid_stream, start_gateway_process
from tests.gateway.stub_backend import ServerThread, stub_app
from tests.gateway.test_spend import _backends, _body, _every_model, _hold, _relayed_cost, _stream
from torchroute.gateway.ledger import read_attempts
from torchroute.serve.log import RouterLog, log_path

CAP = 1.0  # alice's cap in tests.gateway.helpers.keys


def _alice_spend(url: str) -> float:
    answer = httpx.get(f"{url}/v1/usage", headers={"authorization": f"Bearer {ALICE}"})
    return answer.json()["keys"][0]["spend"]


@pytest.mark.slow  # two gateway starts: ~10 s on two cores
def test_kill_9_mid_stream_charges_the_hold_under_its_key_on_the_next_start(tmp_path):
    state = tmp_path / "router.pt"
    with ServerThread(stub_app()) as stub:
        backends = _backends(tmp_path, stub)
        proc, url = start_gateway_process(state, backends, tmp_path, "first")
        try:
            _every_model(stub, "ok", words=6)
            text = "answered before the crash"
            status, _, chunks = _stream(url, _body(text, 8), ALICE)
            assert (status, chunks) == (200, 6)
            before = _relayed_cost(text, chunks)
            assert _alice_spend(url) == pytest.approx(before)

            _every_model(stub, "ok", words=40, delay=0.1)  # a slow stream: 4 s
            cut_body, cut_tokens = _body("a long answer", 50), 50
            headers = {"authorization": f"Bearer {ALICE}", "content-type": "application/json"}
            cut = kill_mid_stream(proc, url, headers, content=cut_body)
        finally:
            if proc.poll() is None:
                proc.kill()
        held = _hold(cut_body, cut_tokens)

        # a request that fits the cap only if the cut call were forgotten
        remaining = CAP - before - held
        tokens = int((remaining + held / 2) * 1e6 / 30.0)
        probe = _body("one more", tokens)
        assert CAP - before - held < _hold(probe, tokens) <= CAP - before

        _every_model(stub, "ok", words=6)
        proc, url = start_gateway_process(state, backends, tmp_path, "second")
        try:
            assert _alice_spend(url) == pytest.approx(before + held)
            status, _, _ = _stream(url, probe, ALICE)
            assert status == 429
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    log = RouterLog.read(log_path(state))
    (row,) = read_attempts(log.db, cut)
    assert row.model in ARMS
    assert (row.outcome, row.key, row.cost) == ("interrupted", "alice", pytest.approx(held))
    (status,) = log.db.execute("SELECT status FROM routes WHERE request_id = ?", (cut,)).fetchone()
    assert status == 4  # withdrawn: nothing to learn from
    log.close()
