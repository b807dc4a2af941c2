"""Calls to a backend's ``/chat/completions``, bounded in time and size.

A call that fails before the backend's answer starts raises :class:`CallFailed` with the
outcome logged for it (``connect``, ``timeout``, ``429``, ``500``, a redirect's ``302``...,
``empty``, ``malformed``, ``too large``, ``401``...); the gateway then falls back. A 4xx
that is the request's fault (not a refused backend key, an unknown model or a rate limit:
``BACKEND_FAULTS``) raises :class:`ClientError` (its sanitized message passed to the
client, no fallback). A stream is read event by event (server-sent events,
``data: {...}\\n\\n``) and handed on as it arrives; its ``usage`` chunk is kept, and it
stops with an outcome (``truncated``, ``timeout``, ``too large``, ``malformed``) when the
backend ends it early, stalls, or exceeds the bounds. The calls go over the keep-alive
connections of :mod:`torchroute.gateway.http1`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from torchroute.errors import CallFailed as CallFailed
from torchroute.errors import ClientError as ClientError
from torchroute.gateway.backends import Backend
from torchroute.gateway.http1 import (
    ConnectError,
    HTTPError,
    Pool,
    Response,
    Target,
    request_head,
    target,
    with_length,
    within,
)

DONE = b"[DONE]"
_DECODER = json.JSONDecoder()
#: seconds to wait for the end of a stream's body after its ``[DONE]`` event
FINISH_S = 1.0


# 4xx answers that are the backend's or the gateway's configuration's fault, not the
# request's: its key refused (401, 403, 407), the model or path unknown there (404), its
# rate limit (429). The gateway falls back on them as on a 5xx.
BACKEND_FAULTS = frozenset({401, 403, 404, 407, 429})


@dataclass
class Usage:
    """Token counts of one answer (``prompt_tokens``, ``completion_tokens``)."""

    input_tokens: int
    output_tokens: int


def read_usage(payload: Any) -> Usage | None:
    """The ``usage`` of a response or chunk (``None``: absent); ``ValueError`` if malformed."""
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise ValueError("usage is not an object")
    counts = [usage.get("prompt_tokens"), usage.get("completion_tokens")]
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        raise ValueError("usage.prompt_tokens / completion_tokens are not counts")
    return Usage(*counts)


def parse_event(data: bytes) -> Any:
    """The JSON value of an event's ``data`` (UTF-8, as server-sent events are, surrounding
    whitespace removed); ``ValueError`` if it is not one. ``json.loads`` without its
    encoding detection, which costs more than the parse itself on a chunk of a stream."""
    text = data.decode()  # a UnicodeDecodeError is a ValueError
    value, end = _DECODER.raw_decode(text)
    if end != len(text):
        raise ValueError(f"extra data after the JSON value at {end}")
    return value


def _has_content(payload: Any) -> bool:
    """Whether a chunk carries answer text (a choice's ``delta.content`` not empty)."""
    choices = payload.get("choices") if isinstance(payload, dict) else None
    for choice in choices if isinstance(choices, list) else ():
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and delta.get("content"):
            return True
    return False


def _encode(body: dict[str, Any]) -> bytes:
    """A request body as JSON (UTF-8, compact; NaN refused, as httpx encodes ``json=``)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _failure(exc: BaseException) -> CallFailed:
    if isinstance(exc, asyncio.TimeoutError):
        return CallFailed("timeout", "the backend did not answer in time")
    if isinstance(exc, ConnectError):
        return CallFailed("connect", f"cannot connect to the backend ({exc})")
    return CallFailed("connect", f"the connection failed ({type(exc).__name__})")


async def _check_status(response: Response, max_bytes: int) -> None:
    """Return for a 2xx (its body is read next); raise :class:`ClientError` for a 4xx that
    is the request's fault, :class:`CallFailed` for anything else (a redirect, a refused
    backend key, 429, 5xx, ...)."""
    status = response.status
    if 200 <= status < 300:
        return
    body = await response.read(max_bytes)
    if 400 <= status < 500 and status not in BACKEND_FAULTS:
        raise ClientError(status, body)
    raise CallFailed(str(status), f"the backend answered {status}")


class Upstream:
    """The gateway's HTTP client of the backends.

    Args:
        pool: the keep-alive connections (:class:`~torchroute.gateway.http1.Pool`).
        max_response_bytes: the most bytes one answer (or one stream) may have.
    """

    def __init__(self, pool: Pool, max_response_bytes: int) -> None:
        self.pool, self.max_bytes = pool, max_response_bytes
        self._heads: dict[tuple[Backend, bool], tuple[Target, bytes]] = {}

    def _request(
        self, backend: Backend, body: dict[str, Any], stream: bool
    ) -> tuple[Target, bytes]:
        """``(target, request bytes)`` of a call (the head built once per backend)."""
        known = self._heads.get((backend, stream))
        if known is None:
            where = target(f"{backend.base_url}/chat/completions")
            headers = [
                ("Accept", "text/event-stream" if stream else "application/json"),
                ("Content-Type", "application/json"),
            ]
            if backend.api_key:
                headers.append(("Authorization", f"Bearer {backend.api_key}"))
            known = self._heads[(backend, stream)] = (where, request_head(where, headers))
        where, head = known
        return where, with_length(head, _encode(body))

    async def complete(
        self, backend: Backend, body: dict[str, Any]
    ) -> tuple[dict, Usage | None, bytes]:
        """One non-streamed answer: ``(response JSON, usage, its bytes)``."""
        try:
            return await within(self._complete(backend, body), backend.timeout_s)
        except (HTTPError, asyncio.TimeoutError) as exc:
            raise _failure(exc) from None

    async def _complete(self, backend: Backend, body: dict) -> tuple[dict, Usage | None, bytes]:
        where, request = self._request(
            backend, {**body, "model": backend.model, "stream": False}, False
        )
        response = await self.pool.post(where, request)
        try:
            await _check_status(response, self.max_bytes)
            data = bytearray()
            async for chunk in response.iter_bytes():
                data += chunk
                if len(data) > self.max_bytes:
                    raise CallFailed("too large", f"the answer is over {self.max_bytes} bytes")
        finally:
            await response.aclose()
        if not data.strip():
            raise CallFailed("empty", f"the backend answered {response.status} with no body")
        try:
            payload = json.loads(data)
            if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list):
                raise ValueError("no choices")
            usage = read_usage(payload)
        except ValueError as exc:
            raise CallFailed(
                "malformed", f"the backend's answer is not a completion ({exc})"
            ) from None
        return payload, usage, bytes(data)

    async def stream(self, backend: Backend, body: dict[str, Any]) -> Stream:
        """Open a streamed answer; raises :class:`CallFailed` before its first byte."""
        full = {
            **body,
            "model": backend.model,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        deadline = time.monotonic() + backend.timeout_s
        try:
            where, request = self._request(backend, full, True)
            response = await within(self.pool.post(where, request), backend.timeout_s)
        except (HTTPError, asyncio.TimeoutError) as exc:
            raise _failure(exc) from None
        try:
            await within(_check_status(response, self.max_bytes), backend.timeout_s)
        except (HTTPError, asyncio.TimeoutError) as exc:
            await response.aclose()
            raise _failure(exc) from None
        except BaseException:
            await response.aclose()
            raise
        return Stream(response, deadline, self.max_bytes, backend.timeout_s)


class Stream:
    """An open streamed answer: iterate :meth:`events` for its events as they arrive.

    Each item is the complete events (``data: ...`` followed by a blank line) of what came
    in one read, so a burst goes on in one write; a chunk carrying only the usage (no
    choices) is dropped unless ``forward_usage``. ``relayed`` counts the chunks that carried
    answer text (each at least one token). After iteration, ``usage`` holds the
    usage chunk's counts (``None``: none came) and ``outcome`` is ``ok`` (``[DONE]``
    came) or why it stopped early: ``truncated`` (the backend closed it), ``timeout`` (no
    byte for ``timeout_s``, or past the call's deadline), ``too large``, ``malformed``.
    """

    def __init__(
        self, response: Response, deadline: float, max_bytes: int, read_timeout: float
    ) -> None:
        self.response, self.deadline, self.max_bytes = response, deadline, max_bytes
        self.read_timeout = read_timeout
        self.usage: Usage | None = None
        self.outcome = "truncated"
        self.forward_usage = False
        self.relayed = 0

    async def events(self) -> AsyncIterator[bytes]:
        """The stream's events, a read's worth at a time (the ``[DONE]`` event included)."""
        buffer, size = b"", 0
        chunks = self.response.iter_bytes(self.read_timeout)
        try:
            async for chunk in chunks:  # each read bounded by timeout_s
                size += len(chunk)
                if size > self.max_bytes:
                    self.outcome = "too large"
                    return
                buffer += chunk.replace(b"\r\n", b"\n")
                out, done = [], False
                while not done and b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    if not event.strip():
                        continue
                    done, usage_only = self._read(event)
                    if self.outcome == "malformed":
                        break
                    if self.forward_usage or not usage_only:
                        out.append(event + b"\n\n")
                if out:
                    yield b"".join(out)
                if done:
                    self.outcome = "ok"
                    await self._finish(chunks, size)
                    return
                if self.outcome == "malformed":
                    return
                if time.monotonic() > self.deadline:
                    self.outcome = "timeout"
                    return
        except (HTTPError, asyncio.TimeoutError) as exc:
            self.outcome = _failure(exc).outcome
        finally:
            await self.response.aclose()

    async def _finish(self, chunks: AsyncIterator[bytes], size: int) -> None:
        """Read what follows ``[DONE]`` (the end of the body, nothing more as a rule), so
        that the connection goes back to the pool rather than being closed; at most
        ``FINISH_S`` seconds and the remaining bytes of the bound, else it is closed."""

        async def drain() -> None:
            nonlocal size
            async for chunk in chunks:
                size += len(chunk)
                if size > self.max_bytes:
                    return

        with contextlib.suppress(HTTPError, asyncio.TimeoutError):
            await within(drain(), FINISH_S)  # else only the connection is lost

    def _read(self, event: bytes) -> tuple[bool, bool]:
        """Note the usage of an event: ``(is [DONE], carries only the usage)``."""
        for line in event.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == DONE:
                return True, False
            try:
                payload = parse_event(data)
                usage = read_usage(payload)
            except ValueError:
                self.outcome = "malformed"
                return False, False
            if _has_content(payload):
                self.relayed += 1
            if usage is not None:
                self.usage = usage
                return False, not payload.get("choices")
        return False, False
