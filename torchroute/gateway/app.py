"""The gateway's HTTP API (FastAPI): OpenAI's chat completions in front of a learned router.

``POST /v1/chat/completions`` routes the conversation's text with a
:class:`~torchroute.serve.router.Router` (one per rho served), calls the chosen model's
backend (streamed or not), falls back to the next most probable model on a failure, and
answers the backend's response plus ``torchroute`` (the request id, the model that
answered, the model routed, the tries) and the headers ``x-request-id`` and
``x-torchroute-model``. ``POST /v1/feedback`` learns from the answer's score (its cost is
known from the token usage), ``GET /v1/models`` lists the router names, ``GET /v1/usage``
the keys' spend, ``GET /health`` the routers' state.

Every error answers ``{"error": {"message": "<one line>", "type": ..., "code": status}}``:
400 malformed JSON or JSON the standard does not have (``NaN``, a lone surrogate; the field
named), a ``Host`` not allowed, 401 no or a wrong key, 403 a page whose ``Origin`` is not
an allowed host, 404 feedback for an unknown request or an unknown path, 405 a wrong
method, 409 feedback that cannot apply (already answered, withdrawn, no cost known), 413 a
body over the limit, 415 a body not declared ``application/json``, 422 a field of the wrong
type, an unknown router name, a prompt too long, 429 a key over its cap (no backend
called), a backend's own 4xx (its short message only, secrets redacted), 502 every model
tried failed, 503 the log cannot be written.

(Over 400 lines: the :class:`Gateway` request path, routing, the tries with their fallbacks
and the log rows of each, shares one lock and the routers' state; the pieces that do not are
in the package's other modules.)
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from torchroute.errors import GatewayError as GatewayError
from torchroute.gateway.backends import Backend
from torchroute.gateway.event_stream import EventStreamResponse
from torchroute.gateway.fallbacks import Candidate, attempt_row, candidates
from torchroute.gateway.http1 import Pool
from torchroute.gateway.json_body import BodyError, read_json
from torchroute.gateway.keys import BudgetError, Key, Keys
from torchroute.gateway.ledger import INTERRUPTED, Ledger
from torchroute.gateway.redact import backend_message
from torchroute.gateway.sessions import Sessions
from torchroute.gateway.shapes import (
    GATEWAY_FIELDS,
    ROUTER,
    ChatRequest,
    FeedbackBody,
    model_ids,
    prompt_text,
    route_target,
)
from torchroute.gateway.spend import (
    DEFAULT_MAX_OUTPUT_TOKENS,
    Ceiling,
    ceiling,
    charge,
    check_output_tokens,
    dearest_prices,
    reservation,
)
from torchroute.gateway.upstream import CallFailed, ClientError, Stream, Upstream, Usage
from torchroute.serve.app import LOOPBACK_HOSTS, Guard
from torchroute.serve.limits import LimitError, Limits, check_strings
from torchroute.serve.pacer import DEFAULT_ETA, Pacer
from torchroute.serve.request_rho import check_pacable, takes_request_rho
from torchroute.serve.router import Router, StoreError
from torchroute.serve.subset_router import SubsetRouter

log = logging.getLogger(__name__)

SESSION_HEADER = "x-session-id"
#: what the gateway answers (named by a 404 or 405)
ENDPOINTS = (
    "POST /v1/chat/completions, POST /v1/feedback, GET /v1/models, GET /v1/usage, GET /health"
)


def error_response(status: int, message: str, kind: str = "invalid_request_error") -> Response:
    """``{"error": {"message", "type", "code"}}`` (the shape OpenAI clients read)."""
    body = {"error": {"message": message, "type": kind, "code": status}}
    return JSONResponse(body, status_code=status)


def error_body(status: int, message: str) -> bytes:
    """The bytes of :func:`error_response`'s body (for the checks in front of the app)."""
    kind = "authentication_error" if status == 401 else "invalid_request_error"
    return json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()


def _validation_line(exc: ValidationError) -> str:
    error = exc.errors()[0]
    if error.get("type") == "json_invalid":  # the body was read as JSON before: its depth
        reason = error.get("ctx", {}).get("error", "cannot parse")
        if "recursion limit" in reason:
            raise GatewayError(400, f"body: JSON nested too deeply to be read ({reason})")
        raise GatewayError(400, f"malformed JSON body: {reason}")
    where = ".".join(str(p) for p in error.get("loc", ())) or "body"
    return f"{where}: {error.get('msg', 'invalid value')}"


