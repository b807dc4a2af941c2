"""A key's spend against its cap, through the real gateway on 127.0.0.1 and the stub backend:
streamed calls read to the end, with and without the backend's usage; a client that leaves
mid-stream; eight calls at once. The ledger (the ``attempts`` rows of each key) is checked
against the tokens the client actually received, counted here from the relayed chunks."""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from tests.gateway.helpers import ALICE, ARMS, BOB, build_router, keys, start_gateway
from tests.gateway.helpers import write_backends as write_backends_file
from tests.gateway.stub_backend import ServerThread

#: every model at one price (per million input / output tokens), so a call's most and its
#: real cost do not depend on the model the router happens to pick
PRICE_IN, PRICE_OUT = 10.0, 30.0


@pytest.fixture(autouse=True)
def _reset(stub):
    httpx.post(f"{stub.url}/_reset")


def _backends(tmp_path, stub):
    price = {"input_per_mtok": PRICE_IN, "output_per_mtok": PRICE_OUT}
    return write_backends_file(
        tmp_path / "backends.yaml", stub.url, timeout_s=30, **{arm: price for arm in ARMS}
    )


def _every_model(stub, mode: str, **kw) -> None:
    for arm in ARMS:
        httpx.post(f"{stub.url}/_control", json={"model": f"{arm}-up", "mode": mode, **kw})


def _body(text: str, max_tokens: int) -> bytes:
    payload = {
        "model": "router",
        "stream": True,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": text}],
    }
    return json.dumps(payload).encode()


def _hold(body: bytes, max_tokens: int) -> float:
    """What a call may cost at most, by hand: its body's bytes as prompt tokens (a token is
    at least a byte) and its max_tokens, at the (one) price."""
    return (len(body) * PRICE_IN + max_tokens * PRICE_OUT) / 1e6


def _relayed_cost(text: str, chunks: int) -> float:
    """The cost of what the client received: the stub's tokens are the prompt's words and
    one per content chunk."""
    return (len(text.split()) * PRICE_IN + chunks * PRICE_OUT) / 1e6


def _stream(url: str, body: bytes, key: str, leave_after: int | None = None) -> tuple:
    """``(status, request id, content chunks received)``; with ``leave_after``, the client
    closes the connection once it has that many chunks."""
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", content=body, headers=headers, timeout=30
    ) as response:
        if response.status_code != 200:
            response.read()
            return response.status_code, None, 0
        rid, chunks = response.headers["x-request-id"], 0
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line[6:]).get("choices", []):
                chunks += bool(choice.get("delta", {}).get("content"))
            if leave_after is not None and chunks >= leave_after:
                break
    return 200, rid, chunks


def _charges(router, rid: str, within: float = 10.0) -> list[tuple[str, float | None]]:
    """``[(outcome, cost)]`` of a request's tries once none is still running."""
    deadline = time.monotonic() + within
    while True:
        rows = router.log.db.execute(
            "SELECT outcome, cost FROM attempts WHERE request_id = ? ORDER BY pos", (rid,)
        ).fetchall()
        if all(outcome != "running" for outcome, _ in rows) or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def _spent(router, key: str) -> float:
    (total,) = router.log.db.execute(
        "SELECT coalesce(sum(cost), 0) FROM attempts WHERE key = ?", (key,)
    ).fetchone()
    return total


def _usage(url: str, key: str) -> float:
    answer = httpx.get(f"{url}/v1/usage", headers={"authorization": f"Bearer {key}"})
    return answer.json()["keys"][0]["spend"]


def test_a_stream_read_to_the_end_is_charged_its_usage_or_else_its_hold(stub, tmp_path):
    """With the backend's usage: what was relayed, to the token. Without (a backend that
    gives none): the call's hold, never less than what was relayed (it was charged 0)."""
    router = build_router()
    with start_gateway(router, _backends(tmp_path, stub), keys=keys()) as gateway:
        text, max_tokens = "tell me a story please", 16
        body = _body(text, max_tokens)
        _every_model(stub, "ok", words=12)
        status, rid, chunks = _stream(gateway.url, body, BOB)
        assert (status, chunks) == (200, 12)
        assert _charges(router, rid) == [("ok", pytest.approx(_relayed_cost(text, chunks)))]

        _every_model(stub, "no_usage", words=12)
        status, bare, chunks = _stream(gateway.url, body, BOB)
        assert (status, chunks) == (200, 12)
        ((outcome, cost),) = _charges(router, bare)
        assert outcome == "ok" and cost == pytest.approx(_hold(body, max_tokens))
        assert cost >= _relayed_cost(text, chunks)
        assert _usage(gateway.url, BOB) == pytest.approx(_spent(router, "bob"))
        assert _spent(router, "bob") == pytest.approx(
            _relayed_cost(text, 12) + _hold(body, max_tokens)
        )
    router.close()


