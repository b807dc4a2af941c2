"""The gateway's routers: models added from the backends file, one router per rho
(``router-<rho>``), and the text each router sees."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from tests.gateway.helpers import ARMS, build_router, write_backends
from tests.gateway.stub_backend import ServerThread
from torchroute.gateway.app import Gateway, create_gateway_app
from torchroute.gateway.backends import load_backends


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_backend_missing_from_the_router_is_added_with_its_prior_price(stub, tmp_path):
    router = build_router(tmp_path / "r.pt", arms=ARMS[:2])
    backends = load_backends(write_backends(tmp_path / "b.yaml", stub.url))
    Gateway([router], backends)
    assert router.arm_names == ("small", "medium", "big")
    # 500 input and 500 output tokens at big's prices (10 and 30 per million)
    ((name, price),) = router.log.db.execute(
        "SELECT name, price FROM events WHERE kind = 'model'"
    ).fetchall()
    assert (name, price) == ("big", pytest.approx(0.02))
    router.close()


def test_a_router_model_without_a_backend_is_refused(stub, tmp_path):
    router = build_router(arms=[*ARMS, "orphan"])
    backends = load_backends(write_backends(tmp_path / "b.yaml", stub.url))
    with pytest.raises(ValueError, match=r"'orphan' .* has no backend"):
        Gateway([router], backends)
    router.close()


def test_each_rho_is_its_own_router_and_the_prompt_modes(stub, tmp_path):
    low, high = build_router(rho=0.0), build_router(rho=250.0)
    backends = load_backends(write_backends(tmp_path / "b.yaml", stub.url))
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "an answer"},
        {"role": "user", "content": [{"type": "text", "text": "second question"}]},
    ]
    for prompt, seen in [
        ("last", "second question"),
        (
            "conversation",
            "system: be brief\nuser: first question\nassistant: an answer\nuser: second question",
        ),
    ]:
        gateway = Gateway([low, high], backends, prompt=prompt)
        with ServerThread(create_gateway_app(gateway)) as server:
            url = f"{server.url}/v1/chat/completions"
            plain = httpx.post(url, json={"model": "router", "messages": messages})
            priced = httpx.post(url, json={"model": "router-250", "messages": messages})
            models = httpx.get(f"{server.url}/v1/models").json()["data"]
        assert [m["id"] for m in models] == ["router", "router-0", "router-250"]
        for response, router, other in [(plain, low, high), (priced, high, low)]:
            assert response.status_code == 200, response.text
            rid = response.headers["x-request-id"]
            assert response.json()["torchroute"]["rho"] == router.rho
            query = "SELECT text_sha256 FROM routes WHERE request_id = ?"
            assert router.log.db.execute(query, (rid,)).fetchall() == [(_sha(seen),)]
            assert other.log.db.execute(query, (rid,)).fetchall() == []
    low.close()
    high.close()
