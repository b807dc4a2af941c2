"""The ``max_fallbacks`` bound: with three models, one or no fallback leaves the others
untried (the routed model first, then the most probable others)."""

from __future__ import annotations

import httpx
import pytest

from tests.gateway.helpers import ARMS, BOB, build_router, keys, start_gateway, write_backends
from tests.gateway.stub_backend import ServerThread, stub_app
from torchroute.gateway.backends import load_backends
from torchroute.gateway.fallbacks import candidates


def test_candidates_stop_at_max_fallbacks(tmp_path):
    backends = load_backends(write_backends(tmp_path / "b.yaml", "http://127.0.0.1:9"))
    ranked = [("big", 0.5), ("small", 0.3), ("medium", 0.2)]
    names = [[c.backend.name for c in candidates("small", ranked, backends, n)] for n in range(4)]
    assert names == [
        ["small"],
        ["small", "big"],
        ["small", "big", "medium"],
        ["small", "big", "medium"],
    ]
    reasons = [c.reason for c in candidates("small", ranked, backends, 1)]
    assert reasons == ["routed", "fallback"]


@pytest.mark.parametrize("max_fallbacks", [0, 1])
def test_every_model_failing_tries_only_max_fallbacks_more(tmp_path, max_fallbacks):
    router = build_router()
    with ServerThread(stub_app()) as stub:
        for arm in ARMS:
            httpx.post(f"{stub.url}/_control", json={"model": f"{arm}-up", "mode": "500"})
        backends = write_backends(tmp_path / "backends.yaml", stub.url)
        with start_gateway(router, backends, keys=keys(), max_fallbacks=max_fallbacks) as gw:
            payload = {"model": "router", "messages": [{"role": "user", "content": "hi"}]}
            response = httpx.post(
                f"{gw.url}/v1/chat/completions",
                json=payload,
                headers={"authorization": f"Bearer {BOB}"},
                timeout=30,
            )
            calls = httpx.get(f"{stub.url}/_control").json()["calls"]
    assert response.status_code == 502
    assert sum(calls.values()) == 1 + max_fallbacks
    rid = response.headers["x-request-id"]
    rows = router.log.db.execute(
        "SELECT reason, outcome FROM attempts WHERE request_id = ? ORDER BY pos", (rid,)
    ).fetchall()
    assert rows == [("routed", "500")] + [("fallback", "500")] * max_fallbacks
    assert response.json()["error"]["message"].count(": 500") == 1 + max_fallbacks
    router.close()
