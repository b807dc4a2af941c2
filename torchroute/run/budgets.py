"""Spend targets in ``simulate``: ``budgets: [b1, b2, ...]`` and each learner's pacer.

With ``budgets`` the trials are ``budgets x seeds`` (budget-major), the run's ``rhos`` do not
enter the grid, and every round a :class:`~torchroute.functional.pacing.BudgetPacer` sets
each trial's trade-off ``Context.rho`` before the learner decides. Per learner, two things
are chosen on the validation split (``val``, replayed as a stream with seed ``seeds[0]``,
at most as many rounds as the run has; never the test split):

1. **The starting rho.** The learner replays the split at every rho of a fixed grid
   (:func:`rho_grid`: 0 and :data:`GRID_POINTS` geometric values from ``1e-3 / max(b)`` to
   ``1e2 / min(b)``, i.e. ``rho * b`` from ``1e-3`` to ``1e2`` for every budget); a
   budget's starting rho is the grid rho whose validation mean cost is closest below the
   budget (the largest mean cost ``<= b``; the largest rho when none is that cheap).
2. **The step size.** The learner replays the split under each budget with the pacer for
   each step of :data:`ETAS`, starting from 1.'s rho; a budget's ``eta`` is the one of the
   best validation mean quality among those whose mean cost after the warm-up is within the
   budget, else the one of the smallest overrun.

A learner can be paced when its decisions follow ``Context.rho`` (its
``per_request_rho`` is true: the static score routers, and the ridge learners with
``objective: quality_cost``); any other learner is refused before anything is written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from torchroute.envs.base import Env
from torchroute.errors import ConfigError
from torchroute.functional.pacing import BudgetPacer
from torchroute.learners.base import Learner
from torchroute.loop import simulate
from torchroute.run.build import Built, build_learner, instantiate_node, trial_grid
from torchroute.run.classes import learner_class
from torchroute.run.options import RunOptions

log = logging.getLogger(__name__)

#: the pacer's step sizes tried on the validation split (unit-free, see ``pace_step``)
ETAS: tuple[float, ...] = (0.003, 0.01, 0.03, 0.1, 0.3)
#: the geometric points of the starting-rho grid (besides 0)
GRID_POINTS = 16
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

    def pacer(self, device: torch.device, dtype: torch.dtype) -> BudgetPacer:
        """A fresh pacer of these trials on ``device``."""
        like = {"device": device, "dtype": dtype}
        return BudgetPacer(self.budget.to(**like), self.rho.to(**like), self.eta.to(**like))


def trial_budgets(opts: RunOptions) -> Tensor:
    """Each trial's budget ``[R]`` (float64), budget-major as the env's trials."""
    assert opts.budgets is not None
    return torch.tensor(trial_grid(list(opts.budgets), list(opts.seeds))[0], dtype=torch.float64)


def rho_grid(budgets: tuple[float, ...]) -> Tensor:
    """The starting-rho grid ``[1 + GRID_POINTS]`` (float64): 0, then geometric from
    ``1e-3 / max(budgets)`` to ``1e2 / min(budgets)``."""
    low, high = 1e-3 / max(budgets), 1e2 / min(budgets)
    points = torch.logspace(
        torch.log10(torch.tensor(low)), torch.log10(torch.tensor(high)), GRID_POINTS
    )
    return torch.cat([torch.zeros(1), points]).double()


def check_budgets(opts: RunOptions, built: Built) -> None:
    """Refuse ``budgets`` where they cannot apply, with one line naming the cause: an env
    that is not a single-choice table env, a table without a validation split, or a learner
    whose class decides for its trial's own rho."""
    env = built.env
    if built.table is None or not hasattr(env, "with_rho"):
        raise ConfigError(
            "budgets need a single-choice env on a routing table (env=single_choice); "
            f"{type(env).__name__} has no per-trial rho to pace"
        )
    if VALIDATION not in set(built.table.split):
        raise ConfigError(
            "budgets choose each pacer's starting rho and step on the validation split, but "
            "the table has none: give it one (e.g. data.val_fraction=0.1)"
        )
    for name in opts.run_learners:
        cls = learner_class(opts.learners[name])
        flag = getattr(cls, "per_request_rho", False)
        if cls is not None and (cls.protocol != "single" or flag is False):
            raise ConfigError(unpaceable(name, cls))


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


