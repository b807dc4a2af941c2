"""Calls to a backend's ``/chat/completions`` (``httpx``), bounded in time and size.

A call that fails before the backend's answer starts raises :class:`CallFailed` with the
outcome logged for it (``connect``, ``timeout``, ``429``, ``500``..., ``malformed``,
``too large``); the gateway then falls back. A 4xx other than 429 is the request's fault
and raises :class:`ClientError` (passed to the client, no fallback). A stream is read
event by event (server-sent events, ``data: {...}\\n\\n``) and handed on as it arrives;
its ``usage`` chunk is kept, and it stops with an outcome (``truncated``, ``timeout``,
``too large``, ``malformed``) when the backend ends it early, stalls, or exceeds the
bounds.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from torchroute.gateway.backends import Backend

DONE = b"[DONE]"


class CallFailed(Exception):
    """A backend call that gave no usable answer; ``outcome`` names why (logged)."""

    def __init__(self, outcome: str, detail: str) -> None:
        super().__init__(detail)
        self.outcome = outcome


class ClientError(Exception):
    """The backend refused the request itself (a 4xx other than 429): no fallback."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"the backend answered {status}")
        self.status, self.body = status, body


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


def _headers(backend: Backend) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "application/json"}
    if backend.api_key:
        headers["authorization"] = f"Bearer {backend.api_key}"
    return headers


def _failure(exc: Exception) -> CallFailed:
    if isinstance(exc, (httpx.TimeoutException, asyncio.TimeoutError)):
        return CallFailed("timeout", "the backend did not answer in time")
    if isinstance(exc, httpx.ConnectError):
        return CallFailed("connect", f"cannot connect to the backend ({exc})")
    return CallFailed("connect", f"the connection failed ({type(exc).__name__})")


async def _check_status(response: httpx.Response, max_bytes: int) -> None:
    status = response.status_code
    if status == 200:
        return
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > max_bytes:
            break
    if status == 429 or status >= 500:
        raise CallFailed(str(status), f"the backend answered {status}")
    raise ClientError(status, body[:max_bytes])


class Upstream:
    """The gateway's HTTP client of the backends.

    Args:
        client: a shared ``httpx.AsyncClient``.
        max_response_bytes: the most bytes one answer (or one stream) may have.
    """

    def __init__(self, client: httpx.AsyncClient, max_response_bytes: int) -> None:
        self.client, self.max_bytes = client, max_response_bytes

    async def complete(self, backend: Backend, body: dict[str, Any]) -> tuple[dict, Usage | None]:
        """One non-streamed answer: ``(response JSON, usage)``."""
        try:
            return await asyncio.wait_for(self._complete(backend, body), backend.timeout_s)
        except (httpx.HTTPError, asyncio.TimeoutError) as exc:
            raise _failure(exc) from None

    async def _complete(self, backend: Backend, body: dict) -> tuple[dict, Usage | None]:
        request = self.client.build_request(
            "POST",
            f"{backend.base_url}/chat/completions",
            json={**body, "model": backend.model, "stream": False},
            headers=_headers(backend),
            timeout=backend.timeout_s,
        )
        response = await self.client.send(request, stream=True)
        try:
            await _check_status(response, self.max_bytes)
            data = bytearray()
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > self.max_bytes:
                    raise CallFailed("too large", f"the answer is over {self.max_bytes} bytes")
        finally:
            await response.aclose()
        try:
            payload = json.loads(data)
            if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list):
                raise ValueError("no choices")
            usage = read_usage(payload)
        except ValueError as exc:
            raise CallFailed(
                "malformed", f"the backend's answer is not a completion ({exc})"
            ) from None
        return payload, usage

    async def stream(self, backend: Backend, body: dict[str, Any]) -> Stream:
        """Open a streamed answer; raises :class:`CallFailed` before its first byte."""
        request = self.client.build_request(
            "POST",
            f"{backend.base_url}/chat/completions",
            json={
                **body,
                "model": backend.model,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
            headers={**_headers(backend), "accept": "text/event-stream"},
            timeout=backend.timeout_s,
        )
        deadline = time.monotonic() + backend.timeout_s
        try:
            response = await asyncio.wait_for(
                self.client.send(request, stream=True), backend.timeout_s
            )
        except (httpx.HTTPError, asyncio.TimeoutError) as exc:
            raise _failure(exc) from None
        try:
            await _check_status(response, self.max_bytes)
        except BaseException:
            await response.aclose()
            raise
        return Stream(response, deadline, self.max_bytes)


class Stream:
    """An open streamed answer: iterate :meth:`events` for its events as they arrive.

    Each item is the complete events (``data: ...`` followed by a blank line) of what came
    in one read, so a burst goes on in one write; a chunk carrying only the usage (no
    choices) is dropped unless ``forward_usage``. After iteration, ``usage`` holds the
    usage chunk's counts (``None``: none came) and ``outcome`` is ``ok`` (``[DONE]``
    came) or why it stopped early: ``truncated`` (the backend closed it), ``timeout`` (no
    byte for ``timeout_s``, or past the call's deadline), ``too large``, ``malformed``.
    """

    def __init__(self, response: httpx.Response, deadline: float, max_bytes: int) -> None:
        self.response, self.deadline, self.max_bytes = response, deadline, max_bytes
        self.usage: Usage | None = None
        self.outcome = "truncated"
        self.forward_usage = False

    async def events(self) -> AsyncIterator[bytes]:
        """The stream's events, a read's worth at a time (the ``[DONE]`` event included)."""
        buffer, size = b"", 0
        try:
            async for chunk in self.response.aiter_bytes():  # each read bounded by timeout_s
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
                    return
                if self.outcome == "malformed":
                    return
                if time.monotonic() > self.deadline:
                    self.outcome = "timeout"
                    return
        except httpx.HTTPError as exc:
            self.outcome = _failure(exc).outcome
        finally:
            await self.response.aclose()

    def _read(self, event: bytes) -> tuple[bool, bool]:
        """Note the usage of an event: ``(is [DONE], carries only the usage)``."""
        for line in event.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == DONE:
                return True, False
            try:
                payload = json.loads(data)
                usage = read_usage(payload)
            except ValueError:
                self.outcome = "malformed"
                return False, False
            if usage is not None:
                self.usage = usage
                return False, not payload.get("choices")
        return False, False
