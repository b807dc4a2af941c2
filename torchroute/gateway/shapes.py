"""The OpenAI chat-completions request the gateway reads, the router's model names and the
text the router sees.

A request names the router, not a model: ``"router"`` routes with the default rho,
``"router-<rho>"`` with that rho (RouteLLM's convention). A router opened for that rho
serves it; otherwise the default router serves it when its learner takes each request's
rho (:mod:`~torchroute.serve.request_rho`). The field ``"rho"`` asks for a trade-off with
``"router"`` (not sent to the backend). The router sees the text of the conversation: the
last user message (``last``, the default) or every message as ``role: text`` lines
(``conversation``). Fields the gateway does not read (``temperature``, ``tools``, ...) go
to the backend unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from torchroute.serve.request_rho import MAX_RHO

ROUTER = "router"
PROMPT_MODES = ("last", "conversation")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class ContentPart(_Open):
    """A part of a message's content (``{"type": "text", "text": ...}`` is read)."""

    type: str
    text: str | None = None


class Message(_Open):
    """One message: a role and its content (a string, parts, or none for tool calls)."""

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None


class StreamOptions(_Open):
    """``{"include_usage": true}``: the last chunk of a stream carries the usage."""

    include_usage: bool | None = None


class ChatRequest(_Open):
    """``POST /v1/chat/completions``: the fields the gateway reads, strictly typed."""

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    rho: float | None = Field(default=None, ge=0, le=MAX_RHO, allow_inf_nan=False)


#: the fields the gateway reads and does not send to the backend
GATEWAY_FIELDS = ("model", "stream", "stream_options", "rho")


class FeedbackBody(BaseModel):
    """``POST /v1/feedback``: the score in ``[0, 1]`` of the answer to ``request_id``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    request_id: str = Field(min_length=1, max_length=64)
    score: float = Field(ge=0, le=1, allow_inf_nan=False)


def route_target(
    model: str, rho: float | None, default: float, served: Sequence[float], *, takes_any: bool
) -> tuple[float, float | None]:
    """``(router, request rho)``: the rho of the router that serves a request, and the rho
    the request carries to it (``None``: the router's own).

    ``model`` ``router`` asks for the field ``rho`` (else ``default``), ``router-<rho>``
    for that rho (the field, if given, must agree). A rho in ``served`` goes to its router;
    any other to the ``default`` router when ``takes_any`` (its learner takes each
    request's rho). A one-line ``ValueError`` otherwise.
    """
    names = ", ".join(model_ids(served))
    if model == ROUTER:
        wanted = rho
    elif model.startswith(ROUTER + "-"):
        try:
            wanted = float(model[len(ROUTER) + 1 :])
        except ValueError:
            wanted = math.nan
        if not (math.isfinite(wanted) and 0 <= wanted <= MAX_RHO):
            raise ValueError(f"model {model[:80]!r}: this gateway serves {names} (--rho)")
        if rho is not None and rho != wanted:
            raise ValueError(f"rho: {rho:g}, but the model {model[:80]!r} fixes rho={wanted:g}")
    else:
        raise ValueError(f"model {model[:80]!r}: name the router, one of {names}")
    if wanted is None:
        return default, None
    if wanted in served:
        return wanted, None
    if takes_any:
        return default, wanted
    if model == ROUTER:
        raise ValueError(
            f"rho: {wanted:g} is not served: this gateway serves {names} (--rho, --also-rho), "
            "and its learner learns the utility at one rho (objective: quality_cost takes any)"
        )
    raise ValueError(f"model {model[:80]!r}: this gateway serves {names} (--rho)")


def model_ids(served: Sequence[float]) -> list[str]:
    """The model names of the gateway: ``router`` and ``router-<rho>`` for each rho."""
    return [ROUTER, *(f"{ROUTER}-{rho:g}" for rho in served)]


def _text(message: Message) -> str:
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part.text for part in content if part.type == "text" and part.text)


def prompt_text(messages: Sequence[Message], mode: str = "last") -> str:
    """The text the router sees: the last user message (``last``) or the conversation as
    ``role: text`` lines (``conversation``). A one-line ``ValueError`` when it is empty."""
    if mode == "last":
        users = [m for m in messages if m.role == "user"]
        text = _text(users[-1]) if users else ""
        if not text:
            raise ValueError("messages: no user message with text to route on")
        return text
    text = "\n".join(f"{m.role}: {_text(m)}" for m in messages if _text(m))
    if not text:
        raise ValueError("messages: no text to route on")
    return text
