"""The gateway's request path under hostile and careless input, against a stub backend (a
real HTTP server on loopback) and a gateway without keys (``--insecure-no-auth``): bodies a
page of another site can send, bodies that are not standard JSON, backends' error answers
that echo the request, answers that are not answers, and the shape of every error."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.gateway.helpers import ARMS, write_backends
from tests.gateway.stub_backend import ServerThread
from torchroute.gateway.app import Gateway, create_gateway_app
from torchroute.gateway.backends import load_backends
from torchroute.serve.limits import Limits

#: the backends' API key (every model's), which no answer may carry
SECRET = "sk-backend-Zq81Xv0pLmN4"
JSON = {"content-type": "application/json"}
GOOD = {"model": "router", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def gateway(stub, router, tmp_path_factory):
    keyed = {arm: {"api_key_env": "STUB_KEY"} for arm in ARMS}
    path = write_backends(tmp_path_factory.mktemp("gw") / "backends.yaml", stub.url, **keyed)
    backends = load_backends(path, env={"STUB_KEY": SECRET})
    gateway = Gateway([router], backends, limits=Limits(max_body_bytes=64 << 10))
    with ServerThread(create_gateway_app(gateway)) as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(stub):
    httpx.post(f"{stub.url}/_reset")


def _modes(stub, **modes: str) -> None:
    for arm, mode in modes.items():
        httpx.post(f"{stub.url}/_control", json={"model": f"{arm}-up", "mode": mode})


def _calls(stub) -> int:
    return sum(httpx.get(f"{stub.url}/_control").json()["calls"].values())


def _routes(router) -> int:
    return router.log.db.execute("SELECT COUNT(*) FROM routes").fetchone()[0]


def _post(gateway, body: bytes, headers: dict | None = None, path: str = "chat/completions"):
    return httpx.post(f"{gateway.url}/v1/{path}", content=body, headers=headers, timeout=30)


def _error(response: httpx.Response, status: int) -> str:
    """The one-line message of an OpenAI-shaped error answer of ``status``."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == status
    assert isinstance(body["error"]["type"], str)
    message = body["error"]["message"]
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None],
)
@pytest.mark.parametrize("path", ["chat/completions", "feedback"])
def test_a_body_a_page_of_another_site_can_send_is_refused(
    gateway, stub, router, content_type, path
):
    before = _routes(router)
    headers = {} if content_type is None else {"content-type": content_type}
    message = _error(_post(gateway, json.dumps(GOOD).encode(), headers, path), 415)
    assert "Content-Type" in message and "expected application/json" in message
    assert _calls(stub) == 0 and _routes(router) == before


def test_a_json_body_with_a_charset_is_routed(gateway, stub):
    headers = {"content-type": "Application/JSON; charset=utf-8"}
    response = _post(gateway, json.dumps(GOOD).encode(), headers)
    assert response.status_code == 200, response.text
    assert _calls(stub) == 1


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://127.0.0.2:8000"])
def test_a_page_whose_origin_is_not_an_allowed_host_is_refused(gateway, stub, router, origin):
    before = _routes(router)
    response = _post(gateway, json.dumps(GOOD).encode(), {**JSON, "origin": origin})
    assert "Origin" in _error(response, 403)
    assert _calls(stub) == 0 and _routes(router) == before