def _read_body(raw_body: bytes) -> Any:
    """The body's JSON value; :class:`GatewayError` 400 when it is not standard JSON."""
    try:
        return read_json(raw_body)
    except BodyError as exc:
        raise GatewayError(400, str(exc)) from None


class Gateway:
    """Routes OpenAI chat requests over backends; learns from feedback.

    Built, it adds each backend missing from a router to it (``Router.add_model``, at the
    backend's ``prior_price``), opens each router's :class:`~torchroute.gateway.ledger.Ledger`,
    marks the tries a stop of the gateway cut short ``interrupted`` (charged their
    reservation), counts the spend logged by each router against the keys and withdraws the
    requests so cut short.

    Args:
        routers: one router per rho served (``router-<rho>``); each router's models must
            have a backend.
        backends: ``{model name: Backend}``.
        default_rho: the rho of ``model: "router"`` (default: the first router's).
        keys: the gateway keys (default: none needed).
        session_ttl: seconds a conversation keeps its model (0: no sessions).
        max_fallbacks: the most models tried after the routed one.
        prompt: what the router sees: ``last`` (user message) or ``conversation``.
        limits: the body and prompt bounds (``max_prompt_chars`` applies to the text the
            router sees).
        max_response_bytes: the most bytes of one backend answer or stream.
        inline_route_ms: the mean CPU time (ms) of a routing decision under which it runs
            on the event loop rather than in a worker thread (0: always in a thread).
        max_output_tokens: the output tokens reserved for a request without
            ``max_tokens`` (:mod:`~torchroute.gateway.spend`); a capped key's request is
            sent with this ``max_tokens``.
        budget: a spend target (mean cost per request) of the requests to ``router``
            without a rho of their own, from keys without a budget of their own (``None``:
            none). A key's ``budget`` (the keys file) paces that key's requests; a key with
            one may not name a rho. Each pacer (:mod:`~torchroute.serve.pacer`) sets the
            rho of its requests from their charges so far, one step per charged call, its
            state written with the charge in the default router's log; the default
            router's learner must take each request's rho.
        budget_eta: the pacers' step.
    """

    def __init__(
        self,
        routers: Sequence[Router],
        backends: dict[str, Backend],
        *,
        default_rho: float | None = None,
        keys: Keys | None = None,
        session_ttl: float = 0.0,
        max_fallbacks: int = 2,
        prompt: str = "last",
        limits: Limits | None = None,
        max_response_bytes: int = 8 << 20,
        inline_route_ms: float = 2.0,
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        budget: float | None = None,
        budget_eta: float = DEFAULT_ETA,
    ) -> None:
        if not routers:
            raise ValueError("a gateway needs at least one router")
        for router in routers:
            if isinstance(router, SubsetRouter):
                raise ValueError(
                    f"{type(router.learner).__name__} routes each query to a set of models; "
                    "a gateway serves routers that choose one"
                )
        by_rho = {router.rho: router for router in routers}
        if len(by_rho) != len(routers):
            raise ValueError("two routers serve the same rho")
        for rho, router in by_rho.items():
            missing = [name for name in router.arm_names if name not in backends]
            if missing:
                raise ValueError(
                    f"model {missing[0]!r} of the router (rho={rho:g}) has no backend; add it "
                    "to the backends file"
                )
        self.routers = by_rho
        self.rhos = list(self.routers)
        self.default_rho = self.rhos[0] if default_rho is None else float(default_rho)
        #: whether the default router's learner takes each request's rho (then it serves
        #: every rho no other router is opened for)
        self.takes_any_rho = takes_request_rho(self.routers[self.default_rho].learner)
        self.backends = dict(backends)
        self.keys = keys or Keys([])
        self.sessions = Sessions(session_ttl)
        self.max_fallbacks, self.prompt = int(max_fallbacks), prompt
        self.limits = limits or Limits()
        self.max_response_bytes = int(max_response_bytes)
        self.upstream: Upstream | None = None
        self.inline_route_s = float(inline_route_ms) / 1e3
        self.max_output_tokens = check_output_tokens(max_output_tokens)
        self.dearest = dearest_prices(list(self.backends.values()))
        #: {rho: moving mean of a routing decision's CPU time in seconds} (none yet: the
        #: first decision of each router runs in a worker thread)
        self.route_cpu: dict[float, float] = {}
        #: {rho: the ledger of the router's backend calls and their charges}
        self.ledgers: dict[float, Ledger] = {}
        for rho, router in self.routers.items():
            for name, backend in self.backends.items():  # as POST /models of serve
                if name not in router.arm_names:
                    router.add_model(name, backend.prior_price)
            ledger = self.ledgers[rho] = Ledger(router)
            cut, unanswered = ledger.recover()
            self.keys.add_spent(ledger.spend())
            ledger.withdraw(cut)
            self._withdraw_unanswered(router, ledger, unanswered)
        self.pacers = self._open_pacers(budget, budget_eta)

    def _open_pacers(self, budget: float | None, eta: float) -> dict[str | None, Pacer]:
        """``{key name: its pacer}`` of the keys with a budget, and ``{None: pacer}`` of
        ``budget``, each as the default router's log holds it."""
        wanted = [(k.name, f"key:{k.name}", k.budget) for k in self.keys.keys if k.budget]
        if budget is not None:
            wanted.append((None, "router", budget))
        if not wanted:
            return {}
        default = self.routers[self.default_rho]
        flag = "--budget" if budget is not None else f"the budget of key {wanted[0][0]!r}"
        check_pacable(default.learner, self.default_rho, flag)
        return {
            owner: default.query(
                partial(Pacer.open, name=name, budget=b, eta=eta, rho=self.default_rho)
            )
            for owner, name, b in wanted
        }

    def _withdraw_unanswered(self, router: Router, ledger: Ledger, ids: list[str]) -> None:
        """Withdraw routed requests the gateway stopped before calling a backend, each with
        an ``interrupted`` row (nothing called: nothing charged)."""
        for rid in ids:
            model = router.routed_model(rid)
            if model is None or model not in self.backends:
                continue
            propensity = dict(router.ranked(rid))[model]
            candidate = Candidate(self.backends[model], propensity, "routed")
            ledger.add(attempt_row(rid, candidate, None, None, INTERRUPTED), withdraw=True)

    # -- requests -------------------------------------------------------------------------

    def identify(self, request: Request) -> Key | None:
        """The caller's key; :class:`GatewayError` 401 when one is needed and missing."""
        if not self.keys.required:
            return None
        key = self.keys.identify(request.headers.get("authorization"))
        if key is None:
            raise GatewayError(
                401,
                "missing or wrong key: send the header 'Authorization: Bearer <key>'",
                "authentication_error",
            )
        return key

    async def chat(self, request: Request, raw_body: bytes) -> Response:
        """``POST /v1/chat/completions``."""
        key = self.identify(request)
        raw = _read_body(raw_body)
        try:
            chat = ChatRequest.model_validate_json(raw_body)
        except ValidationError as exc:
            raise GatewayError(422, _validation_line(exc)) from None
        try:
            served, own = route_target(
                chat.model, chat.rho, self.default_rho, self.rhos, takes_any=self.takes_any_rho
            )
            text = prompt_text(chat.messages, self.prompt)
        except ValueError as exc:
            raise GatewayError(422, str(exc)) from None
        check_strings("prompt", [text], self.limits.max_prompt_chars, "--max-prompt-chars")
        pacer = self._pacer(key, chat.model == ROUTER and chat.rho is None)
        if pacer is not None:
            own = pacer.rho  # the default router's: route_target gave it
        router = self.routers[served]
        rho = served if own is None else own
        session_id = request.headers.get(SESSION_HEADER) or chat.user
        if session_id is not None and len(session_id) > self.limits.max_id_chars:
            raise GatewayError(422, f"session id over {self.limits.max_id_chars} characters")
        limit = ceiling(raw_body, raw, self.max_output_tokens)
        estimate = reservation(limit, self.dearest)
        try:
            self.keys.reserve(key, estimate)
        except BudgetError as exc:
            raise GatewayError(429, str(exc), "insufficient_quota") from None
        streaming = False
        try:
            conversation = ("paced", served) if pacer is not None else rho  # its turns alike
            scope = None if session_id is None else (key and key.name, conversation, session_id)
            request_id, routed, reason, ranked = await self._decide(router, text, scope, own)
            tries = candidates(routed, ranked, self.backends, self.max_fallbacks, reason)
            body = {k: v for k, v in raw.items() if k not in GATEWAY_FIELDS}
            capped = key is not None and key.cap is not None
            if capped and not (chat.max_completion_tokens or chat.max_tokens):
                body["max_tokens"] = self.max_output_tokens  # the call stays within its hold
            info = {"request_id": request_id, "routed": routed, "rho": rho}
            call = _Call(self.ledgers[served], key, limit, pacer=pacer)
            if chat.stream:
                include_usage = bool(chat.stream_options and chat.stream_options.include_usage)
                response = await self._stream(router, tries, body, info, call, include_usage)
                streaming = isinstance(response, EventStreamResponse)
                if streaming:
                    call.release = partial(self.keys.settle, key, estimate)
                return response
            return await self._complete(router, tries, body, info, call)
        finally:
            if not streaming:
                self.keys.settle(key, estimate)

    def _pacer(self, key: Key | None, plain: bool) -> Pacer | None:
        """The pacer of a request of ``key`` (``plain``: model ``router`` without a rho);
        a :class:`GatewayError` 422 for a key with a budget naming a rho."""
        if key is not None and key.name in self.pacers:
            if not plain:
                raise GatewayError(
                    422,
                    f"rho: key {key.name!r} has a budget ({key.budget:g} per request): its "
                    "requests' rho is set from its spend; send model 'router' without a rho",
                )
            return self.pacers[key.name]
        return self.pacers.get(None) if plain else None

    async def _decide(
        self, router: Router, text: str, scope: tuple | None, rho: float | None = None
    ) -> tuple:
        """``(request_id, model, reason, ranked)``: the session's request, or a new routed
        one (with the request's ``rho``; ``None``: the router's), and every model's
        probability for it.

        The decision runs on the event loop while the router's decisions have been quick
        (their mean CPU time, :attr:`route_cpu`, at most ``inline_route_ms``), else in a
        worker thread (a language-model encoder): a thread hop costs more CPU than a
        sub-millisecond decision, and its threads contend for the GIL under load.
        """
        session = None if scope is None else self.sessions.get(scope)

        def decide() -> tuple:
            start = time.thread_time()
            if session is not None and router.routed_model(session.request_id) == session.model:
                rid, model, reason = session.request_id, session.model, "session"
            else:
                (decision,) = router.route(texts=[text], rho=rho)
                rid, model, reason = decision["request_id"], decision["model"], "routed"
            return rid, model, reason, router.ranked(rid), time.thread_time() - start

        cpu = self.route_cpu.get(router.rho)
        try:
            if cpu is not None and self.inline_route_s > 0 and cpu <= self.inline_route_s:
                rid, model, reason, ranked, spent = decide()
            else:
                rid, model, reason, ranked, spent = await anyio.to_thread.run_sync(decide)
        except ValueError as exc:
            raise GatewayError(422, str(exc)) from None
        self.route_cpu[router.rho] = spent if cpu is None else cpu + 0.2 * (spent - cpu)
        if scope is not None and reason == "routed":
            self.sessions.put(scope, rid, model)
        return rid, model, reason, ranked

    def _begin(self, call: _Call, rid: str, candidate: Candidate) -> int:
        """Log a try as it starts (charged its reservation until it ends); its ``pos``.
        One SQLite row on the event loop: cheaper than a thread hop."""
        reserved = call.limit.cost(candidate.backend)
        return call.ledger.begin(attempt_row(rid, candidate, call.key, reserved))

    async def _fall_back(
        self, call: _Call, rid: str, pos: int, candidate: Candidate, outcome: str, errors: list
    ) -> None:
        """Log a try of ``candidate`` that failed before any answer (charged nothing) and
        note it in ``errors`` (the next one follows)."""
        call.ledger.end(rid, pos, outcome, None, None)
        errors.append(f"{candidate.backend.name}: {outcome}")

    async def _failed(self, router: Router, info: dict, errors: list[str]) -> Response:
        await anyio.to_thread.run_sync(router.withdraw, [info["request_id"]])
        self.sessions.end(info["request_id"])
        message = "every model tried failed (" + ", ".join(errors) + ")"
        response = error_response(502, message, "upstream_error")
        response.headers["x-request-id"] = info["request_id"]
        return response

    async def _client_error(
        self, call: _Call, rid: str, pos: int, candidate: Candidate, exc: ClientError
    ) -> Response:
        """The backend's refusal of the request (a 4xx other than 429), logged: its status
        and, of its body, only its short message with every secret redacted."""
        call.ledger.end(rid, pos, str(exc.status), None, None, withdraw=True)
        self.sessions.end(rid)
        secrets = [b.api_key for b in self.backends.values() if b.api_key]
        message = backend_message(exc.body, secrets)
        text = f"the backend of {candidate.backend.name} refused the request ({exc.status})"
        response = error_response(exc.status, f"{text}: {message}" if message else text)
        response.headers["x-request-id"] = rid
        response.headers["x-torchroute-model"] = candidate.backend.name
        return response

    async def _complete(
        self, router: Router, tries: list[Candidate], body: dict, info: dict, call: _Call
    ) -> Response:
        rid, errors, upstream = info["request_id"], [], self._client()
        for i, candidate in enumerate(tries):
            pos = self._begin(call, rid, candidate)
            try:
                payload, usage, data = await upstream.complete(candidate.backend, body)
            except CallFailed as exc:
                await self._fall_back(call, rid, pos, candidate, exc.outcome, errors)
                continue
            except ClientError as exc:
                return await self._client_error(call, rid, pos, candidate, exc)
            except BaseException:  # cancelled: the answer may have been billed
                self._end(call, rid, pos, candidate, "client closed", None, 0, True, False)
                raise
            learnable = i == 0 and usage is not None
            cost = self._end(call, rid, pos, candidate, "ok", usage, 0, True, learnable)
            extra = self._info(info, candidate, errors, cost)
            return Response(
                _with_info(data, payload, extra),
                headers=_headers(rid, candidate, errors),
                media_type="application/json",
            )
        return await self._failed(router, info, errors)

    async def _stream(
        self,
        router: Router,
        tries: list[Candidate],
        body: dict,
        info: dict,
        call: _Call,
        include_usage: bool,
    ) -> Response:
        rid, errors, upstream = info["request_id"], [], self._client()
        for i, candidate in enumerate(tries):
            pos = self._begin(call, rid, candidate)
            try:
                stream = await upstream.stream(candidate.backend, body)
            except CallFailed as exc:
                await self._fall_back(call, rid, pos, candidate, exc.outcome, errors)
                continue
            except ClientError as exc:
                return await self._client_error(call, rid, pos, candidate, exc)
            except BaseException:  # cancelled: the backend may have started answering
                self._end(call, rid, pos, candidate, "client closed", None, 0, True, False)
                raise
            stream.forward_usage = include_usage
            events = stream.events()
            try:
                first = await anext(events, None)  # a stream failing before its first event
            except BaseException:
                self._end(call, rid, pos, candidate, "client closed", None, 0, True, False)
                raise
            if first is None and stream.outcome != "ok":  # falls back like any other call
                await self._fall_back(call, rid, pos, candidate, stream.outcome, errors)
                continue
            relay = self._relay(call, rid, pos, candidate, i == 0, stream, first, events)
            return EventStreamResponse(relay, _headers(rid, candidate, errors))
        return await self._failed(router, info, errors)

    def _end(
        self,
        call: _Call,
        rid: str,
        pos: int,
        candidate: Candidate,
        outcome: str,
        usage: Usage | None,
        relayed: int,
        answered: bool,
        learnable: bool,
    ) -> float | None:
        """Log how a try that got an answer ended, charge its key, end the session when
        there is nothing to learn; the cost charged. A log that cannot be written is
        logged, the charge still counted (the caller may be a cancelled relay)."""
        cost = charge(candidate.backend, call.limit, usage, relayed, answered)
        tokens = None if usage is None else (usage.input_tokens, usage.output_tokens)
        paced = None
        if call.pacer is not None and cost is not None:
            paced = call.pacer.stepped(torch.tensor([cost], dtype=torch.float64))
        rows = () if paced is None else [call.pacer.row(paced)]
        try:
            call.ledger.end(rid, pos, outcome, tokens, cost, withdraw=not learnable, pacers=rows)
            if paced is not None:
                call.pacer.take(paced)
        except StoreError as exc:
            log.error("%s", exc)
        if not learnable:
            self.sessions.end(rid)
        if cost is not None:
            self.keys.add(call.key, cost)
        return cost

    async def _relay(
        self,
        call: _Call,
        rid: str,
        pos: int,
        candidate: Candidate,
        routed: bool,
        stream: Stream,
        first: bytes | None,
        events: AsyncIterator[bytes],
    ) -> AsyncIterator[bytes]:
        """The backend's events as they come (``first`` already read from ``events``);
        the try is logged and charged when the stream ends, however it ends."""
        outcome = "client closed"
        try:
            if first is not None:
                yield first
            async for event in events:
                yield event
            outcome = stream.outcome
            if outcome != "ok":
                message = f"the answer of {candidate.backend.name} stopped early ({outcome})"
                error = {"error": {"message": message, "type": "upstream_error", "code": 502}}
                yield b"data: " + json.dumps(error).encode() + b"\n\n"
        finally:  # synchronous: this also runs when the client went away (cancelled)
            learnable = routed and outcome == "ok" and stream.usage is not None
            self._end(
                call, rid, pos, candidate, outcome, stream.usage, stream.relayed, True, learnable
            )
            if call.release is not None:
                call.release()

    def _info(self, info: dict, candidate: Candidate, errors: list[str], cost: float | None):
        return {
            **info,
            "model": candidate.backend.name,
            "propensity": candidate.propensity,
            "fallbacks": errors,
            "cost": cost,
        }

    def _client(self) -> Upstream:
        if self.upstream is None:
            pool = Pool(max_connections=256, max_idle=64)
            self.upstream = Upstream(pool, self.max_response_bytes)
        return self.upstream

    async def aclose(self) -> None:
        """Close the connections to the backends."""
        if self.upstream is not None:
            await self.upstream.pool.aclose()
            self.upstream = None

    async def feedback(self, request: Request, raw_body: bytes) -> dict[str, Any]:
        """``POST /v1/feedback``: learn from the score of an answered request, once."""
        key = self.identify(request)
        _read_body(raw_body)
        try:
            body = FeedbackBody.model_validate_json(raw_body)
        except ValidationError as exc:
            raise GatewayError(422, _validation_line(exc)) from None
        rid = body.request_id
        for router in self.routers.values():
            status = await anyio.to_thread.run_sync(router.request_status, rid)
            if status is not None:
                break
        else:
            raise GatewayError(404, f"no request {rid!r} was routed here")
        ledger = self.ledgers[router.rho]
        tries = await anyio.to_thread.run_sync(ledger.attempts, rid)
        owners = {t.key for t in tries if t.key is not None}  # none: no call logged yet
        if key is not None and not key.admin and owners - {key.name}:
            raise GatewayError(404, f"no request {rid!r} was routed here")
        if status != "pending":
            why = {
                "answered": "its feedback was applied before",
                "withdrawn": "its routed model did not answer it (a fallback did, or none, or "
                "the backend gave no usage): there is nothing to learn",
                "expired": "it waited longer than --pending-ttl",
                "dropped": "it was dropped over --max-pending",
            }[status]
            raise GatewayError(409, f"request {rid!r} takes no feedback: {why}")
        cost = await anyio.to_thread.run_sync(ledger.known_cost, rid)
        model = await anyio.to_thread.run_sync(router.routed_model, rid)
        if cost is None or model is None:
            raise GatewayError(409, f"request {rid!r} has no answer yet (its cost is unknown)")
        report = await anyio.to_thread.run_sync(
            partial(router.feedback, [rid], [body.score], [cost], [model])
        )
        if not report["applied"]:
            raise GatewayError(409, f"request {rid!r} takes no feedback: it was answered before")
        self.sessions.end(rid)
        return {"request_id": rid, "applied": True, "model": model, "cost": cost}

    def models(self, request: Request) -> dict[str, Any]:
        """``GET /v1/models``: the router names."""
        self.identify(request)
        return {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "torchroute"}
                for name in model_ids(self.rhos)
            ],
        }

    def usage(self, request: Request) -> dict[str, Any]:
        """``GET /v1/usage``: the caller's spend (every key's for an admin key), with its
        pacer's state (``pacer``) for a key with a budget."""
        rows = self.keys.usage(self.identify(request))
        for row in rows:
            if row["key"] in self.pacers:
                row["pacer"] = self.pacers[row["key"]].status()
        return {"keys": rows}

    def health(self) -> dict[str, Any]:
        """``GET /health``: each router's :meth:`~torchroute.serve.router.Router.status`,
        and the state of the ``--budget`` pacer (``pacer``, only with one)."""
        out = {
            "status": "ok",
            "routers": {f"{rho:g}": r.status() for rho, r in self.routers.items()},
        }
        if None in self.pacers:
            out["pacer"] = self.pacers[None].status()
        return out