def plan_pacing(opts: RunOptions, name: str, built: Built) -> PacingPlan:
    """Learner ``name``'s starting rho and step for every trial, chosen on the validation
    split (module doc)."""
    assert opts.budgets is not None and built.env is not None
    budgets = torch.tensor(opts.budgets, dtype=torch.float64)  # [N]
    grid = rho_grid(opts.budgets)  # [G]
    fixed = _replay(opts, name, built, grid, None)
    cost = torch.as_tensor(fixed["avg_cost"].to_numpy())  # [G]
    start = torch.empty_like(budgets)
    for i, b in enumerate(budgets):  # set-up, not the hot path
        under = cost <= b
        if bool(under.any()):
            start[i] = grid[torch.where(under, cost, torch.tensor(-torch.inf)).argmax()]
        else:
            start[i] = grid[-1]
    etas = torch.tensor(ETAS, dtype=torch.float64)
    n, e = len(budgets), len(etas)
    pairs = (budgets.repeat_interleave(e), start.repeat_interleave(e), etas.repeat(n))
    paced = _replay(opts, name, built, pairs[1], PacingPlan(*pairs))
    over = torch.as_tensor(paced["budget_overrun_after_warmup"].to_numpy()).view(n, e)
    quality = torch.as_tensor(paced["accuracy"].to_numpy()).view(n, e)
    within = over <= 0
    best = torch.where(within, quality, torch.tensor(-torch.inf)).argmax(1)
    best = torch.where(within.any(1), best, over.argmin(1))
    eta = etas[best]
    log.info(
        "budgets: %s starts at rho %s with step %s (chosen on the validation split)",
        name,
        [float(f"{r:.4g}") for r in start.tolist()],
        eta.tolist(),
    )
    per_trial = torch.arange(len(budgets)).repeat_interleave(len(opts.seeds))
    return PacingPlan(trial_budgets(opts), start[per_trial], eta[per_trial])


def _replay(opts: RunOptions, name: str, built: Built, rho: Tensor, plan: PacingPlan | None) -> Any:
    """Learner ``name`` replaying the validation split as a stream, one trial per entry of
    ``rho [M]`` (fixed, or paced by ``plan``); the summary frame."""
    env = _validation_env(opts, built, rho)
    main = built.env.problem()  # the run's problem: its validation split (not replayed)
    problem = replace(env.problem(), validation=main.validation)
    learner = build_learner(opts.learners[name], problem, name, opts.loop_seed, None, warm=True)
    check_learner(name, learner)
    pacer = None if plan is None else plan.pacer(env.device, torch.float64)
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


def _validation_env(opts: RunOptions, built: Built, rho: Tensor) -> Env:
    """The run's env on the validation split: ``M = len(rho)`` trials with seed
    ``seeds[0]``, no scenario, as many rounds as the run at most."""
    table, env = built.table, built.env
    assert table is not None and env is not None
    size = len(table.rows(VALIDATION))
    factory = instantiate_node(opts.env, "env", _partial_=True)
    try:
        return factory(
            table=table,
            rho=rho.tolist(),
            seeds=[opts.seeds[0]] * len(rho),
            features=built.features,
            split=VALIDATION,
            horizon=min(size, env.horizon),
            scenario=None,
            device=env.device,
            dtype=opts.dtype,
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"budgets: the validation replay's env: {exc}") from exc


__all__ = [
    "ETAS",
    "PacingPlan",
    "check_budgets",
    "check_learner",
    "plan_pacing",
    "rho_grid",
    "trial_budgets",
]
