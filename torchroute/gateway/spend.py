"""What a call holds of its key's cap before it starts, and what it is charged when it ends.

A call's *ceiling* is the most tokens it can take: as prompt tokens, the size of the request
body in bytes (a tokenizer's token is at least one byte, and the body holds the messages,
tools and every other field the backend reads); as output tokens, the request's
``max_completion_tokens`` or ``max_tokens`` (else the gateway's ``max_output_tokens``),
times its ``n`` answers. Before a call the key reserves the ceiling at the dearest prices
(the highest input and the highest output price of the backends), so calls running
together can never pass the cap; each try is logged as it starts
with the ceiling at its own backend's prices.

A try ends charged (:func:`charge`):

- the backend's usage, the output tokens never fewer than the content chunks relayed to the
  client (each carries at least one token);
- no usage, but an answer was started or relayed, or the call was cut off while the
  backend worked (a client that left mid-stream, a stream cut short, an answer without
  usage, the gateway stopping): the try's reservation in full;
- nothing, when no answer came (a refused connection, a 429 or 5xx, a timeout before the
  first byte): the gateway falls back and the next try is charged instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchroute.gateway.backends import Backend
from torchroute.gateway.upstream import Usage

#: output tokens reserved for a request that names no ``max_tokens``
DEFAULT_MAX_OUTPUT_TOKENS = 4096


@dataclass(frozen=True)
class Ceiling:
    """The most tokens one call can take: ``prompt_tokens`` and ``output_tokens``."""

    prompt_tokens: int
    output_tokens: int

    def cost(self, backend: Backend) -> float:
        """The ceiling at ``backend``'s prices."""
        return backend.cost(self.prompt_tokens, self.output_tokens)


def ceiling(raw_body: bytes, raw: dict[str, Any], max_output_tokens: int) -> Ceiling:
    """The ceiling of a request: its body's bytes as prompt tokens; ``max_completion_tokens``
    or ``max_tokens`` (else ``max_output_tokens``) times ``n`` as output tokens."""
    limit = raw.get("max_completion_tokens") or raw.get("max_tokens") or max_output_tokens
    n = raw.get("n")
    answers = n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1
    return Ceiling(len(raw_body), int(limit) * answers)


def dearest_prices(backends: list[Backend]) -> tuple[float, float]:
    """``(input, output)``: the highest input and the highest output price of ``backends``
    (per million tokens; found once, at start-up)."""
    return (
        max(backend.input_per_mtok for backend in backends),
        max(backend.output_per_mtok for backend in backends),
    )


def reservation(ceiling: Ceiling, dearest: tuple[float, float]) -> float:
    """What a call holds of its key's cap: the ceiling at the ``dearest`` prices (at least
    what it can cost at any backend it may try)."""
    price_in, price_out = dearest
    return (ceiling.prompt_tokens * price_in + ceiling.output_tokens * price_out) / 1e6


def charge(
    backend: Backend, ceiling: Ceiling, usage: Usage | None, relayed: int, answered: bool
) -> float | None:
    """The cost a try is charged (``None``: nothing, no answer came).

    Args:
        backend: the model tried (its prices).
        ceiling: the call's ceiling (charged in full when the backend gave no usage).
        usage: the backend's token counts, if it reported them.
        relayed: the content chunks relayed to the client (0 for an answer sent whole).
        answered: whether any of the backend's answer came (a stream's first event, a body).
    """
    if usage is not None:
        return backend.cost(usage.input_tokens, max(usage.output_tokens, relayed))
    if answered or relayed > 0:
        return ceiling.cost(backend)
    return None


def check_output_tokens(value: int) -> int:
    """``max_output_tokens`` of a gateway: a whole number ``>= 1``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_output_tokens: expected a whole number >= 1, got {value!r}")
    return value


__all__ = [
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "Ceiling",
    "ceiling",
    "charge",
    "check_output_tokens",
    "dearest_prices",
    "reservation",
]
