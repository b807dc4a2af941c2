"""A live router's spend pacer: the rho of each request set from the spend so far.

A spend target ``budget`` (mean cost per request, in the table's cost unit: the unit of the
costs fed back) is held by :class:`~torchroute.functional.pacing.BudgetPacer`'s primal-dual
rule, one step per answered request: ``rho <- max(0, rho + eta (c - budget) / budget**2)``.
Each request routed is given the pacer's current ``rho`` (so the router's learner must take
each request's rho: :func:`~torchroute.serve.request_rho.takes_request_rho`).

Its state is a row of the decision log's ``pacers`` table (``name``, ``budget``, ``eta``,
``rho``, ``spent``, ``requests``, ``rounds``), written in the same transaction as the costs
it has seen (serve: the feedback; the gateway: the charge of a call), so that a restart
takes it back exactly. A pacer reopened under another budget or step goes on from its rho
and its spend.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from dataclasses import dataclass

import torch
from torch import Tensor

from torchroute.errors import InputError, LogError
from torchroute.functional.pacing import BudgetPacer
from torchroute.serve.log import PACER_ROW

log = logging.getLogger("torchroute.serve.router")

#: the pacer's step when none is given (unit-free: ``lam = rho * budget`` moves by ``eta``
#: times the relative overspend of a request)
DEFAULT_ETA = 0.03


def check_budget(budget: float, eta: float, flag: str = "--budget") -> None:
    """``budget`` finite and ``> 0``, ``eta`` finite and ``>= 0``; else an
    :class:`InputError` naming ``flag`` (``<flag>-eta`` for the step)."""
    if isinstance(budget, bool) or not (isinstance(budget, (int, float)) and budget > 0):
        raise InputError(f"{flag} must be a mean cost per request > 0, got {budget!r}")
    if not math.isfinite(budget):
        raise InputError(f"{flag} must be finite, got {budget!r}")
    if isinstance(eta, bool) or not (isinstance(eta, (int, float)) and 0 <= eta < math.inf):
        raise InputError(f"{flag}-eta must be a finite step >= 0, got {eta!r}")


@dataclass
class Pacer:
    """One pacer (``R = 1``): its ``name`` in the log, ``budget``, step ``eta`` and
    :class:`~torchroute.functional.pacing.BudgetPacer` state (float64, CPU)."""

    name: str
    budget: float
    eta: float
    state: BudgetPacer

    @classmethod
    def open(
        cls, db: sqlite3.Connection, name: str, budget: float, eta: float, rho: float
    ) -> Pacer:
        """The pacer ``name`` as the log holds it, else a fresh one starting at ``rho``."""
        check_budget(budget, eta)
        state = BudgetPacer(torch.tensor([float(budget)], dtype=torch.float64), rho, eta)
        row = read_pacer(db, name)
        if row is not None:
            (old_budget, old_eta, rho, spent, requests, rounds) = row
            if (old_budget, old_eta) != (budget, eta):
                log.warning(
                    "pacer %s: budget %g, step %g (were %g, %g): going on from rho=%g",
                    name,
                    budget,
                    eta,
                    old_budget,
                    old_eta,
                    rho,
                )
            state.load_state_dict(
                {
                    "rho": torch.tensor([rho]),
                    "spent": torch.tensor([spent]),
                    "requests": requests,
                    "rounds": rounds,
                }
            )
        return cls(name, float(budget), float(eta), state)

    @property
    def rho(self) -> float:
        """The trade-off the next request is routed with."""
        return float(self.state.rho[0])

    @property
    def mean_cost(self) -> float:
        """The realised mean cost per request so far (NaN before any)."""
        return float(self.state.mean_cost[0])

    def stepped(self, costs: Tensor) -> BudgetPacer:
        """The state after the costs ``[n]`` of ``n`` answered requests, one step each (this
        pacer unchanged: :meth:`take` it once it is written)."""
        state = BudgetPacer(self.state.budget, self.state.rho, self.state.eta)
        state.load_state_dict(self.state.state_dict())
        for cost in costs.to(torch.float64).reshape(-1, 1):  # [1] each: the request's cost
            state.update(cost)
        return state

    def take(self, state: BudgetPacer) -> None:
        """Adopt a :meth:`stepped` state (written to the log)."""
        self.state = state

    def row(self, state: BudgetPacer | None = None) -> tuple:
        """The ``pacers`` row of ``state`` (default: the pacer's own)."""
        s = self.state if state is None else state
        return (
            self.name,
            self.budget,
            self.eta,
            float(s.rho[0]),
            float(s.spent[0]),
            s.requests,
            s.rounds,
        )

    def status(self) -> dict[str, float | int]:
        """``budget``, ``eta``, ``rho``, ``mean_cost`` and ``requests`` counted."""
        mean = self.mean_cost
        return {
            "budget": self.budget,
            "eta": self.eta,
            "rho": self.rho,
            "mean_cost": None if math.isnan(mean) else mean,
            "requests": self.state.requests,
        }


def write_pacer(db: sqlite3.Connection, row: tuple) -> None:
    """Write a :meth:`Pacer.row` (inside the caller's transaction)."""
    db.execute(PACER_ROW, row)


def read_pacer(db: sqlite3.Connection, name: str) -> tuple | None:
    """``(budget, eta, rho, spent, requests, rounds)`` of the pacer ``name``, or ``None``."""
    found = db.execute(
        "SELECT budget, eta, rho, spent, requests, rounds FROM pacers WHERE name = ?", (name,)
    ).fetchone()
    if found is None:
        return None
    budget, eta, rho, spent, requests, rounds = found
    if not (math.isfinite(rho) and rho >= 0 and math.isfinite(spent) and requests >= 0):
        raise LogError(f"pacer {name!r} of the decision log is damaged: rho={rho}, spent={spent}")
    return float(budget), float(eta), float(rho), float(spent), int(requests), int(rounds)


__all__ = ["DEFAULT_ETA", "Pacer", "check_budget", "read_pacer", "write_pacer"]
