"""The HTTP API of a :class:`Router` (FastAPI): JSON in and out, one-line errors.

``POST /route``, ``POST /feedback``, ``POST /models``, ``GET /health`` (a
:class:`~torchroute.serve.subset_router.SubsetRouter` answers ``/route`` with the set of
models of each query and takes the set's outcome as the score). Every request's
``Host`` header must be among ``allowed_hosts``; with a ``token``, every ``POST`` needs
``Authorization: Bearer <token>``. Bodies are strict JSON: a string is not a number and
``true`` is not a score. Errors answer ``{"detail": "<one line>"}`` with 400 (malformed
JSON, a Host not allowed), 401 (no or a wrong token), 403 (a ``POST`` from a page whose
``Origin`` is not an allowed host), 404 (feedback of which no id is pending), 409 (adding
a model already served), 413 (a body or a batch over the limits), 415 (a ``POST`` body not
declared ``application/json``), 422 (a field missing, of the wrong type or out of range,
a ``rho`` the router's learner cannot take, an unknown model, a prompt too long or not
valid Unicode, embeddings of the wrong size) or 503 (the decision log cannot be written;
nothing changed).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from torchroute.data.table import MAX_COST
from torchroute.serve.checks import DuplicateModelError
from torchroute.serve.docs_page import api_app
from torchroute.serve.limits import LimitError, Limits, check_batch, check_strings
from torchroute.serve.router import Router, StoreError
from torchroute.serve.security import (
    LOOPBACK_HOSTS,
    MAX_MODEL_NAME,
    host_allowed,
    token_matches,
)
from torchroute.serve.subset_router import SubsetRouter

log = logging.getLogger(__name__)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class RouteRequest(_Body):
    """``texts`` (``B`` strings) or ``embeddings`` (``[B, e]``); ``rho``: the trade-off of
    every query (a number) or of each (``B`` numbers), finite in ``[0, 1e8]``, other than the
    router's only for a learner that takes each request's rho
    (:mod:`~torchroute.serve.request_rho`); ``groups`` (``B`` group names) only for a
    subset router."""

    texts: list[str] | None = None
    embeddings: list[list[float]] | None = None
    rho: float | list[float] | None = None
    groups: list[str] | None = None


class FeedbackRequest(_Body):
    """``n`` request ids with their scores in ``[0, 1]``, costs and (optionally) models."""

    request_ids: list[str] = Field(min_length=1)
    scores: list[float]
    costs: list[float]
    models: list[str] | None = None


class ModelRequest(_Body):
    """A model to add and its price (mean cost per query): finite, in ``[0, 1e30]`` as a
    table's costs (larger ones overflow ``rho * price``)."""

    name: str = Field(min_length=1)
    price: float = Field(ge=0, le=MAX_COST, allow_inf_nan=False)


def _one_line(exc: RequestValidationError) -> tuple[int, str]:
    error = exc.errors()[0]
    if error.get("type") == "json_invalid":
        return 400, f"malformed JSON body: {error.get('ctx', {}).get('error', 'cannot parse')}"
    where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
    return 422, f"{where}: {error.get('msg', 'invalid value')}"


def detail_body(status: int, message: str) -> bytes:
    """``{"detail": message}``: the shape of serve's errors."""
    return json.dumps({"detail": message}).encode()


def media_type(value: str | None) -> str:
    """The media type of a ``Content-Type`` header, lower case, parameters dropped."""
    return (value or "").split(";", 1)[0].strip().lower()


