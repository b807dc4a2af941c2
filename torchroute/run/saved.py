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

from torchroute.types import Problem, TrainSplit

_TRAIN_FIELDS = ("features", "scores", "costs", "embeddings")


def problem_state(problem: Problem) -> dict[str, Any]:
    """``problem`` as tensors, strings and numbers (on the CPU; ``init_rng`` left out)."""
    train = None
    if problem.train is not None:
        train = {k: _cpu(getattr(problem.train, k)) for k in _TRAIN_FIELDS}
    return {
        "kind": type(problem).__name__,  # a subclass's extra fields are not kept
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
    """The CPU :class:`Problem` of :func:`problem_state`."""
    train = state.get("train")
    return Problem(
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
    )


def trial_problem(problem: Problem, trial: int) -> Problem:
    """The one-trial (``R = 1``) problem of trial ``trial``: its ``rho`` and labels."""
    index = slice(trial, trial + 1)
    return dataclasses.replace(
        problem,
        num_trials=1,
        rho=problem.rho[index].clone(),
        labels={k: v[index].clone() for k, v in problem.labels.items()},
        init_rng=None,
    )


def _cpu(value: Any) -> Any:
    return value.detach().cpu() if isinstance(value, torch.Tensor) else value


__all__ = ["problem_from_state", "problem_state", "trial_problem"]
