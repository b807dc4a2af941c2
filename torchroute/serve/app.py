"""The HTTP API of a :class:`Router` (FastAPI): JSON in and out, one-line errors.

``POST /route``, ``POST /feedback``, ``POST /models``, ``GET /health``. Errors answer
``{"detail": "<one line>"}`` with 400 (malformed JSON), 422 (a field missing or of the
wrong type, a score outside [0, 1], an unknown model, embeddings of the wrong size), 404
(feedback of which no id is pending) or 409 (adding a model already served).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from torchroute.serve.checks import DuplicateModelError
from torchroute.serve.router import Router


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RouteRequest(_Body):
    """``texts`` (``B`` strings) or ``embeddings`` (``[B, e]``); ``rho`` must be the router's."""

    texts: list[str] | None = None
    embeddings: list[list[float]] | None = None
    rho: float | None = None


class FeedbackRequest(_Body):
    """``n`` request ids with their scores in ``[0, 1]``, costs and (optionally) models."""

    request_ids: list[str] = Field(min_length=1)
    scores: list[float]
    costs: list[float]
    models: list[str] | None = None


class ModelRequest(_Body):
    """A model to add and its price (mean cost per query)."""

    name: str = Field(min_length=1)
    price: float = Field(ge=0)


def _one_line(exc: RequestValidationError) -> tuple[int, str]:
    error = exc.errors()[0]
    if error.get("type") == "json_invalid":
        return 400, f"malformed JSON body: {error.get('ctx', {}).get('error', 'cannot parse')}"
    where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
    return 422, f"{where}: {error.get('msg', 'invalid value')}"


def create_app(router: Router) -> FastAPI:
    """The FastAPI application serving ``router`` (handlers run in a thread pool)."""
    app = FastAPI(title="torchroute", summary="a live model router learning from feedback")

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, message = _one_line(exc)
        return JSONResponse({"detail": message}, status_code=status)

    @app.post("/route")
    def route(body: RouteRequest) -> dict[str, Any]:
        try:
            decisions = router.route(texts=body.texts, embeddings=body.embeddings, rho=body.rho)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        return {"decisions": decisions}

    @app.post("/feedback")
    def feedback(body: FeedbackRequest) -> dict[str, Any]:
        try:
            report = router.feedback(body.request_ids, body.scores, body.costs, body.models)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        if not report["applied"]:
            missing = report["unknown"] + report["duplicate"]
            raise HTTPException(
                404, f"no pending request for {missing[:5]} (unknown or already answered)"
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

    return app
