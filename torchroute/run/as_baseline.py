"""Static-router options chosen as the report chooses its baseline (``as_baseline`` keys).

A residual learner's ``base`` (or ``static_refit``'s) given as a list of static routers,
with the run option ``choose_on_validation: {as_baseline: [base]}``, is chosen without a
replay: each router is built for the run's problem as the learner would build it, and per
group of trials (each ``rho``, or each cost regime) the router with the highest mean of its
own ``val_utility`` (its mean utility on the validation split at each trial's ``rho``)
over the group's trials wins, the first listed on a tie. That is the rule of the report's
baseline, so a residual learner that learns nothing plays the regime's baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from torchroute.envs.base import Env
from torchroute.errors import ConfigError
from torchroute.learners.anchors import _FittedRouter
from torchroute.learners.on_base_router import packaged_configs_of, resolve_base


@dataclass(frozen=True)
class RouterChoice:
    """The values of the ``as_baseline`` keys chosen for every trial.

    Attributes:
        eligible: ``[C, R]`` bool, candidate ``c`` holds every trial's chosen values.
        val_utility: ``[C, R]`` float64, the mean ``val_utility`` of candidate ``c``'s
            routers (one per ``as_baseline`` key, averaged) at each trial.
    """

    eligible: np.ndarray
    val_utility: np.ndarray


def distinct_values(points: Sequence[dict[str, Any]], key: str) -> list[Any]:
    """``key``'s values in their first appearance order over ``points``."""
    seen: list[Any] = []
    for point in points:
        if not any(point[key] == v for v in seen):
            seen.append(point[key])
    return seen


def router_val_utility(value: Any, env: Env, who: str) -> np.ndarray:
    """``[R]`` float64: the validation utility each trial of ``env`` records for the
    static router ``value`` (a packaged name or a config node), built for the env's problem
    as a learner's ``base`` is built. Raises :class:`ConfigError` naming ``who`` for a value
    that is not a router recording a finite ``val_utility`` per trial."""
    try:
        router = resolve_base(value, env.problem(), who)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith(who) else f"{who}: {message}") from exc
    val = getattr(router, "val_utility", None)
    if not isinstance(val, torch.Tensor) or val.shape != (env.num_trials,):
        names = packaged_configs_of(_FittedRouter)  # the routers that record it
        raise ConfigError(
            f"{who}: choose_on_validation.as_baseline needs static routers that record their "
            f"validation utility per trial ({names}), got {type(router).__name__}"
        )
    out = val.detach().double().cpu().numpy()
    if not np.isfinite(out).all():
        raise ConfigError(
            f"{who}: its validation utility is not finite (a router with one candidate and "
            "no validation split records none); give the table a validation split"
        )
    return out


def choose_routers(
    env: Env,
    name: str,
    points: Sequence[dict[str, Any]],
    keys: Sequence[str],
    group: Sequence[Any],
) -> RouterChoice:
    """Choose the ``keys`` of ``points`` (the ``C`` candidates of ``learners.<name>``) per
    group of trials (``group [R]``, one label per trial of ``env``): per key, the value
    whose router has the highest mean ``val_utility`` over the group's trials (the first
    listed on a tie). Each router is built once."""
    r, count = env.num_trials, len(points)
    labels = pd.Series(list(group))
    eligible = np.ones((count, r), dtype=bool)
    utility = np.zeros((count, r))
    for key in keys:
        values = distinct_values(points, key)
        val = np.stack(
            [
                router_val_utility(v, env, f"learners.{name}.{key}[{i}]")
                for i, v in enumerate(values)
            ]
        )  # [V, R]
        pooled = pd.DataFrame(val.T).groupby(labels.to_numpy(), sort=False).mean()  # [G, V]
        best = {g: int(np.argmax(row.to_numpy())) for g, row in pooled.iterrows()}
        chosen = np.array([best[g] for g in labels])  # [R]
        index = np.array([next(i for i, v in enumerate(values) if p[key] == v) for p in points])
        eligible &= index[:, None] == chosen[None, :]
        utility += val[index] / len(keys)
    return RouterChoice(eligible, utility)


__all__ = ["RouterChoice", "choose_routers", "distinct_values", "router_val_utility"]
