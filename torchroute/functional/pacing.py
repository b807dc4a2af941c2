"""Online budget pacing: a primal-dual rule that sets each trial's trade-off ``rho``.

A spend target ``b`` (mean cost per request, in the table's cost unit) is a constraint
``mean_t c_t <= b`` on the cost ``c_t`` of the chosen models. Its Lagrange multiplier is the
trade-off ``rho`` of the utility ``y - rho c``: a router that maximises ``y - rho c`` for
the right ``rho`` spends ``b`` on average. The pacer learns that multiplier online by
projected dual subgradient descent (Balseiro, Lu and Mirrokni, "Dual mirror descent for
online allocation problems", ICML 2020, with the Euclidean mirror map):

    rho_{t+1} = max(0, rho_t + eta * (c_t - b) / b**2)

where ``c_t`` is the mean cost of round ``t``'s requests. **Normalisation.** Costs of two
tables differ by orders of magnitude (dollars per request, or a model's size), so the step
is made unit-free with the budget itself: ``(c_t - b) / b`` is the relative overspend (no
unit), and one more ``1 / b`` gives it the unit of ``rho`` (utility per unit of cost). In
the budget's own unit ``lam = rho * b`` (the utility a whole budget's cost is worth) the
rule reads ``lam_{t+1} = max(0, lam_t + eta * (c_t / b - 1))``: the same ``eta`` means the
same thing on every table. Summing the rule over rounds ``t0..T-1`` (the projection only
lowers the sum of overspends) bounds the realised mean cost after ``t0``:
``mean c - b <= b**2 (rho_T - rho_t0) / (eta (T - t0))``: a larger ``eta`` holds the budget
tighter, a smaller one moves ``rho`` less from round to round.

**A decaying step** (:class:`BudgetPacer`'s ``decay_after = w``): the step after round
``t`` (``t = 1, 2, ...``) is ``eta_t = eta * sqrt(w / max(t, w))``: the full ``eta`` for the
first ``w`` rounds (to correct a starting rho that spends too much or too little), then
shrinking like ``1 / sqrt(t)``, so that ``rho`` settles instead of swinging with each
request's cost (one request of the dearest model can cost many budgets; a swing mixes the
decisions of a cheap and a dear ``rho``, which lies below the router's cost-quality curve
wherever that curve is concave). With ``rho_t`` the trade-off after round ``t`` and a
non-increasing step, the same summation (by parts) gives, over the rounds ``t0+1..T``,
``mean c - b <= b**2 (rho_T / eta_T - rho_t0 / eta_{t0+1}) / (T - t0)``: the last step
sets the bound.

**The budget left** (:class:`BudgetPacer`'s ``horizon = T``): each round aims at the budget
left per request left, ``a_t = min(b, max(0, (b N - spent) / (N - n)))`` (``N`` the stream's
requests, ``n`` those recorded before the round), in place of ``b`` in the overspend:
``rho <- max(0, rho + eta_t (c_t - a_t) / b**2)``. A stream that has spent ahead of its
budget aims lower for the rest (more so the fewer rounds are left), and one that has
spent less never aims above ``b``; since ``a_t <= b`` the bounds above still hold.

Shapes: ``R`` trials (each its own budget, step and state), ``B`` requests per round.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["BudgetPacer", "pace_step"]


def pace_step(
    rho: Tensor,
    cost: Tensor,
    budget: Tensor,
    eta: Tensor | float,
    target: Tensor | None = None,
) -> Tensor:
    """One dual step: ``max(0, rho + eta * (cost - budget) / budget**2)``, elementwise
    (with ``target``: ``max(0, rho + eta * (cost - target) / budget**2)``).

    Args:
        rho: the current trade-offs ``[R]`` (``>= 0``).
        cost: the round's mean cost per request ``[R]`` (the table's cost unit).
        budget: the spend targets ``[R]`` (``> 0``, the unit of ``cost``).
        eta: the unit-free step size, a float or ``[R]`` (``>= 0``).
        target: the round's own spend target ``[R]`` in place of ``budget`` in the
            overspend (``budget`` still makes the step unit-free); ``None``: ``budget``.

    Returns:
        the next trade-offs ``[R]``, ``>= 0``.

    Example:
        >>> pace_step(torch.tensor([1.0]), torch.tensor([3.0]), torch.tensor([2.0]), 0.5)
        tensor([1.1250])
    """
    aim = budget if target is None else target
    return (rho + eta * (cost - aim) / (budget * budget)).clamp_min(0.0)


class BudgetPacer:
    """The stateful pacer of ``R`` trials: ``rho [R]``, ``spent [R]``, ``rounds``.

    Use: read :attr:`rho` (``[R]``) before a round's decisions, then call
    :meth:`update` with the round's realised costs; :func:`pace_step` moves ``rho``.
    Everything stays on the device of ``budget``; no host sync.

    Args:
        budget: the spend target of each trial, ``[R]`` or a float (mean cost per request,
            ``> 0``, in the table's cost unit).
        rho: the starting trade-off, ``[R]`` or a float (``>= 0``; e.g. the fixed rho whose
            validation mean cost is closest below the budget).
        eta: the unit-free step size, ``[R]`` or a float (``>= 0``; ``0`` keeps ``rho``).
        decay_after: ``None`` (the default): every step is ``eta``; an int ``w >= 1``: the
            step after round ``t`` is ``eta * sqrt(w / max(t, w))`` (the module doc).
        horizon: ``None`` (the default): each round aims at ``budget``; an int ``T >= 1``
            (the stream's rounds, each of the same number of requests): each round aims
            at the budget left per request left, within ``[0, budget]`` (the module doc).

    Example:
        >>> pacer = BudgetPacer(torch.tensor([2.0, 2.0]), rho=1.0, eta=0.5)
        >>> pacer.update(torch.tensor([3.0, 1.0]))
        >>> pacer.rho
        tensor([1.1250, 0.8750])
        >>> pacer.mean_cost
        tensor([3., 1.])
    """

    def __init__(
        self,
        budget: Tensor | float,
        rho: Tensor | float,
        eta: Tensor | float,
        decay_after: int | None = None,
        horizon: int | None = None,
    ) -> None:
        if horizon is not None and (isinstance(horizon, bool) or horizon < 1):
            raise ValueError(f"BudgetPacer horizon must be None or an int >= 1, got {horizon!r}")
        self.horizon: int | None = horizon
        if decay_after is not None and (isinstance(decay_after, bool) or decay_after < 1):
            raise ValueError(
                f"BudgetPacer decay_after must be None or an int >= 1, got {decay_after!r}"
            )
        self.decay_after: int | None = decay_after
        if not (isinstance(budget, Tensor) and budget.is_floating_point()):
            budget = torch.as_tensor(budget, dtype=torch.get_default_dtype())
        if budget.ndim == 0:
            budget = budget.reshape(1)
        if budget.ndim != 1:
            raise ValueError(f"budget must be a float or [R], got shape {tuple(budget.shape)}")
        like = {"dtype": budget.dtype, "device": budget.device}
        self.budget: Tensor = budget
        self.eta: Tensor = torch.as_tensor(eta, **like).expand_as(budget).clone()
        self.rho: Tensor = torch.as_tensor(rho, **like).expand_as(budget).clone()
        # one check at construction (a host sync), never per round
        for name, value, ok in (
            ("budget", budget, budget > 0),
            ("rho", self.rho, self.rho >= 0),
            ("eta", self.eta, self.eta >= 0),
        ):
            if not bool((ok & torch.isfinite(value)).all()):
                bound = "> 0" if name == "budget" else ">= 0"
                raise ValueError(f"BudgetPacer {name} must be finite and {bound}")
        self.spent: Tensor = torch.zeros_like(budget)
        self.requests: int = 0
        self.rounds: int = 0

    def update(self, cost: Tensor) -> None:
        """Record a round's realised costs and take one step.

        Args:
            cost: each request's cost, ``[R]`` (one request per round) or ``[R, B]``.
        """
        cost = cost.to(self.budget.dtype)
        if cost.ndim == 1:
            cost = cost[:, None]
        target = self._target(cost.shape[-1])
        self.spent = self.spent + cost.sum(-1)
        self.requests += cost.shape[-1]
        self.rounds += 1
        self.rho = pace_step(self.rho, cost.mean(-1), self.budget, self.step, target)

    def _target(self, per_round: int) -> Tensor | None:
        """This round's target ``[R]`` before it is recorded: ``None`` (the budget) without
        ``horizon``, else the budget left per request left, within ``[0, budget]``."""
        if self.horizon is None:
            return None
        total = self.horizon * per_round
        left = max(total - self.requests, 1)
        return ((self.budget * total - self.spent) / left).clamp(min=0.0).minimum(self.budget)

    @property
    def step(self) -> Tensor:
        """The step ``[R]`` of round :attr:`rounds` (:meth:`update` counts the round, then
        steps): ``eta``, or ``eta * sqrt(w / max(rounds, w))`` with ``decay_after = w`` (a
        host float times ``eta``, no sync)."""
        w = self.decay_after
        if w is None or self.rounds <= w:
            return self.eta  # the same arithmetic as without decay: no multiplication by 1
        return self.eta * math.sqrt(w / self.rounds)

    @property
    def mean_cost(self) -> Tensor:
        """The realised mean cost per request so far, ``[R]`` (NaN before any round)."""
        if not self.requests:
            return torch.full_like(self.spent, torch.nan)
        return self.spent / self.requests

    def state_dict(self) -> dict[str, Tensor | int]:
        """The state, for checkpoints: ``rho``, ``spent`` (``[R]``), ``requests``, ``rounds``."""
        return {
            "rho": self.rho.clone(),
            "spent": self.spent.clone(),
            "requests": self.requests,
            "rounds": self.rounds,
        }

    def load_state_dict(self, state: dict[str, Tensor | int]) -> None:
        """Restore a :meth:`state_dict` (budget and step stay as constructed)."""
        self.rho = torch.as_tensor(state["rho"]).to(self.budget).clone()
        self.spent = torch.as_tensor(state["spent"]).to(self.budget).clone()
        self.requests = int(state["requests"])
        self.rounds = int(state["rounds"])