@dataclass
class _Call:
    """One chat call's spend: its router's ledger, the caller's key, the call's ceiling and
    (for a stream that outlives :meth:`Gateway.chat`) how to release its reservation."""

    ledger: Ledger
    key: Key | None
    limit: Ceiling
    release: Callable[[], None] | None = None
    pacer: Pacer | None = None


def _with_info(data: bytes, payload: dict[str, Any], info: dict[str, Any]) -> bytes:
    """The backend's answer ``data`` (the JSON object ``payload``) with the key
    ``torchroute: info`` added: its bytes as they came, the key spliced in before the
    closing brace (re-encoded only where the backend sent a ``torchroute`` key, or bytes
    that are not a UTF-8 JSON object)."""
    body = data.strip()
    if "torchroute" in payload or not (body.startswith(b"{") and body.endswith(b"}")):
        return json.dumps(
            {**payload, "torchroute": info}, ensure_ascii=False, separators=(",", ":")
        ).encode()
    extra = json.dumps(info, ensure_ascii=False, separators=(",", ":"))
    return b'%s,"torchroute":%s}' % (body[:-1], extra.encode())


def _headers(rid: str, candidate: Candidate, errors: list[str]) -> dict[str, str]:
    return {
        "x-request-id": rid,
        "x-torchroute-model": candidate.backend.name,
        "x-torchroute-fallbacks": str(len(errors)),
    }