def test_a_page_of_the_gateway_s_own_host_is_served(gateway):
    response = _post(
        gateway, json.dumps(GOOD).encode(), {**JSON, "origin": "http://localhost:3000"}
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("stream", [False, True])
def test_a_backend_refusal_that_echoes_the_request_passes_no_secret(gateway, stub, stream):
    _modes(stub, **dict.fromkeys(ARMS, "echo_400"))
    body = json.dumps({**GOOD, "stream": stream}).encode()
    response = _post(gateway, body, JSON)
    assert SECRET not in response.text
    assert SECRET.encode() not in b"".join(f"{k}{v}".encode() for k, v in response.headers.items())
    message = _error(response, 400)
    assert "refused the request (400)" in message
    assert "invalid request; authorization: Bearer [redacted]" in message
    assert _calls(stub) == 1  # the request's fault: no fallback


@pytest.mark.parametrize(
    "body, field, literal",
    [
        (
            '{"model": "router", "messages": [{"role": "user", "content": "hi"}], '
            '"temperature": NaN}',
            "temperature",
            "NaN",
        ),
        (
            '{"model": "router", "messages": [{"role": "user", "content": "hi"}], '
            '"top_p": Infinity}',
            "top_p",
            "Infinity",
        ),
        (
            '{"model": "router", "messages": [{"role": "user", "content": "hi", "w": -Infinity}]}',
            "messages.0.w",
            "-Infinity",
        ),
        (
            '{"model": "router", "messages": [{"role": "user", "content": "hi"}], '
            '"logit_bias": {"50256": NaN}}',
            "logit_bias.50256",
            "NaN",
        ),
        (
            '{"model": "router", "messages": [{"role": "user", "content": "hi"}], '
            '"temperature": -1e400}',
            "temperature",
            "-1e400 is too large for a double",
        ),
    ],
)
def test_a_number_json_does_not_have_is_refused_before_anything_is_written(
    gateway, stub, router, body, field, literal
):
    before, pending = _routes(router), router.status()["pending"]
    message = _error(_post(gateway, body.encode(), JSON), 400)
    what = literal if " " in literal else f"{literal} is not a JSON number"
    assert message == f"{field}: {what} (expected a finite number)"
    assert _calls(stub) == 0 and _routes(router) == before
    assert router.status()["pending"] == pending


def test_a_lone_surrogate_and_deep_nesting_are_named_as_such(gateway, stub, router):
    before = _routes(router)
    lone = b'{"model": "router", "messages": [{"role": "user", "content": "a \\ud800 b"}]}'
    message = _error(_post(gateway, lone, JSON), 400)
    assert message.startswith("messages.0.content: not valid Unicode text")
    pair = b'{"model": "router", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}'
    assert _post(gateway, pair, JSON).status_code == 200
    for depth in (300, 3000):  # past the parser of the fields read, past Python's
        raw = json.dumps(GOOD).encode()[:-1] + b', "x": ' + b"[" * depth + b"]" * depth + b"}"
        message = _error(_post(gateway, raw, JSON), 400)
        assert "nested too deeply" in message and "malformed" not in message
    assert _calls(stub) == 1 and _routes(router) == before + 1


def test_a_nan_score_is_said_to_be_not_a_finite_number(gateway):
    response = _post(gateway, b'{"request_id": "x", "score": NaN}', JSON, "feedback")
    assert _error(response, 400) == "score: NaN is not a JSON number (expected a finite number)"
    response = _post(gateway, b'{"request_id": "x", "score": 1e999}', JSON, "feedback")
    message = _error(response, 400)
    assert message == "score: 1e999 is too large for a double (expected a finite number)"


def test_every_refusal_of_the_gateway_is_openai_shaped(gateway):
    assert "no such endpoint" in _error(httpx.get(f"{gateway.url}/v2/nothing"), 404)
    assert "not allowed" in _error(httpx.get(f"{gateway.url}/v1/chat/completions"), 405)
    bad_host = httpx.get(f"{gateway.url}/health", headers={"host": "evil.example"})
    assert "Host" in _error(bad_host, 400)
    big = _post(gateway, b" " * (65 << 10), JSON)
    assert "--max-body-bytes" in _error(big, 413)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("mode", ["204", "302"])
def test_an_empty_answer_or_a_redirect_is_a_failed_try_that_falls_back(gateway, stub, mode, stream):
    _modes(stub, **dict.fromkeys(ARMS, mode))
    response = _post(gateway, json.dumps({**GOOD, "stream": stream}).encode(), JSON)
    message = _error(response, 502)
    assert all(f"{arm}: " in message for arm in ARMS), message
    assert _calls(stub) == 3
    _modes(stub, small=mode, medium=mode, big="ok")
    response = _post(gateway, json.dumps({**GOOD, "stream": stream}).encode(), JSON)
    assert response.status_code == 200
    assert response.headers["x-torchroute-model"] == "big"
