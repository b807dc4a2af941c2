"""The gateway on loopback against a stub backend (a real HTTP server): the official ``openai``
client and raw HTTP; routing, streaming, fallbacks, cost, feedback, sessions, budgets, bad
input. One stub and one gateway serve the whole module."""

from __future__ import annotations

import json
import time

import httpx
import numpy as np
import openai
import pytest

from tests.gateway.helpers import (
    ADMIN,
    ALICE,
    ARMS,
    BOB,
    PRICES,
    RHO,
    build_router,
    keys,
    start_gateway,
    write_backends,
)
from tests.gateway.stub_backend import ServerThread
from torchroute.gateway.app import Gateway, create_gateway_app
from torchroute.gateway.backends import load_backends
from torchroute.gateway.ledger import Ledger
from torchroute.serve.limits import Limits

MAX_RESPONSE = 64 << 10


@pytest.fixture(scope="module")
def gateway(stub, router, tmp_path_factory):
    backends = write_backends(tmp_path_factory.mktemp("gw") / "backends.yaml", stub.url)
    limits = Limits(max_body_bytes=32 << 10, max_prompt_chars=2000)
    server = start_gateway(
        router,
        backends,
        keys=keys(cap_alice=1.0),
        session_ttl=60,
        max_fallbacks=2,
        limits=limits,
        max_response_bytes=MAX_RESPONSE,
    )
    with server:
        yield server


@pytest.fixture(scope="module")
def fresh(stub, tmp_path_factory):
    """A gateway whose router never learns (every request it sees falls back or fails), so
    it keeps breaking its ties uniformly."""
    router = build_router()
    backends = write_backends(tmp_path_factory.mktemp("gw") / "backends.yaml", stub.url)
    with start_gateway(router, backends, keys=keys(), max_fallbacks=2) as server:
        server.router = router
        yield server
    router.close()


@pytest.fixture(autouse=True)
def _reset(stub):
    httpx.post(f"{stub.url}/_reset")


def _mode(stub, arm: str, mode: str, **kw) -> None:
    httpx.post(f"{stub.url}/_control", json={"model": f"{arm}-up", "mode": mode, **kw})


def _calls(stub) -> dict[str, int]:
    return httpx.get(f"{stub.url}/_control").json()["calls"]


def _chat(gateway, text: str, key: str = BOB, headers: dict | None = None, **body):
    payload = {"model": "router", "messages": [{"role": "user", "content": text}], **body}
    auth = {"authorization": f"Bearer {key}", **(headers or {})}
    return httpx.post(f"{gateway.url}/v1/chat/completions", json=payload, headers=auth, timeout=30)


def _rows(router, sql: str, *args):
    return router.log.db.execute(sql, args).fetchall()


def _cost(arm: str, usage: dict) -> float:
    """usage x price, by hand."""
    price_in, price_out = PRICES[arm]
    return (usage["prompt_tokens"] * price_in + usage["completion_tokens"] * price_out) / 1e6


def test_official_client_routes_and_logs_the_propensity(gateway, router):
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=BOB, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="router", messages=[{"role": "user", "content": "what is two plus two"}]
    )
    completion = raw.parse()
    rid = raw.headers["x-request-id"]
    model = raw.headers["x-torchroute-model"]
    assert completion._request_id == rid
    assert completion.model_extra["torchroute"]["request_id"] == rid
    assert completion.model_extra["torchroute"]["model"] == model in ARMS
    assert completion.choices[0].message.content.startswith(f"answer from {model}-up:")
    # a fresh LinUCB scores every model alike: the tie is broken uniformly, p = 1 / K
    ((arm, propensity, status),) = _rows(
        router, "SELECT model, propensity, status FROM routes WHERE request_id = ?", rid
    )
    assert (arm, status) == (model, 0)
    assert propensity == pytest.approx(1 / len(ARMS))
    ((reason, outcome, tokens_in, tokens_out),) = _rows(
        router,
        "SELECT reason, outcome, input_tokens, output_tokens FROM attempts WHERE request_id = ?",
        rid,
    )
    assert (reason, outcome) == ("routed", "ok")
    assert (tokens_in, tokens_out) == (5, 8)  # the stub's usage: words in, words out
    ids = [m.id for m in client.models.list()]
    assert ids == ["router", f"router-{RHO:g}"]