def create_gateway_app(
    gateway: Gateway, *, allowed_hosts: Sequence[str] = LOOPBACK_HOSTS, docs: bool = False
) -> FastAPI:
    """The FastAPI application of ``gateway`` (the ``Host`` check and the body limit of
    ``serve`` in front; the key check in each handler).

    ``docs``: serve ``/openapi.json`` and ``/docs`` as ``serve --docs`` does (a
    self-contained page, nothing loaded from another host); off by default, so the
    gateway answers only its API.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await gateway.aclose()

    from torchroute.serve.docs_page import api_app

    app = api_app(docs, title="torchroute gateway", lifespan=lifespan)

    @app.exception_handler(GatewayError)
    async def _gateway_error(request: Request, exc: GatewayError) -> Response:
        return error_response(exc.status, str(exc), exc.kind)

    @app.exception_handler(LimitError)
    async def _limit(request: Request, exc: LimitError) -> Response:
        return error_response(exc.status, str(exc))

    @app.exception_handler(StoreError)
    async def _store(request: Request, exc: StoreError) -> Response:
        log.error("%s", exc)
        return error_response(503, str(exc), "server_error")

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> Response:
        log.exception("internal error on %s", request.url.path)
        return error_response(500, f"internal error ({type(exc).__name__})", "server_error")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        where = f"{request.method} {request.url.path[:80]!r}"
        if exc.status_code == 404:
            message = f"{where}: no such endpoint (the gateway answers {ENDPOINTS})"
        elif exc.status_code == 405:
            message = f"{where}: method not allowed (the gateway answers {ENDPOINTS})"
        else:
            message = f"{where}: {exc.detail}"
        response = error_response(exc.status_code, message)
        response.headers.update(exc.headers or {})
        return response

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await gateway.chat(request, await request.body())

    @app.post("/v1/feedback")
    async def feedback(request: Request) -> dict[str, Any]:
        return await gateway.feedback(request, await request.body())

    @app.get("/v1/models")
    def models(request: Request) -> dict[str, Any]:
        return gateway.models(request)

    @app.get("/v1/usage")
    def usage(request: Request) -> dict[str, Any]:
        return gateway.usage(request)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return gateway.health()

    app.add_middleware(
        Guard,
        token=None,
        allowed_hosts=allowed_hosts,
        max_body_bytes=gateway.limits.max_body_bytes,
        error_body=error_body,
    )
    return app
