"""Which models a request tries, in order, and the log row of each try.

The routed model first; after a connection error, a timeout, a 429 or a 5xx (or an answer
that is not a completion) the router's next most probable model, at most
``max_fallbacks`` times. Each try is an ``attempts`` row of the decision log with the
router's probability of that model for the request (its propensity), why it was tried
(``routed``, ``session``, ``fallback``) and how it ended.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from torchroute.gateway.backends import Backend
from torchroute.gateway.keys import Key
from torchroute.gateway.ledger import RUNNING, Attempt


@dataclass(frozen=True)
class Candidate:
    """A model to try: its backend, the router's probability of it, why it is tried."""

    backend: Backend
    propensity: float
    reason: str


def candidates(
    routed: str,
    ranked: list[tuple[str, float]],
    backends: dict[str, Backend],
    max_fallbacks: int,
    first_reason: str = "routed",
) -> list[Candidate]:
    """The routed model, then up to ``max_fallbacks`` others, most probable first.

    Args:
        routed: the model the router chose (or the session's model).
        ranked: ``(model, probability)`` of every served model, most probable first
            (:meth:`~torchroute.serve.router.Router.ranked`; ``[]`` when the request is
            no longer pending: the routed model's probability is then logged as 0).
        backends: the backends by model name.
        max_fallbacks: the most models tried after the first.
        first_reason: ``routed`` or ``session``.
    """
    probs = dict(ranked)
    order = [routed] + [name for name, _ in ranked if name != routed]
    out = [Candidate(backends[routed], probs.get(routed, 0.0), first_reason)]
    out += [Candidate(backends[name], probs[name], "fallback") for name in order[1:]]
    return out[: 1 + max_fallbacks]


def attempt_row(
    request_id: str,
    candidate: Candidate,
    key: Key | None,
    reserved: float | None,
    outcome: str = RUNNING,
) -> Attempt:
    """The log row of one try as it starts: ``running``, charged its reservation (its end
    sets the outcome, the usage and the charge: :meth:`~torchroute.gateway.ledger.Ledger.end`)."""
    return Attempt(
        request_id=request_id,
        model=candidate.backend.name,
        propensity=candidate.propensity,
        reason=candidate.reason,
        outcome=outcome,
        cost=reserved,
        key=None if key is None else key.name,
        timestamp=time.time(),
    )