def test_cost_is_usage_times_price_and_enters_the_utility(gateway, router):
    response = _chat(gateway, "a question of five words")
    assert response.status_code == 200
    body = response.json()
    rid, arm = body["torchroute"]["request_id"], body["torchroute"]["model"]
    cost = _cost(arm, body["usage"])
    assert body["torchroute"]["cost"] == pytest.approx(cost)
    ((logged,),) = _rows(router, "SELECT cost FROM attempts WHERE request_id = ?", rid)
    assert logged == pytest.approx(cost)
    assert Ledger(router).known_cost(rid) == pytest.approx(cost)
    score = 0.9
    feedback = httpx.post(
        f"{gateway.url}/v1/feedback",
        json={"request_id": rid, "score": score},
        headers={"authorization": f"Bearer {BOB}"},
    )
    assert feedback.status_code == 200, feedback.text
    ((f_cost, f_utility),) = _rows(
        router, "SELECT cost, utility FROM feedback WHERE request_id = ?", rid
    )
    assert f_cost == pytest.approx(cost)
    assert f_utility == pytest.approx(min(1.0, max(0.0, score - RHO * cost)))


def test_feedback_is_applied_once(gateway, router):
    rid = _chat(gateway, "once only").json()["torchroute"]["request_id"]
    before = router.status()["feedback"]
    url, auth = f"{gateway.url}/v1/feedback", {"authorization": f"Bearer {BOB}"}
    first = httpx.post(url, json={"request_id": rid, "score": 1.0}, headers=auth)
    second = httpx.post(url, json={"request_id": rid, "score": 0.0}, headers=auth)
    assert first.status_code == 200
    assert second.status_code == 409
    assert "applied before" in second.json()["error"]["message"]
    assert router.status()["feedback"] == before + 1
    assert _rows(router, "SELECT count(*) FROM feedback WHERE request_id = ?", rid) == [(1,)]
    other = httpx.post(url, json={"request_id": rid, "score": 1.0}, headers=auth | {})
    assert other.status_code == 409
    # another key cannot see or score bob's request
    alice = httpx.post(
        url, json={"request_id": rid, "score": 1.0}, headers={"authorization": f"Bearer {ALICE}"}
    )
    assert alice.status_code == 404
    unknown = httpx.post(url, json={"request_id": "nope", "score": 1.0}, headers=auth)
    assert unknown.status_code == 404


def test_stream_passes_chunks_through_as_they_come(gateway, stub, router):
    for arm in ARMS:
        _mode(stub, arm, "ok", delay=0.15, words=6)
    payload = {
        "model": "router",
        "messages": [{"role": "user", "content": "stream me"}],
        "stream": True,
    }
    arrivals, contents = [], []
    start = time.monotonic()
    with httpx.stream(
        "POST",
        f"{gateway.url}/v1/chat/completions",
        json=payload,
        headers={"authorization": f"Bearer {BOB}"},
        timeout=30,
    ) as response:
        rid = response.headers["x-request-id"]
        arm = response.headers["x-torchroute-model"]
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                arrivals.append(time.monotonic() - start)
                contents.append(json.loads(line[6:]))
    words = [c["choices"][0]["delta"].get("content") for c in contents if c["choices"]]
    assert "".join(w for w in words if w).startswith(f"answer from {arm}-up:")
    # not buffered: the first word came long before the last (6 words, 0.15 s apart)
    assert arrivals[-1] - arrivals[1] > 0.5
    # no usage chunk: the client did not ask for it, but the gateway read it for the cost
    assert all("usage" not in c or c["usage"] is None for c in contents)
    ((outcome, tokens_out, cost),) = _rows(
        router, "SELECT outcome, output_tokens, cost FROM attempts WHERE request_id = ?", rid
    )
    assert (outcome, tokens_out) == ("ok", 6)
    assert cost == pytest.approx(_cost(arm, {"prompt_tokens": 2, "completion_tokens": 6}))


