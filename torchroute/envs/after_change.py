"""What retraining once a scenario's change has happened would see: the problem after it.

A reference learner (``static_refit``, :class:`~torchroute.learners.refit.StaticRefit`)
refits a static router on the train split with the change applied, to show what retraining
would give. :func:`after_change` builds its input from an env's scenario: per group of
trials that meet the same change (:meth:`~torchroute.envs.scenario.Scenario.change_groups`;
with ``arm: best`` each cost regime may change another model), the
:class:`~torchroute.types.Problem` of those trials with the train and validation splits
as they are after every event (:meth:`~torchroute.envs.scenario.Scenario.apply_to_split`:
a new model's rows visible, drifted scores shifted, costs at the new price). Only a
factory that asks for it (an ``after_change`` parameter) is given it: it holds what no
deployed router knows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import Tensor

from torchroute.types import Problem, TrainSplit

if TYPE_CHECKING:
    from torchroute.envs.scenario import Scenario


@dataclass(frozen=True)
class AfterChange:
    """The world after a scenario's change, for a learner that refits on it.

    Attributes:
        change: the first round of the change (the earliest event's start).
        groups: per group of trials that meet the same change, ``(trials [n_g] long, the
            Problem of those trials after the change)``; the groups cover every trial
            once.
    """

    change: int
    groups: tuple[tuple[Tensor, Problem], ...]


def after_change(
    problem: Problem,
    scenario: Scenario,
    train: TrainSplit | None,
    validation: TrainSplit | None,
) -> AfterChange:
    """The :class:`AfterChange` of ``problem``'s trials under ``scenario``.

    Args:
        problem: the env's problem (``R`` trials; its splits hide a new model's scores).
        scenario: the env's scenario, ``R`` trials.
        train: the full train split (``[n, K]`` scores and costs as the table has them).
        validation: the full validation split, or ``None``.

    Returns:
        per change group, the problem of its trials with ``train`` and ``validation``
        changed as after every event, ``prices`` the changed mean train cost ``[K]`` and no
        hidden arm.
    """
    groups = []
    for trials in scenario.change_groups():
        first = int(trials[0])
        idx = trials.to(problem.rho.device)
        new_train = None if train is None else scenario.apply_to_split(train, first)
        new_val = None if validation is None else scenario.apply_to_split(validation, first)
        part = dataclasses.replace(
            problem,
            num_trials=int(trials.numel()),
            rho=problem.rho[idx],
            train=new_train,
            validation=new_val,
            prices=None if new_train is None else new_train.costs.mean(0),
            labels={k: v[idx] for k, v in problem.labels.items()},
            init_rng=None,
            hidden_arms=None,
            budget=None
            if problem.budget is None
            else problem.budget[idx.to(problem.budget.device)],
        )
        groups.append((trials, part))
    return AfterChange(scenario.change, tuple(groups))


__all__ = ["AfterChange", "after_change"]