class Guard:
    """ASGI middleware: the Host check, the bearer token of ``POST``s, cross-site requests,
    the body size limit.

    Runs before FastAPI reads anything: a request from a Host not allowed (400), a
    ``POST`` without the token (401), a ``POST`` whose body is not declared
    ``application/json`` (415: what a web page of another site can send without asking,
    a form or ``text/plain``) or sent by a page whose ``Origin`` is not an allowed host
    (403), or a body over ``max_body_bytes`` (413, counted as it arrives, whatever
    ``Content-Length`` says) never reaches a handler. ``error_body(status, message)``:
    the bytes of an error answer (default :func:`detail_body`).
    """

    def __init__(
        self,
        app: Any,
        token: str | None,
        allowed_hosts: Sequence[str],
        max_body_bytes: int,
        error_body: Callable[[int, str], bytes] = detail_body,
    ) -> None:
        self.app, self.token = app, token
        self.allowed_hosts, self.max_body_bytes = tuple(allowed_hosts), max_body_bytes
        self.error_body = error_body

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host")
        if not host_allowed(host, self.allowed_hosts):
            shown = repr(host[:80]) if host else "missing"
            return await self._reply(send, 400, f"Host {shown} is not allowed (--allowed-hosts)")
        guarded = scope["method"] not in ("GET", "HEAD") and self.token is not None
        if guarded and not token_matches(headers.get("authorization"), self.token):
            return await self._reply(
                send,
                401,
                "missing or wrong token: send the header 'Authorization: Bearer <token>'",
                [(b"www-authenticate", b"Bearer")],
            )
        if scope["method"] in ("POST", "PUT", "PATCH"):
            refusal = self._cross_site(headers)
            if refusal is not None:
                return await self._reply(send, *refusal)
        limit = self.max_body_bytes
        length = headers.get("content-length")
        too_big = f"request body over {limit} bytes (--max-body-bytes)"
        if length is not None and (not length.isdigit() or int(length) > limit):
            return await self._reply(send, 413, too_big)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return await self._reply(send, 413, too_big)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    def _cross_site(self, headers: dict[str, str]) -> tuple[int, str] | None:
        """``(status, message)`` refusing a body a page of another site could send, or
        ``None``: the body must be declared JSON (a page needs the server's consent, which
        is never given, to send that), and an ``Origin`` (sent by browsers) must be an
        allowed host."""
        declared = media_type(headers.get("content-type"))
        if declared != "application/json":
            shown = repr(declared[:80]) if declared else "missing"
            return 415, f"Content-Type {shown}: expected application/json"
        origin = headers.get("origin")
        if origin is not None and not host_allowed(urlsplit(origin).netloc, self.allowed_hosts):
            return 403, f"Origin {origin[:80]!r} is not allowed (a page of another site)"
        return None

    async def _reply(
        self,
        send: Callable[[dict], Awaitable[None]],
        status: int,
        message: str,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        await _reply(send, status, self.error_body(status, message), headers)


async def _reply(
    send: Callable[[dict], Awaitable[None]],
    status: int,
    body: bytes,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def create_app(
    router: Router,
    *,
    token: str | None = None,
    allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
    limits: Limits | None = None,
    docs: bool = False,
) -> FastAPI:
    """The FastAPI application serving ``router`` (handlers run in a thread pool).

    Args:
        router: the router served.
        token: the bearer token every ``POST`` must carry (``None``: none needed; serve on
            loopback only then).
        allowed_hosts: accepted ``Host`` headers without the port (``"*"``: any).
        limits: the request bounds (:class:`~torchroute.serve.limits.Limits`).
        docs: serve ``/openapi.json`` and ``/docs`` (a self-contained page: no script, nothing
            loaded from another host); off by default.
    """
    limits = limits or Limits()
    app = api_app(docs, title="torchroute", summary="a live model router learning from feedback")

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, message = _one_line(exc)
        return JSONResponse({"detail": message}, status_code=status)

    @app.exception_handler(LimitError)
    async def _limit(request: Request, exc: LimitError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail
        if isinstance(exc.__cause__, RecursionError):  # the body's JSON, parsed by FastAPI
            detail = "body: JSON nested too deeply to be read"
        return JSONResponse({"detail": detail}, exc.status_code, headers=exc.headers)

    @app.exception_handler(StoreError)
    async def _store(request: Request, exc: StoreError) -> JSONResponse:
        log.error("%s", exc)
        return JSONResponse({"detail": str(exc)}, status_code=503)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s", request.url.path)
        return JSONResponse(
            {"detail": f"internal error ({type(exc).__name__}); see the server log"},
            status_code=500,
        )

    @app.post("/route")
    def route(body: RouteRequest) -> dict[str, Any]:
        check_batch("texts", body.texts, limits, "--max-batch")
        check_batch("embeddings", body.embeddings, limits, "--max-batch")
        check_strings("texts", body.texts, limits.max_prompt_chars, "--max-prompt-chars")
        check_batch("groups", body.groups, limits, "--max-batch")
        check_strings("groups", body.groups, limits.max_prompt_chars, "--max-prompt-chars")
        extra: dict[str, Any] = {}
        if body.groups is not None:
            if not isinstance(router, SubsetRouter):
                raise HTTPException(422, "groups: only a subset router reads query groups")
            extra["groups"] = body.groups
        try:
            decisions = router.route(
                texts=body.texts, embeddings=body.embeddings, rho=body.rho, **extra
            )
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        return {"decisions": decisions}

    @app.post("/feedback")
    def feedback(body: FeedbackRequest) -> dict[str, Any]:
        check_batch("request_ids", body.request_ids, limits, "--max-batch")
        check_strings("request_ids", body.request_ids, limits.max_id_chars, "request ids")
        check_strings("models", body.models, MAX_MODEL_NAME, "model names")
        try:
            report = router.feedback(body.request_ids, body.scores, body.costs, body.models)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        if not report["applied"]:
            missing = report["unknown"] + report["duplicate"]
            raise HTTPException(
                404,
                f"no pending request for {missing[:5]} (unknown, expired or already answered)",
            )
        return report

    @app.post("/models")
    def add_model(body: ModelRequest) -> dict[str, Any]:
        try:
            router.add_model(body.name, body.price)
        except DuplicateModelError as exc:
            raise HTTPException(409, str(exc)) from exc
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        return {"models": list(router.arm_names)}

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", **router.status()}

    app.add_middleware(
        Guard, token=token, allowed_hosts=allowed_hosts, max_body_bytes=limits.max_body_bytes
    )
    return app
