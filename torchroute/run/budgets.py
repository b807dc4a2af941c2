"""Spend targets in ``simulate``: ``budgets: [b1, b2, ...]`` and each learner's pacer.

With ``budgets`` the trials are ``budgets x seeds`` (budget-major), the run's ``rhos`` do not
enter the grid, and every round a :class:`~torchroute.functional.pacing.BudgetPacer` sets
each trial's trade-off ``Context.rho`` before the learner decides. Per learner, two things
are chosen on the validation split (``val``, replayed as :data:`VALIDATION_STREAMS` streams,
seeds 0, 1, 2, at most as many rounds as the run has; never the test split):

1. **The starting rho.** The learner replays the split at every rho of a fixed grid
   (:func:`rho_grid`: 0 and :data:`GRID_POINTS` geometric values from ``1e-3 / max(b)`` to
   ``1e2 / min(b)``, i.e. ``rho * b`` from ``1e-3`` to ``1e2`` for every budget). Every
   replayed trial carries its budget (``Problem.budget``); a learner that may choose its
   options for it (:attr:`~torchroute.learners.base.Learner.chooses_for_budget`: a static
   score router may take the candidate of the best validation quality at that cost,
   :meth:`~torchroute.learners.anchors._FittedRouter.choose_for_budget`, and a learner on
   such a router inherits it) replays the grid once per budget, so that the cost of a
   grid rho is that of the router the budget's trials run; any other once for all. A
   budget's grid rho is the one whose validation mean cost (over the streams) is closest
   below the budget (the largest mean cost ``<= b``, the smallest such rho; the largest
   rho when none is that cheap). The starting rho then bisects, for :data:`REFINE_STEPS`
   steps, between that grid rho and the grid rho below it (geometric midpoints, all
   budgets in one replay per step): a midpoint whose validation mean cost is ``<= b``
   becomes the upper end, else the lower; the start is the final upper end, a rho whose
   validation cost is within the budget, 1/16 of a grid step (in log rho) from one that
   spends more than the budget (where the grid rho below spends more). A start near the
   budget leaves the pacer little to correct, and a static router's options chosen on
   validation for its trial's rho (``k``, a weight decay; the incumbent of its choice
   for the budget) are chosen near the rho it will run at, not at a grid point that
   spends far less.
2. **The step size.** The learner replays the split under each budget with the pacer for
   each step of :data:`ETAS`, starting from half of 1.'s rho (:data:`LOW_START`: a start
   that spends too much, as a validation split cheaper than the stream would give; the
   step must bring the spend back within the warm-up); a budget's ``eta``
   (:func:`choose_step`) is the one of the best validation mean quality among those whose
   mean cost after the warm-up is within the budget on every stream, else the one of the
   smallest worst-stream overrun. On the run's
   stream the step is that ``eta`` x ``T_val / T`` (validation rounds over the run's
   rounds, at most 1): by the bound of :mod:`~torchroute.functional.pacing` a trial then
   corrects the same share of its overspend per share of its rounds as on validation,
   and moves its rho less from round to round on a longer stream. On validation and on
   the run's stream alike the step decays after the warm-up (``decay_after``, the first
   5% of the rounds: :class:`~torchroute.functional.pacing.BudgetPacer`), so a trial's rho
   settles near the rho that spends its budget instead of swinging with each request.
   On the run's stream only, each round also aims at the budget left per request left
   (never above the budget): on validation that target would let steps too small to
   correct the start pass, and they then overspend on the run.

A learner can be paced when its decisions follow ``Context.rho`` (its
``per_request_rho`` is true: the static score routers, and the ridge learners with
``objective: quality_cost``); any other learner is refused before anything is written.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from torchroute.envs.base import Env
from torchroute.errors import ConfigError
from torchroute.functional.budget_choice import budget_rho_grid
from torchroute.functional.pacing import BudgetPacer
from torchroute.learners.base import Learner
from torchroute.loop import WARMUP_SHARE, simulate
from torchroute.run.build import (
    Built,
    build_learner,
    instantiate_node,
    trial_grid,
    warm_options,
)
from torchroute.run.classes import learner_class
from torchroute.run.jobs import worker_threads
from torchroute.run.options import RunOptions

log = logging.getLogger(__name__)

#: the pacer's step sizes tried on the validation split (unit-free, see ``pace_step``)
ETAS: tuple[float, ...] = (0.003, 0.01, 0.03, 0.1, 0.3)
#: the step is chosen from this share of the starting rho (a start that spends too much)
LOW_START = 0.5
#: the geometric points of the starting-rho grid (besides 0)
GRID_POINTS = 16
#: bisection steps refining each budget's starting rho between two grid rhos
REFINE_STEPS = 4
#: the validation split is replayed in this many orders (seeds 0, 1, ...)
VALIDATION_STREAMS = 3
#: the validation split's name in a table
VALIDATION = "val"


@dataclass(frozen=True)
class PacingPlan:
    """A learner's pacing of the run's ``R`` trials: ``budget``, starting ``rho`` and step
    ``eta``, each ``[R]`` (float64, on the CPU)."""

    budget: Tensor
    rho: Tensor
    eta: Tensor

    def select(self, index: list[int]) -> PacingPlan:
        """The plan of the trials ``index`` (a piece of the run)."""
        on = torch.as_tensor(index, dtype=torch.long)
        return PacingPlan(self.budget[on], self.rho[on], self.eta[on])

    def pacer(
        self, device: torch.device, dtype: torch.dtype, horizon: int, aim_left: bool = False
    ) -> BudgetPacer:
        """A fresh pacer of these trials on ``device`` for a stream of ``horizon`` rounds:
        its step decays after the warm-up (``decay_after``: the first
        :data:`~torchroute.loop.WARMUP_SHARE` of the rounds); with ``aim_left`` (the run's
        stream) each round aims at the budget left per request left, never above the
        budget (``horizon``)."""
        like = {"device": device, "dtype": dtype}
        decay_after = max(1, math.ceil(WARMUP_SHARE * horizon))
        return BudgetPacer(
            self.budget.to(**like),
            self.rho.to(**like),
            self.eta.to(**like),
            decay_after=decay_after,
            horizon=horizon if aim_left else None,
        )


def trial_budgets(opts: RunOptions) -> Tensor:
    """Each trial's budget ``[R]`` (float64), budget-major as the env's trials."""
    assert opts.budgets is not None
    return torch.tensor(trial_grid(list(opts.budgets), list(opts.seeds))[0], dtype=torch.float64)


def rho_grid(budgets: tuple[float, ...]) -> Tensor:
    """The starting-rho grid ``[1 + GRID_POINTS]`` (float64): 0, then geometric from
    ``1e-3 / max(budgets)`` to ``1e2 / min(budgets)``."""
    spend = torch.tensor(budgets, dtype=torch.float64)
    return budget_rho_grid(spend, GRID_POINTS, (1e-3, 1e2), torch.float32)


def check_budget_learners(opts: RunOptions) -> None:
    """Refuse ``budgets`` with a learner that decides for its trial's own rho
    (:meth:`~torchroute.learners.base.Learner.decides_per_request` of its config node's
    values, e.g. ``objective``) or routes subsets, in one line naming it; nothing is built
    or read."""
    if opts.budgets is None:
        return
    for name in opts.run_learners:
        cls = learner_class(opts.learners[name])
        if cls is None:
            continue  # not resolvable without building: checked once built
        _, node = warm_options(opts.learners[name], f"learners.{name}")
        values = {k: v for k, v in node.items() if not str(k).startswith("_")}
        if cls.protocol != "single" or not cls.decides_per_request(**values):
            raise ConfigError(unpaceable(name, cls))


def check_budgets(opts: RunOptions, built: Built) -> None:
    """Refuse ``budgets`` where they cannot apply, with one line naming the cause: an env
    that is not a single-choice table env, one whose requests carry their own rho
    (``request_rhos``), or a table without a validation split."""
    env = built.env
    if built.table is None or not hasattr(env, "with_rho"):
        raise ConfigError(
            "budgets need a single-choice env on a routing table (env=single_choice); "
            f"{type(env).__name__} has no per-trial rho to pace"
        )
    if getattr(env, "request_rhos", None) is not None:
        raise ConfigError(
            "budgets set each request's rho by a pacer, but env.request_rhos gives the "
            "requests their own: use one of them"
        )
    if VALIDATION not in set(built.table.split):
        raise ConfigError(
            "budgets choose each pacer's starting rho and step on the validation split, but "
            "the table has none: give it one (e.g. data.val_fraction=0.1)"
        )


def unpaceable(name: str, cls: type) -> str:
    """The one-line error of a learner that cannot be paced."""
    return (
        f"budgets: learner {name!r} ({cls.__name__}) cannot be paced: its decisions do not "
        "follow each request's rho (Context.rho); use a static score router (knn_val, "
        "mlp_router, ...) or a ridge learner with objective: quality_cost, or leave it out "
        "(run_learners=[...])"
    )


def check_learner(name: str, learner: Learner) -> None:
    """Refuse a built learner that does not follow ``Context.rho`` (``per_request_rho``
    may be decided per instance, e.g. by an ``objective`` option)."""
    if learner.protocol != "single" or not bool(getattr(learner, "per_request_rho", False)):
        raise ConfigError(unpaceable(name, type(learner)))


def plan_all(opts: RunOptions, built: Built) -> dict[str, PacingPlan]:
    """Every learner's :func:`plan_pacing`, ``{name: plan}``. With ``jobs > 1`` and more
    than one learner, the learners run in worker processes of
    :func:`~torchroute.run.jobs.threads_per_job` intra-op threads each: the plans are then
    chosen with that many threads too (:func:`~torchroute.run.jobs.worker_threads`), so
    that a learner's validation replays fit it as its worker does (a fit's numbers can
    depend on the threads): its plan is the one ``jobs=1`` chooses with that many threads."""
    with worker_threads(opts.jobs, len(opts.run_learners)):
        return {name: plan_pacing(opts, name, built) for name in opts.run_learners}


def plan_pacing(opts: RunOptions, name: str, built: Built) -> PacingPlan:
    """Learner ``name``'s starting rho and step for every trial, chosen on the validation
    split (module doc)."""
    assert opts.budgets is not None and built.env is not None
    budgets = torch.tensor(opts.budgets, dtype=torch.float64)  # [N]
    grid = rho_grid(opts.budgets)  # [G]
    s, n, g = VALIDATION_STREAMS, len(budgets), len(grid)
    # every grid rho once per budget where the learner may choose its options for its
    # budget, else once for all (the trials then carry the last budget, unread)
    cls = learner_class(opts.learners[name])
    each = n if cls is None or cls.chooses_for_budget else 1
    fixed = _replay(
        opts,
        name,
        built,
        grid.repeat_interleave(s).repeat(each),
        None,
        budgets[-each:].repeat_interleave(g * s),
    )
    costs = torch.tensor(fixed["avg_cost"].to_numpy()).view(each, g, s).mean(-1)  # [each, G]
    costs = costs.expand(n, g)
    below, above = torch.empty_like(budgets), torch.empty_like(budgets)
    for i, b in enumerate(budgets):  # set-up, not the hot path
        cost = costs[i]
        under = cost <= b
        if bool(under.any()):
            j = int(torch.where(under, cost, torch.tensor(-torch.inf)).argmax())
            above[i], below[i] = grid[j], grid[max(j - 1, 0)]
        else:
            above[i] = below[i] = grid[-1]
    start = _refine(opts, name, built, budgets, below, above)
    etas = torch.tensor(ETAS, dtype=torch.float64)
    e = len(etas)
    low = start * LOW_START  # a start that spends too much: the step must recover from it
    pairs = (budgets.repeat_interleave(e), low.repeat_interleave(e), etas.repeat(n))
    plan = PacingPlan(*(p.repeat_interleave(s) for p in pairs))
    paced = _replay(opts, name, built, plan.rho, plan, plan.budget)
    over = torch.tensor(paced["budget_overrun_after_warmup"].to_numpy()).view(n, e, s)
    quality = torch.tensor(paced["accuracy"].to_numpy()).view(n, e, s)
    best = choose_step(over, quality)
    # the same correction per share of the rounds on the run's stream as on validation
    scale = min(1.0, paced["rounds"].iloc[0] / built.env.horizon)
    eta = etas[best] * scale
    log.info(
        "budgets: %s starts at rho %s with step %s x %.3g (validation rounds / run rounds; "
        "chosen on the validation split)",
        name,
        [float(f"{r:.4g}") for r in start.tolist()],
        etas[best].tolist(),
        scale,
    )
    per_trial = torch.arange(len(budgets)).repeat_interleave(len(opts.seeds))
    return PacingPlan(trial_budgets(opts), start[per_trial], eta[per_trial])


def choose_step(over: Tensor, quality: Tensor) -> Tensor:
    """Each budget's step among :data:`ETAS` from its validation replays.

    Args:
        over: ``[N, E, S]`` each budget's (``N``), step's (``E``) and stream's (``S``) mean
            cost after the warm-up / budget - 1.
        quality: ``[N, E, S]`` the same replays' mean quality.

    Returns:
        ``[N]`` (long) the index of each budget's step: of the steps within the budget on
        every stream (``over <= 0``), the one of the best mean quality over the streams
        (the first of equals); with none within, the one of the smallest worst-stream
        overrun (the first of equals).
    """
    worst = over.amax(-1)  # [N, E]
    within = worst <= 0
    mean = quality.mean(-1)  # [N, E]
    best = torch.where(within, mean, torch.tensor(-torch.inf, dtype=mean.dtype)).argmax(1)
    return torch.where(within.any(1), best, worst.argmin(1))


def _refine(
    opts: RunOptions, name: str, built: Built, budgets: Tensor, low: Tensor, high: Tensor
) -> Tensor:
    """Bisect each budget's starting rho between the grid rhos ``low`` and ``high`` (each
    ``[N]``; ``high``'s validation mean cost is ``<= budget``, ``low`` the grid point below
    it) for :data:`REFINE_STEPS` steps, all budgets in one replay per step: the midpoint
    (geometric, arithmetic from 0) replaces ``high`` when its validation mean cost (over
    the streams) is ``<= budget``, else ``low``. Returns the final ``high`` ``[N]``: a rho
    whose validation mean cost is within the budget. Where ``low == high`` (rho 0 within
    the budget, or no grid rho within it) nothing moves."""
    s = VALIDATION_STREAMS
    for _ in range(REFINE_STEPS):
        mid = torch.where(low > 0, (low * high).sqrt(), (low + high) / 2)
        mid = torch.where(low == high, high, mid)
        fixed = _replay(
            opts, name, built, mid.repeat_interleave(s), None, budgets.repeat_interleave(s)
        )
        cost = torch.tensor(fixed["avg_cost"].to_numpy()).view(-1, s).mean(1)  # [N]
        under = cost <= budgets
        high, low = torch.where(under, mid, high), torch.where(under, low, mid)
    return high


def _replay(
    opts: RunOptions,
    name: str,
    built: Built,
    rho: Tensor,
    plan: PacingPlan | None,
    budget: Tensor,
) -> Any:
    """Learner ``name`` replaying the validation split as a stream, one trial per entry of
    ``rho [M]`` (fixed, or paced by ``plan``), each for its spend target ``budget [M]``
    (``Problem.budget``: what the learner may choose its options for); the summary
    frame."""
    env = _validation_env(built, rho, opts.dtype).with_rho(rho, budget)  # type: ignore[attr-defined]
    main = built.env.problem()  # the run's problem: its validation split (not replayed)
    problem = replace(env.problem(), validation=main.validation)
    learner = build_learner(opts.learners[name], problem, name, opts.loop_seed, None, warm=True)
    check_learner(name, learner)
    pacer = None if plan is None else plan.pacer(env.device, torch.float64, env.horizon)
    result = simulate(
        learner,
        env,
        seed=opts.loop_seed,
        log_every=env.horizon,
        progress=False,
        desc=f"{name} (budgets, validation)",
        pacer=pacer,
    )
    return result.summary


def _validation_env(built: Built, rho: Tensor, dtype: torch.dtype) -> Env:
    """The run's env on the validation split: ``M = len(rho)`` trials, the ``m``-th on
    stream ``m % VALIDATION_STREAMS``, no scenario, as many rounds as the run at most."""
    opts, table, env = built.options, built.table, built.env
    assert table is not None and env is not None
    size = len(table.rows(VALIDATION))
    factory = instantiate_node(opts.env, "env", _partial_=True)
    try:
        return factory(
            table=table,
            rho=rho.tolist(),
            seeds=[m % VALIDATION_STREAMS for m in range(len(rho))],
            features=built.features,
            split=VALIDATION,
            horizon=min(size, env.horizon),
            scenario=None,
            device=env.device,
            dtype=dtype,
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"budgets: the validation replay's env: {exc}") from exc


__all__ = [
    "ETAS",
    "PacingPlan",
    "check_budget_learners",
    "check_budgets",
    "check_learner",
    "choose_step",
    "plan_all",
    "plan_pacing",
    "rho_grid",
    "trial_budgets",
]