@pytest.mark.parametrize("read", [1, 12])
def test_a_client_leaving_mid_stream_is_charged_its_hold(stub, tmp_path, read):
    """The client reads ``read`` of 20 chunks (12: most of the answer) and leaves before the
    usage: the call is charged its hold, not 0, and at least what it received."""
    router = build_router()
    with start_gateway(router, _backends(tmp_path, stub), keys=keys()) as gateway:
        _every_model(stub, "ok", words=20, delay=0.05)
        text, max_tokens = "a long answer", 24
        body = _body(text, max_tokens)
        status, rid, chunks = _stream(gateway.url, body, BOB, leave_after=read)
        assert (status, chunks) == (200, read)
        ((outcome, cost),) = _charges(router, rid)
        assert outcome == "client closed"
        assert cost == pytest.approx(_hold(body, max_tokens))
        assert cost >= _relayed_cost(text, chunks)
        assert _usage(gateway.url, BOB) == pytest.approx(cost)
    router.close()


class Honest:
    """A backend that streams exactly ``max_tokens`` chunks of one token each (``delay``
    seconds apart), then its usage; it counts the calls it runs at once (``peak``)."""

    def __init__(self, delay: float) -> None:
        self.delay, self.running, self.peak = delay, 0, 0

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def complete(request: Request) -> StreamingResponse:
            body = await request.json()
            return StreamingResponse(
                self._events(body["max_tokens"]), media_type="text/event-stream"
            )

        return app

    async def _events(self, tokens: int):
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            for _ in range(tokens):
                await asyncio.sleep(self.delay)
                chunk = {"choices": [{"index": 0, "delta": {"content": "t "}}]}
                yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
            usage = {"prompt_tokens": 4, "completion_tokens": tokens}
            yield b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"
        finally:
            self.running -= 1


def test_eight_streams_at_once_cannot_pass_the_cap_together(tmp_path):
    """Eight streamed calls start together under a cap of 2.5 holds, against a backend that
    keeps to max_tokens: at most two run at once, each charged what it relayed, and the key
    never spends past its cap (holding only their least cost, at the cheapest model's
    prices, all eight ran at once and spent 2.4 times the cap)."""
    prices = {"small": (1.0, 2.0), "medium": (10.0, 30.0), "big": (10.0, 30.0)}
    text, max_tokens = "count to two hundred", 200
    body = _body(text, max_tokens)
    cap = 2.5 * _hold(body, max_tokens)  # the dearest prices are 10 and 30
    backend = Honest(delay=0.002)
    router = build_router()
    with ServerThread(backend.app()) as server:
        backends = write_backends_file(
            tmp_path / "backends.yaml",
            server.url,
            timeout_s=30,
            **{arm: {"input_per_mtok": p[0], "output_per_mtok": p[1]} for arm, p in prices.items()},
        )
        with start_gateway(router, backends, keys=keys(cap_alice=cap)) as gateway:
            with ThreadPoolExecutor(8) as pool:
                results = list(pool.map(lambda _: _stream(gateway.url, body, ALICE), range(8)))
            spent_said = _usage(gateway.url, ALICE)
    admitted = [(rid, chunks) for status, rid, chunks in results if status == 200]
    assert {status for status, _, _ in results} <= {200, 429} and admitted
    assert backend.peak <= 2
    total = 0.0
    for rid, chunks in admitted:
        assert chunks == max_tokens
        ((model, outcome, cost),) = router.log.db.execute(
            "SELECT model, outcome, cost FROM attempts WHERE request_id = ?", (rid,)
        ).fetchall()
        price_in, price_out = prices[model]
        assert (outcome, cost) == ("ok", pytest.approx((4 * price_in + chunks * price_out) / 1e6))
        total += cost
    assert _spent(router, "alice") == pytest.approx(total) == pytest.approx(spent_said)
    assert total <= cap
    router.close()


def _recording_backend(seen: list) -> FastAPI:
    """A backend that answers one word and keeps each request body it receives."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> dict:
        body = await request.json()
        seen.append(body)
        return {
            "id": "r",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        }

    return app


def test_a_capped_call_without_max_tokens_is_sent_the_max_tokens_it_holds(tmp_path):
    """alice (capped) names no max_tokens: her call holds 4096 output tokens and the
    backend is asked for at most that; bob (no cap) and a call naming its own go as sent."""
    seen: list[dict] = []
    router = build_router()
    with ServerThread(_recording_backend(seen)) as backend:
        backends = _backends(tmp_path, backend)
        with start_gateway(router, backends, keys=keys()) as gateway:
            for key, extra in [(ALICE, {}), (BOB, {}), (ALICE, {"max_tokens": 9})]:
                payload = {"model": "router", "messages": [{"role": "user", "content": "hi"}]}
                answer = httpx.post(
                    f"{gateway.url}/v1/chat/completions",
                    json={**payload, **extra},
                    headers={"authorization": f"Bearer {key}"},
                    timeout=30,
                )
                assert answer.status_code == 200, answer.text
    router.close()
    assert [body.get("max_tokens") for body in seen] == [4096, None, 9]
