"""A run's :class:`~torchroute.types.Problem` as plain tensors, and one trial of it.

``problem.pt`` in a run folder holds :func:`problem_state` of the problem every learner of
the run was built for (all ``R`` trials); serving rebuilds it with :func:`problem_from_state`
and keeps one trial with :func:`trial_problem`. No object is unpickled: the file is read
with ``weights_only=True``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from torchroute.errors import SavedProblemError
from torchroute.types import Problem, TrainSplit

_TRAIN_FIELDS = ("features", "scores", "costs", "embeddings")
#: the fields a :class:`~torchroute.envs.subset.SubsetProblem` adds (kept under ``subset``)
_SUBSET_FIELDS = ("draws", "costs", "lower", "upper", "num_facets", "context_names")
#: fields of a subset problem with a leading trial dimension
_SUBSET_TRIAL_FIELDS = ("costs", "lower", "upper")


def problem_state(problem: Problem) -> dict[str, Any]:
    """``problem`` as tensors, strings and numbers (on the CPU; ``init_rng`` left out;
    ``hidden_arms`` only when a scenario set it, ``budget`` only when a pacer's).

    A :class:`~torchroute.envs.subset.SubsetProblem` also keeps its draws, cost vectors,
    target box, facets and context names (``subset``); another subclass's extra fields are
    not kept.
    """
    from torchroute.envs.subset.base import SubsetProblem

    train = None
    if problem.train is not None:
        train = {k: _cpu(getattr(problem.train, k)) for k in _TRAIN_FIELDS}
    subset = None
    if isinstance(problem, SubsetProblem):
        subset = {k: _cpu(getattr(problem, k)) for k in _SUBSET_FIELDS}
        subset["context_names"] = list(problem.context_names)
    optional = {} if problem.hidden_arms is None else {"hidden_arms": _cpu(problem.hidden_arms)}
    if problem.budget is not None:
        optional["budget"] = _cpu(problem.budget)
    return optional | {
        "subset": subset,
        "kind": type(problem).__name__,
        "num_trials": problem.num_trials,
        "num_arms": problem.num_arms,
        "dim": problem.dim,
        "rho": _cpu(problem.rho),
        "arm_names": list(problem.arm_names),
        "prices": _cpu(problem.prices),
        "embed_dim": problem.embed_dim,
        "train": train,
        "horizon": problem.horizon,
        "dtype": str(problem.dtype).removeprefix("torch."),
        "labels": {k: _cpu(v) for k, v in problem.labels.items()},
    }


def problem_from_state(state: dict[str, Any]) -> Problem:
    """The CPU :class:`Problem` of :func:`problem_state` (a ``SubsetProblem`` for a subset
    run).

    Raises:
        SavedProblemError: a subset problem saved without its subset fields.
    """
    train = state.get("train")
    kind = state.get("kind", "Problem")
    extra: dict[str, Any] = {}
    cls: type[Problem] = Problem
    if kind == "SubsetProblem":
        from torchroute.envs.subset.base import SubsetProblem

        subset = state.get("subset")
        if not isinstance(subset, dict):
            raise SavedProblemError(
                "the saved problem of a subset run has no draws, costs or target box (written "
                "by an older torchroute); run simulate again"
            )
        cls = SubsetProblem
        extra = {k: subset[k] for k in _SUBSET_FIELDS if k in subset}
        extra["context_names"] = tuple(extra.get("context_names") or ())
    return cls(
        num_trials=int(state["num_trials"]),
        num_arms=int(state["num_arms"]),
        dim=int(state["dim"]),
        rho=state["rho"],
        arm_names=tuple(state["arm_names"]),
        prices=state.get("prices"),
        embed_dim=state.get("embed_dim"),
        train=None if train is None else TrainSplit(**train),
        horizon=state.get("horizon"),
        device="cpu",
        dtype=getattr(torch, str(state.get("dtype", "float32"))),
        labels=dict(state.get("labels") or {}),
        hidden_arms=state.get("hidden_arms"),
        budget=state.get("budget"),
        **extra,
    )


def trial_problem(problem: Problem, trial: int) -> Problem:
    """The one-trial (``R = 1``) problem of trial ``trial``: its ``rho`` and labels."""
    index = slice(trial, trial + 1)
    per_trial = {
        k: getattr(problem, k)[index].clone()
        for k in _SUBSET_TRIAL_FIELDS
        if isinstance(getattr(problem, k, None), torch.Tensor)
    }
    for name in ("hidden_arms", "budget"):
        value = getattr(problem, name)
        if value is not None:
            per_trial[name] = value[index].clone()
    return dataclasses.replace(
        problem,
        **per_trial,
        num_trials=1,
        rho=problem.rho[index].clone(),
        labels={k: v[index].clone() for k, v in problem.labels.items()},
        init_rng=None,
    )


def _cpu(value: Any) -> Any:
    return value.detach().cpu() if isinstance(value, torch.Tensor) else value


__all__ = ["SavedProblemError", "problem_from_state", "problem_state", "trial_problem"]
