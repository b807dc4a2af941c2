"""The quality each candidate of a router reaches on a split when it spends a budget, and
the candidate a paced trial runs.

A static router with several candidates (a ``k``, a weight decay) picks one per trial on
the validation split. For a fixed trade-off ``rho`` the pick is the best mean utility at
that ``rho``. Under a spend target ``b`` (mean cost per request) a pacer moves ``rho``
until the router spends ``b``, so the candidate that matters is the one of the best
**quality at cost** ``b``:

1. each candidate's cost-quality curve on the split: for every ``rho`` of a grid ``[G]``,
   the arms ``argmax_k y^_ck - rho c^_k`` of the split's queries (``y^_c`` the candidate's
   predicted scores, ``c^`` the router's costs), their mean true cost and mean true score
   (:func:`cost_quality_curves`);
2. each curve read at cost ``b``: the smallest ``rho`` of the
   grid whose mean cost is ``<= b`` and the ``rho`` before it (which spends more than
   ``b``), the quality linear in cost between the two: what a pacer that moves ``rho``
   across that interval realises in expectation (a mix of the two routers' decisions).
   Where ``rho = 0`` spends no more than ``b``, the quality at ``rho = 0``; a candidate
   whose cheapest point spends more than ``b`` cannot keep the budget (infeasible)
   (:func:`budget_bracket`; per query, :func:`quality_at_budget`);
3. the choice (:func:`choose_for_budget`): a router keeps the candidate it chose for the
   trial's starting ``rho`` (the *incumbent*: the one its fixed-``rho`` router would run
   there) unless another is better at the budget by more than one standard error of the
   paired gain over the split's queries. A small validation split cannot tell candidates
   a few thousandths apart, and without that margin the pick flips between budgets with
   the split's noise.

:func:`budget_rho_grid` gives the grid: 0 and geometric ``rho`` with ``rho * b`` from
``1e-4`` to ``1e3`` for every budget ``b`` given.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: the geometric points of :func:`budget_rho_grid` (besides 0)
GRID_POINTS = 512
#: the most elements of a ``[C, rhos, m, K]`` block decided at once (128 MB in float64)
BLOCK_ELEMENTS = 2**24


def _block(per_row: int, rows: int) -> int:
    """How many of ``rows`` to take at once when each costs ``per_row`` elements."""
    return max(1, min(rows, BLOCK_ELEMENTS // max(1, per_row)))


def budget_rho_grid(
    budget: Tensor,
    points: int = GRID_POINTS,
    span: tuple[float, float] = (1e-4, 1e3),
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """``[1 + points]`` float64: 0, then ``points`` geometric values from
    ``span[0] / max(budget)`` to ``span[1] / min(budget)`` (``budget [N] > 0``), i.e.
    ``rho * b`` over ``span`` for every budget ``b``; the geometric points are computed in
    ``dtype`` (the pacer's starting-rho grid keeps its float32 points)."""
    b = budget.double()
    if b.numel() == 0 or not bool((b > 0).all()):
        raise ValueError(f"budget_rho_grid: budgets must be > 0, got {b.tolist()}")
    ends = torch.tensor([span[0] / float(b.max()), span[1] / float(b.min())], dtype=dtype)
    geometric = torch.logspace(*ends.log10(), points, dtype=dtype)
    return torch.cat([geometric.new_zeros(1), geometric]).double()


def cost_quality_curves(
    predicted: Tensor,
    router_costs: Tensor,
    scores: Tensor,
    costs: Tensor,
    rho: Tensor,
    chunk: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Each candidate's mean cost and mean score on a split at every ``rho`` of a grid.

    Args:
        predicted: ``[C, m, K]`` each candidate's predicted scores of the split's ``m``
            queries.
        router_costs: ``[m, K]`` the costs the router decides with (known or predicted).
        scores: ``[m, K]`` the split's true scores.
        costs: ``[m, K]`` the split's true costs.
        rho: ``[G]`` the trade-offs (``>= 0``).
        chunk: how many ``rho`` are decided at once (memory ``C x chunk x m x K``); by
            default as many as keep that within :data:`BLOCK_ELEMENTS`.

    Returns:
        ``(cost [C, G], quality [C, G])`` float64: the mean true cost and score of the arms
        ``argmax_k predicted[c, :, k] - rho[g] router_costs[:, k]`` (the first of equals).
    """
    c, m, k = predicted.shape
    pred, priced = predicted.double(), router_costs.double()
    truth = torch.stack([scores.double(), costs.double()])  # [2, m, K]
    out = []
    chunk = chunk or _block(c * m * k, rho.numel())
    for lo in range(0, rho.numel(), chunk):  # set-up, not a per-round path
        r = rho[lo : lo + chunk].double().to(pred.device)
        pick = (pred[:, None] - r[None, :, None, None] * priced).argmax(-1)  # [C, g, m]
        taken = truth[:, None, None].expand(2, c, r.numel(), m, k)
        index = pick[None, ..., None].expand(2, c, r.numel(), m, 1)
        out.append(taken.gather(-1, index)[..., 0].mean(-1))  # [2, C, g]
    both = torch.cat(out, -1)
    return both[1], both[0]


def budget_bracket(cost: Tensor, budget: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Where each candidate's curve crosses each budget (module doc, 2.).

    Args:
        cost: ``[C, G]`` mean cost at each ``rho`` of an ascending grid (the first ``rho``
            0).
        budget: ``[N]`` spend targets.

    Returns:
        ``(first, before, share, feasible)``, each ``[C, N]``: ``first`` the index of the
        smallest ``rho`` whose mean cost is ``<= budget`` (the last index where none is),
        ``before`` the index before it (``first`` itself at 0), ``share`` the weight of
        ``before`` in the mix of the two that spends the budget (0 where ``first`` is 0 or
        none is within), ``feasible`` whether any ``rho`` is within the budget.
    """
    cost = cost.double()
    b = budget.double().to(cost.device)
    g = cost.shape[1]
    within = cost[:, :, None] <= b[None, None, :]  # [C, G, N]
    feasible = within.any(1)  # [C, N]
    last = torch.full_like(feasible, g - 1, dtype=torch.long)
    first = torch.where(feasible, within.int().argmax(1), last)
    before = (first - 1).clamp_min(0)
    c_at, c_before = cost.gather(1, first), cost.gather(1, before)
    span = c_before - c_at
    share = torch.where(span > 0, (b[None] - c_at) / span.clamp_min(1e-300), span.new_zeros(()))
    return first, before, share.clamp(0, 1), feasible


def quality_at_budget(
    predicted: Tensor,
    router_costs: Tensor,
    scores: Tensor,
    rho: Tensor,
    bracket: tuple[Tensor, Tensor, Tensor, Tensor],
) -> Tensor:
    """Each query's expected score when each candidate spends each budget.

    Args:
        predicted: ``[C, m, K]`` each candidate's predicted scores (as
            :func:`cost_quality_curves`).
        router_costs: ``[m, K]`` the costs the router decides with.
        scores: ``[m, K]`` the split's true scores.
        rho: ``[G]`` the grid of the curves.
        bracket: :func:`budget_bracket` of the curves (``[C, N]`` each).

    Returns:
        ``[C, N, m]`` float64: per query, the score of the arm chosen at ``rho[first]``
        mixed with that at ``rho[before]`` by ``share`` (their mean over the queries is
        the curve read at the budget: linear in cost between the two points).
    """
    first, before, share, _ = bracket
    pred, priced = predicted.double()[:, None], router_costs.double()
    truth = scores.double()
    grid = rho.double().to(pred.device)

    def score_at(index: Tensor) -> Tensor:  # [C, n] grid indices -> [C, n, m]
        r = grid[index][..., None, None]  # [C, n, 1, 1]
        pick = (pred - r * priced).argmax(-1)  # [C, n, m]
        return truth.expand(*pick.shape, truth.shape[-1]).gather(-1, pick[..., None])[..., 0]

    c, n = first.shape
    step = _block(c * truth.numel(), n)  # budgets at once, within BLOCK_ELEMENTS
    out = []
    for lo in range(0, n, step):  # set-up, not a per-round path
        part = slice(lo, lo + step)
        at, earlier = score_at(first[:, part]), score_at(before[:, part])
        out.append(at + share[:, part, None] * (earlier - at))
    return torch.cat(out, 1)


def choose_for_budget(
    per_query: Tensor, feasible: Tensor, cheapest: Tensor, incumbent: Tensor, budget_of: Tensor
) -> Tensor:
    """Each trial's candidate for its budget: the incumbent unless another is better by one
    standard error.

    Args:
        per_query: ``[C, N, m]`` :func:`quality_at_budget`.
        feasible: ``[C, N]`` whether each candidate can keep each budget.
        cheapest: ``[C]`` each candidate's least mean cost over the grid.
        incumbent: ``[R]`` (long) each trial's candidate before the budget is read (the
            one chosen for its starting ``rho``).
        budget_of: ``[R]`` (long) each trial's budget, an index into ``N``.

    Returns:
        ``[R]`` (long): the feasible candidate of the best mean quality where its paired
        gain over the incumbent (per query, over the ``m`` queries) exceeds one standard
        error of that mean, or where the incumbent cannot keep the budget; the incumbent
        otherwise; where no candidate is feasible, the one of the least ``cheapest``
        (the first of equals).
    """
    m = per_query.shape[-1]
    mine = per_query[:, budget_of]  # [C, R, m]
    gain = mine - mine.gather(0, incumbent.view(1, -1, 1).expand(1, *mine.shape[1:]))
    mean = gain.mean(-1)  # [C, R]
    se = gain.std(-1, correction=1) / m**0.5 if m > 1 else torch.zeros_like(mean)
    ok = feasible[:, budget_of]  # [C, R]
    best = torch.where(ok, mean, torch.full_like(mean, -torch.inf)).argmax(0)  # [R]
    clear = mean.gather(0, best[None])[0] > se.gather(0, best[None])[0]
    keep = ok.gather(0, incumbent[None])[0] & ~clear
    chosen = torch.where(keep, incumbent, best)
    fallback = cheapest.argmin().expand_as(chosen)
    return torch.where(ok.any(0), chosen, fallback)


__all__ = [
    "BLOCK_ELEMENTS",
    "budget_bracket",
    "budget_rho_grid",
    "choose_for_budget",
    "cost_quality_curves",
    "quality_at_budget",
]
