"""A stub OpenAI-compatible backend for trying the gateway without any model: fixed answers.

``python tests/gateway/stub_backend.py --port 8001`` answers ``POST /v1/chat/completions``
for any model name with ``"answer from <model>: ..."`` (``words`` words), its token usage
(``prompt_tokens``: the words of the messages; ``completion_tokens``: the words of the
answer) and, with ``stream: true``, one server-sent event per word, then the usage chunk
when ``stream_options.include_usage`` is set, then ``[DONE]``. ``POST /_control
{"model": ..., "mode": ..., "delay": seconds between events, "words": n}`` sets how a
model behaves: ``ok``, ``429``, ``500``, ``401``, ``404``, ``hang`` (never answers),
``truncate`` (the answer stops half way), ``malformed`` (not JSON), ``endless`` (a stream
that never ends), ``no_usage``, ``echo_400`` (a 400 whose message and body echo the
request's headers, its ``Authorization`` included, as careless servers do), ``204`` (no
content), ``302`` (a redirect with a body). ``GET /_control`` gives the calls each model
received and the ``Authorization`` header it last saw; ``POST /_reset`` forgets the modes
and counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from torchroute.serve.startup import bind

ENDLESS = 1_000_000  # events of an "endless" stream (a bound, so a stub never spins forever)
MODES = (
    "ok",
    "429",
    "500",
    "401",
    "404",
    "hang",
    "truncate",
    "malformed",
    "endless",
    "no_usage",
    "echo_400",
    "204",
    "302",
)


def _words(messages: Any) -> int:
    count = 0
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            count += len(content.split())
    return count


def stub_app() -> FastAPI:
    """The stub backend's application (its state: the modes and call counts per model)."""
    app = FastAPI(title="stub backend")
    modes: dict[str, dict[str, Any]] = {}
    calls: dict[str, int] = {}
    keys: dict[str, str | None] = {}  # the Authorization header each model last received

    @app.post("/_control")
    async def control(request: Request) -> dict[str, Any]:
        body = await request.json()
        mode = body.get("mode", "ok")
        if mode not in MODES:
            return JSONResponse({"error": f"mode must be one of {MODES}"}, 422)
        modes[body["model"]] = {
            "mode": mode,
            "delay": float(body.get("delay", 0)),
            "words": int(body.get("words", 8)),
        }
        return {"ok": True}

    @app.get("/_control")
    async def counts() -> dict[str, Any]:
        return {"calls": dict(calls), "authorization": dict(keys)}

    @app.post("/_reset")
    async def reset() -> dict[str, bool]:
        modes.clear()
        calls.clear()
        keys.clear()
        return {"ok": True}

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> Response:
        body = await request.json()
        model = str(body.get("model"))
        calls[model] = calls.get(model, 0) + 1
        keys[model] = request.headers.get("authorization")
        setting = modes.get(model, {"mode": "ok", "delay": 0.0, "words": 8})
        mode, delay, n = setting["mode"], setting["delay"], setting["words"]
        if mode in ("429", "500", "401", "404"):
            return JSONResponse({"error": {"message": f"stub {mode}"}}, int(mode))
        if mode == "echo_400":
            sent = dict(request.headers)
            message = f"invalid request; authorization: {sent.get('authorization')}"
            return JSONResponse({"error": {"message": message}, "headers": sent}, 400)
        if mode == "204":
            return Response(status_code=204)
        if mode == "302":
            return JSONResponse({"moved": "/v2"}, 302, headers={"location": "/v2"})
        if mode == "hang":
            await asyncio.sleep(3600)
        words = [f"answer from {model}:"] + [f"w{i}" for i in range(n - 1)]
        usage = {
            "prompt_tokens": _words(body.get("messages")),
            "completion_tokens": n,
            "total_tokens": _words(body.get("messages")) + n,
        }
        ident, created = f"chatcmpl-{calls[model]}", int(time.time())
        if body.get("stream"):
            include = bool((body.get("stream_options") or {}).get("include_usage"))
            events = _events(ident, created, model, words, usage, include, mode, delay)
            return StreamingResponse(events, media_type="text/event-stream")
        if mode == "malformed":
            return Response(b"<html>not json", 200, media_type="application/json")
        answer = {
            "id": ident,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": " ".join(words)},
                    "finish_reason": "stop",
                }
            ],
        }
        if mode != "no_usage":
            answer["usage"] = usage
        data = json.dumps(answer).encode()
        if mode == "truncate":
            data = data[: len(data) // 2]
        return Response(data, 200, media_type="application/json")

    return app


async def _events(
    ident: str,
    created: int,
    model: str,
    words: list[str],
    usage: dict,
    include_usage: bool,
    mode: str,
    delay: float,
) -> AsyncIterator[bytes]:
    def chunk(delta: dict, finish: str | None = None, **extra: Any) -> bytes:
        payload = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    if mode == "malformed":
        yield b"data: {not json\n\n"
        return
    yield chunk({"role": "assistant", "content": ""})
    i = 0
    while (mode == "endless" and i < ENDLESS) or i < len(words):
        await asyncio.sleep(delay)  # also lets a closed connection stop the stream
        yield chunk({"content": (words[i % len(words)]) + " "})
        i += 1
        if mode == "truncate" and i >= len(words) // 2:
            return
    yield chunk({}, "stop")
    if include_usage and mode != "no_usage":
        payload = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": usage,
        }
        yield b"data: " + json.dumps(payload).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


class ServerThread:
    """A uvicorn server of ``app`` on a free loopback port, in a daemon thread."""

    def __init__(self, app: Any, host: str = "127.0.0.1") -> None:
        self.sock = bind(host, 0)  # as the commands bind: answers sent without delay
        self.port = self.sock.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def main() -> None:
    """``python tests/gateway/stub_backend.py --port PORT``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args()
    uvicorn.run(stub_app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