def test_official_client_stream_with_usage(gateway, router):
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=BOB, max_retries=0)
    stream = client.chat.completions.create(
        model="router",
        messages=[{"role": "user", "content": "count words please"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1 and usage[0].prompt_tokens == 3
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("answer from ")


@pytest.mark.parametrize("mode", ["429", "500", "401", "404", "hang", "malformed", "truncate"])
@pytest.mark.parametrize("stream", [False, True])
def test_fallback_on_each_failure_mode(fresh, stub, mode, stream):
    gateway, router = fresh, fresh.router
    if stream and mode == "truncate":
        pytest.skip("a stream cut after its first words cannot fall back (the next test)")
    _mode(stub, "small", mode)
    _mode(stub, "medium", mode)
    for _ in range(12):  # until the router picks a failing model (p = 2/3 each time)
        response = _chat(gateway, f"fallback {mode}", stream=stream)
        assert response.status_code == 200, response.text
        rid = response.headers["x-request-id"]
        if (
            response.headers["x-torchroute-model"] == "big"
            and response.headers["x-torchroute-fallbacks"] != "0"
        ):
            break
    else:
        pytest.fail("no request fell back in 12 tries")
    ((routed, blob),) = _rows(
        router, "SELECT model, probabilities FROM routes WHERE request_id = ?", rid
    )
    rows = _rows(
        router,
        "SELECT model, propensity, reason, outcome FROM attempts WHERE request_id = ? ORDER BY pos",
        rid,
    )
    # (a stream whose first event is malformed falls back too)
    expected_outcome = {"hang": "timeout", "truncate": "malformed"}.get(mode, mode)
    assert rows[0] == (routed, pytest.approx(1 / 3), "routed", expected_outcome)
    assert rows[-1][0] == "big" and rows[-1][2:] == ("fallback", "ok")
    # the next most probable model: all tie at 1/3, so in the order of the models
    order = [routed] + [a for a in ARMS if a != routed]
    assert [r[0] for r in rows] == order[: len(rows)]
    probs = np.frombuffer(blob, dtype=np.float64)  # the router's distribution, logged
    assert [r[1] for r in rows] == [probs[ARMS.index(r[0])] for r in rows]
    assert _rows(router, "SELECT status FROM routes WHERE request_id = ?", rid) == [(4,)]
    if not stream:
        assert response.json()["torchroute"]["fallbacks"][0] == f"{routed}: {expected_outcome}"
    feedback = httpx.post(
        f"{gateway.url}/v1/feedback",
        json={"request_id": rid, "score": 1.0},
        headers={"authorization": f"Bearer {BOB}"},
    )
    assert feedback.status_code == 409
    assert "did not answer" in feedback.json()["error"]["message"]


@pytest.mark.parametrize("mode", ["truncate", "endless"])
def test_a_stream_cut_short_or_endless_is_bounded_and_said(gateway, stub, router, mode):
    for arm in ARMS:
        _mode(stub, arm, mode, words=8)
    response = _chat(gateway, "stream that breaks", stream=True)
    assert response.status_code == 200
    assert len(response.content) < 2 * MAX_RESPONSE
    events = [line for line in response.text.splitlines() if line.startswith("data: ")]
    last = json.loads(events[-1][6:])
    assert last["error"]["type"] == "upstream_error"
    rid = response.headers["x-request-id"]
    ((outcome,),) = _rows(router, "SELECT outcome FROM attempts WHERE request_id = ?", rid)
    assert outcome == {"truncate": "truncated", "endless": "too large"}[mode]
    assert _rows(router, "SELECT status FROM routes WHERE request_id = ?", rid) == [(4,)]


def test_a_stream_that_stalls_after_its_first_event_is_a_timeout(gateway, stub, router):
    for arm in ARMS:  # the first event at once, then nothing for longer than timeout_s
        _mode(stub, arm, "ok", words=2, delay=3.0)
    started = time.monotonic()
    response = _chat(gateway, "stream that stalls", stream=True)
    assert response.status_code == 200 and time.monotonic() - started < 2.5
    events = [line for line in response.text.splitlines() if line.startswith("data: ")]
    assert json.loads(events[-1][6:])["error"]["type"] == "upstream_error"
    rid = response.headers["x-request-id"]
    ((outcome,),) = _rows(router, "SELECT outcome FROM attempts WHERE request_id = ?", rid)
    assert outcome == "timeout"


def test_streams_and_answers_reuse_one_backend_connection(stub, tmp_path):
    router = build_router()
    backends = write_backends(tmp_path / "backends.yaml", stub.url)
    gateway = Gateway([router], load_backends(backends), keys=keys())
    pool = gateway._client().pool
    opened = []
    connect = pool._connect

    async def counting(origin):
        opened.append(origin)
        return await connect(origin)

    pool._connect = counting
    with ServerThread(create_gateway_app(gateway)) as server:
        for stream in (False, True, True, False, True):
            response = _chat(server, "reuse", stream=stream)
            assert response.status_code == 200 and "answer from" in response.text
    router.close()
    assert len(opened) == 1


def test_every_model_failing_is_a_502_naming_each(fresh, stub):
    gateway = fresh
    for arm in ARMS:
        _mode(stub, arm, "500")
    response = _chat(gateway, "nobody answers")
    assert response.status_code == 502
    message = response.json()["error"]["message"]
    assert all(f"{arm}: 500" in message for arm in ARMS)
    assert sum(_calls(stub).values()) == 3


def test_a_session_keeps_its_model_and_is_logged_once(gateway, router):
    first = _chat(gateway, "hello", headers={"x-session-id": "conv-1"})
    rid = first.headers["x-request-id"]
    turns = [
        _chat(gateway, f"turn {i} with a few more words", headers={"x-session-id": "conv-1"})
        for i in range(2)
    ]
    assert {t.headers["x-request-id"] for t in turns} == {rid}
    assert {t.headers["x-torchroute-model"] for t in turns} == {first.headers["x-torchroute-model"]}
    assert _rows(router, "SELECT count(*) FROM routes WHERE request_id = ?", rid) == [(1,)]
    reasons = _rows(router, "SELECT reason FROM attempts WHERE request_id = ? ORDER BY pos", rid)
    assert [r for (r,) in reasons] == ["routed", "session", "session"]
    arm = first.headers["x-torchroute-model"]
    total = sum(_cost(arm, r.json()["usage"]) for r in [first, *turns])
    assert Ledger(router).known_cost(rid) == pytest.approx(total)
    # the user field names a session too; another session routes on its own
    other = _chat(gateway, "hello", user="someone-else")
    assert other.headers["x-request-id"] != rid
    auth = {"authorization": f"Bearer {BOB}"}
    done = httpx.post(
        f"{gateway.url}/v1/feedback", json={"request_id": rid, "score": 1.0}, headers=auth
    )
    assert done.status_code == 200 and done.json()["cost"] == pytest.approx(total)
    after = _chat(gateway, "hello again", headers={"x-session-id": "conv-1"})
    assert after.headers["x-request-id"] != rid  # feedback ended the session


def test_budget_refused_before_any_backend_call(gateway, stub, router):
    usage = httpx.get(f"{gateway.url}/v1/usage", headers={"authorization": f"Bearer {ALICE}"})
    (mine,) = usage.json()["keys"]
    assert mine["key"] == "alice" and mine["cap"] == 1.0
    # at least 10**6 output tokens at the cheapest price (2 per million) cost 2 > the cap 1
    refused = _chat(gateway, "expensive", key=ALICE, max_tokens=10**6)
    assert refused.status_code == 429
    assert "cap" in refused.json()["error"]["message"]
    assert _calls(stub) == {}
    ok = _chat(gateway, "cheap one", key=ALICE)
    assert ok.status_code == 200
    spent = _rows(router, "SELECT sum(cost) FROM attempts WHERE key = 'alice'")[0][0]
    usage = httpx.get(f"{gateway.url}/v1/usage", headers={"authorization": f"Bearer {ALICE}"})
    assert usage.json()["keys"][0]["spend"] == pytest.approx(spent)
    everyone = httpx.get(f"{gateway.url}/v1/usage", headers={"authorization": f"Bearer {ADMIN}"})
    assert {k["key"] for k in everyone.json()["keys"]} == {"alice", "bob", "ops"}


def test_a_key_at_its_cap_is_refused(stub, tmp_path):
    """A call holds the most it can cost (its body's bytes as prompt tokens, its max_tokens,
    at the dearest prices): a cap just over that admits one call, and what that
    call spent leaves too little for the next."""
    payload = {"model": "router", "messages": [{"role": "user", "content": "one two three"}]}
    body = json.dumps({**payload, "max_tokens": 8}).encode()
    price_in = max(p_in for p_in, _ in PRICES.values())  # the highest of each
    price_out = max(p_out for _, p_out in PRICES.values())
    hold = (len(body) * price_in + 8 * price_out) / 1e6
    router = build_router()
    backends = write_backends(tmp_path / "b.yaml", stub.url)
    with start_gateway(router, backends, keys=keys(cap_alice=hold * 1.01)) as gateway:
        url, auth = (
            f"{gateway.url}/v1/chat/completions",
            {
                "authorization": f"Bearer {ALICE}",
                "content-type": "application/json",
            },
        )
        first = httpx.post(url, content=body, headers=auth, timeout=30)
        assert first.status_code == 200  # what it could cost at most was under the cap
        calls = sum(_calls(stub).values())
        second = httpx.post(url, content=body, headers=auth, timeout=30)
        assert second.status_code == 429
        assert sum(_calls(stub).values()) == calls
    router.close()


def test_keys_and_bad_input(gateway, stub):
    url = f"{gateway.url}/v1/chat/completions"
    good = {"model": "router", "messages": [{"role": "user", "content": "hi"}]}
    bob = {"authorization": f"Bearer {BOB}"}
    assert httpx.post(url, json=good).status_code == 401
    assert httpx.post(url, json=good, headers={"authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{gateway.url}/v1/models").status_code == 401
    cases = [
        ({**good, "model": "router-7"}, 422, "router-7"),
        ({**good, "model": "gpt-4"}, 422, "name the router"),
        ({**good, "stream": "yes"}, 422, "stream"),
        ({**good, "messages": "hi"}, 422, "messages"),
        ({**good, "messages": []}, 422, "messages"),
        ({**good, "messages": [{"role": "assistant", "content": "x"}]}, 422, "user message"),
        ({**good, "messages": [{"role": "user", "content": "x" * 2001}]}, 422, "--max-prompt"),
        ({**good, "max_tokens": "10"}, 422, "max_tokens"),
    ]
    for body, status, words in cases:
        response = httpx.post(url, json=body, headers=bob)
        assert response.status_code == status, (body, response.text)
        assert words in response.json()["error"]["message"]
    as_json = {**bob, "content-type": "application/json"}
    malformed = httpx.post(url, content=b"{not json", headers=as_json)
    assert malformed.status_code == 400
    big = httpx.post(url, content=b"x" * (40 << 10), headers=as_json)
    assert big.status_code == 413
    assert _calls(stub) == {}
    bad_host = httpx.post(url, json=good, headers={**bob, "host": "evil.example"})
    assert bad_host.status_code == 400
    feedback = f"{gateway.url}/v1/feedback"
    for body in ({"request_id": "x", "score": "1"}, {"request_id": "x", "score": 2.0}, {}):
        assert httpx.post(feedback, json=body, headers=bob).status_code == 422


def _leave_after_the_first_event(gateway, router, within: float) -> tuple[str, float, list]:
    """Read a streamed answer's first event and close the connection; the request id,
    the seconds until its try was logged, and the try's outcome rows."""
    payload = {"model": "router", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    with httpx.stream(
        "POST",
        f"{gateway.url}/v1/chat/completions",
        json=payload,
        headers={"authorization": f"Bearer {BOB}"},
        timeout=30,
    ) as response:
        rid = response.headers["x-request-id"]
        assert next(response.iter_lines()).startswith("data: ")
        left = time.monotonic()
    rows = [("running",)]  # logged as it starts, its outcome set when it ends
    while rows == [("running",)] and time.monotonic() < left + within:
        rows = _rows(router, "SELECT outcome FROM attempts WHERE request_id = ?", rid)
        time.sleep(0.05)
    return rid, time.monotonic() - left, rows


def test_a_client_leaving_mid_stream_is_logged_and_withdrawn(gateway, stub, router):
    for arm in ARMS:
        _mode(stub, arm, "ok", delay=0.2, words=30)
    rid, _, rows = _leave_after_the_first_event(gateway, router, within=20)
    assert rows == [("client closed",)]
    assert router.request_status(rid) == "withdrawn"


def test_a_client_leaving_while_the_backend_stalls_is_noticed_at_once(gateway, stub, router):
    """The disconnect stops the relay waiting on the backend (its next event is 8 s off):
    the try is logged within seconds, before any other event could come."""
    for arm in ARMS:
        _mode(stub, arm, "ok", delay=8.0, words=3)
    rid, seconds, rows = _leave_after_the_first_event(gateway, router, within=6)
    assert rows == [("client closed",)], seconds
    assert router.request_status(rid) == "withdrawn"


@pytest.mark.parametrize("docs", [False, True])
def test_docs_and_schema_answer_only_when_asked_and_load_nothing_remote(stub, tmp_path, docs):
    router = build_router()
    backends = write_backends(tmp_path / "backends.yaml", stub.url)
    gateway = Gateway([router], load_backends(backends), keys=keys())
    with ServerThread(create_gateway_app(gateway, docs=docs)) as server:
        answers = {p: httpx.get(server.url + p, timeout=30) for p in ("/docs", "/redoc")}
        schema = httpx.get(server.url + "/openapi.json", timeout=30)
    router.close()
    assert answers["/redoc"].status_code == 404
    if not docs:  # FastAPI's own pages would load their scripts from a CDN
        assert answers["/docs"].status_code == 404 and schema.status_code == 404
        return
    page = answers["/docs"]
    assert page.status_code == 200 and "/v1/chat/completions" in page.text
    assert "<script" not in page.text.lower() and "://" not in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert "/v1/chat/completions" in schema.json()["paths"]
