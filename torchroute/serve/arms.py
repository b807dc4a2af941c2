"""Adding an arm to a learner's state: the new arm starts as a fresh learner's would."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
from torch import Tensor

from torchroute.errors import InputError
from torchroute.learners.base import Learner
from torchroute.types import Problem


def add_arm(
    learner: Learner,
    factory: Callable[[Problem], Learner],
    problem: Problem,
    name: str,
    price: float | None,
) -> tuple[Learner, Problem]:
    """``learner`` and ``problem`` with one more arm ``name`` (``K -> K + 1``).

    The new arm has no train data: in the grown problem's train split (when there is
    one) it scores 0 at its price, the most pessimistic prior, so a router fitted on the
    train split (``best_single``, ``knn``, ...) picks it only once feedback says so.
    ``factory`` builds a fresh ``K + 1``-arm learner for it and :func:`grow_state` copies
    ``learner``'s state into it, so the new arm keeps the fresh learner's values.
    """
    k, prices = learner.num_arms, problem.prices
    if prices is not None and price is not None:
        prices = torch.cat([prices.cpu(), prices.new_tensor([price]).cpu()])
    elif prices is not None:
        prices = None  # a price is unknown: no price vector
    train = problem.train
    if train is not None:
        n = train.scores.shape[0]
        new_cost = train.costs.new_full((n, 1), 0.0 if price is None else float(price))
        train = replace(
            train,
            scores=torch.cat([train.scores, train.scores.new_zeros(n, 1)], 1),
            costs=torch.cat([train.costs, new_cost], 1),
        )
    grown = replace(
        problem, num_arms=k + 1, arm_names=(*problem.arm_names, name), prices=prices, train=train
    )
    try:
        fresh = factory(grown).cpu()
    except ValueError as exc:
        raise InputError(f"{type(learner).__name__} cannot add a model: {exc}") from exc
    fresh.load_state_dict(grow_state(learner.state_dict(), fresh.state_dict(), k))
    return fresh, grown


def grow_state(
    old: dict[str, Tensor], fresh: dict[str, Tensor], num_arms: int
) -> dict[str, Tensor]:
    """The state of a ``K + 1``-arm learner holding ``old``'s ``K`` arms.

    A dimension whose size is ``K`` in ``old`` and ``K + 1`` in ``fresh`` is an arm
    dimension; every entry of the first ``K`` arms is copied from ``old`` and the new arm's
    entries keep ``fresh``'s values (an uninformed prior). Tensors without an arm dimension
    (round counters and the like) are copied from ``old``.

    Args:
        old: state dict of the ``K``-arm learner, e.g. ``a_inv [R, K, d, d]``.
        fresh: state dict of a fresh ``K + 1``-arm learner of the same class and settings.
        num_arms: ``K``.

    Returns:
        A new state dict with ``fresh``'s shapes (``a_inv [R, K + 1, d, d]``).
    """
    if set(old) != set(fresh):
        raise InputError(
            f"the learner's state keys change with the arm count ({sorted(set(old) ^ set(fresh))})"
        )
    out = {}
    for key, new in fresh.items():
        value = old[key]
        if not isinstance(new, Tensor):
            raise InputError(f"state {key!r} is not a tensor; this learner cannot add an arm")
        if value.ndim != new.ndim:
            raise InputError(f"state {key!r} changes rank when an arm is added")
        index = []
        for dim, (a, b) in enumerate(zip(value.shape, new.shape)):
            if a == b:
                index.append(slice(None))
            elif (a, b) == (num_arms, num_arms + 1):
                index.append(slice(0, num_arms))
            else:
                raise InputError(
                    f"state {key!r} dimension {dim} goes from {a} to {b} when an arm is added; "
                    f"expected {num_arms} -> {num_arms + 1}"
                )
        grown = new.detach().clone().to(value.dtype)
        grown[tuple(index)] = value
        out[key] = grown
    return out


def pad_arms(probs: Tensor, num_arms: int) -> Tensor:
    """Zero-pad ``[..., K']`` probabilities to ``[..., K]`` (arms added after a decision)."""
    extra = num_arms - probs.shape[-1]
    return torch.nn.functional.pad(probs, (0, extra)) if extra > 0 else probs
