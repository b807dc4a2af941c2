"""The trade-off ``rho`` of each request: checked, and served only by learners that take it.

A request may carry its own ``rho`` (utility per unit of cost, in the table's cost unit).
A learner serves such requests when it decides ``argmax y - rho c`` with the request's rho
and learns the score and cost rather than the utility: it says so with its attribute
``Learner.per_request_rho`` (a class attribute, or a property where its ``objective``
decides; :func:`takes_request_rho`). Any other learner (it learns the utility at one rho)
serves only requests whose rho is the router's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torchroute.errors import InputError

#: the largest rho a request may carry: with a price up to ``MAX_COST = 1e30`` the product
#: ``rho * price`` stays below float32's largest number (3.4e38)
MAX_RHO = 1e8


def takes_request_rho(learner: object) -> bool:
    """Whether ``learner`` decides with each request's ``Context.rho`` (``[R, B]``).

    Read from the learner's ``per_request_rho`` (true for the static score routers and the
    ridge learners with ``objective: quality_cost``, which learn score and cost, so any rho
    can be applied at decision time); an object without it learns a utility at one rho.
    """
    return bool(getattr(learner, "per_request_rho", False))


def request_rhos(rho: float | Sequence[float] | None, batch: int) -> list[float] | None:
    """The ``batch`` rhos of a route call, checked: one number for every query, or one per
    query; ``None`` stays ``None`` (the router's own rho).

    Raises:
        InputError: a value not finite, below 0 or above :data:`MAX_RHO` (naming ``rho`` or
            ``rho.<i>``), or a list whose length is not ``batch``.
    """
    if rho is None:
        return None
    if isinstance(rho, (int, float)) and not isinstance(rho, bool):
        values, paths = [float(rho)] * batch, ["rho"] * batch
    else:
        values = [float(v) for v in rho]
        if len(values) != batch:
            raise InputError(f"rho: {len(values)} values for {batch} queries (one per query)")
        paths = [f"rho.{i}" for i in range(batch)]
    for value, path in zip(values, paths):
        if not (math.isfinite(value) and 0 <= value <= MAX_RHO):
            raise InputError(
                f"{path}: must be a finite number in [0, {MAX_RHO:g}] (utility per unit of "
                f"cost), got {value}"
            )
    return values


def check_learner_takes(learner: object, rhos: list[float] | None, own: float) -> None:
    """Refuse request rhos other than ``own`` when ``learner`` cannot take them.

    Raises:
        InputError: naming the learner and the ``objective: quality_cost`` it would need.
    """
    if rhos is None or takes_request_rho(learner):
        return
    other = next((r for r in rhos if r != own), None)
    if other is not None:
        raise InputError(
            f"rho={other:g}: {type(learner).__name__} learns the utility at rho={own:g} and "
            "serves only that rho; serve a learner with objective: quality_cost to take "
            "each request's rho"
        )


def check_pacable(learner: object, own: float, flag: str = "--budget") -> None:
    """Refuse a spend pacer (which sets each request's rho) for a learner that cannot take
    each request's rho.

    Raises:
        InputError: naming ``flag``, the learner and ``objective: quality_cost``.
    """
    if not takes_request_rho(learner):
        raise InputError(
            f"{flag}: {type(learner).__name__} learns the utility at rho={own:g} and cannot be "
            "paced (a budget sets each request's rho); serve a learner with objective: "
            "quality_cost"
        )


__all__ = ["MAX_RHO", "check_learner_takes", "check_pacable", "request_rhos", "takes_request_rho"]
