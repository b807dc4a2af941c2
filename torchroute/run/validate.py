"""What a run folder's files hold, checked before use: schema first, then values.

``problem.pt``, ``features.pt`` and the checkpoints are plain dicts of tensors, strings and
numbers (read with ``weights_only=True``). A file swapped for another (a checkpoint named
``problem.pt``), an edited one (duplicate or invalid arm names, a negative or infinite
price, a NaN in a learner's state) or one of another shape is refused here with one line
naming the file and the entry, not later as ``KeyError: 'problem'`` or a served NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from torchroute.checkpoint import CheckpointError
from torchroute.run.saved import SavedProblemError, problem_from_state
from torchroute.types import Problem

#: the feature sources a ``features.pt`` may name
FEATURE_SOURCES = ("pca", "raw", "oracle")


def _need(payload: Any, keys: tuple[str, ...], path: Path, what: str) -> dict:
    """``payload`` when it is a dict holding ``keys``; else a one-line error saying what
    the file should have been."""
    if not isinstance(payload, dict) or not all(k in payload for k in keys):
        found = sorted(map(str, payload)) if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(
            f"{path} is not a {what} (expected the entries {list(keys)}, found {found})"
        )
    return payload


def check_arm_names(names: Any, where: str) -> tuple[str, ...]:
    """Arm names as ``/models`` accepts them: strings of :data:`MODEL_NAME`, 1 to 128
    characters, unique case-insensitively."""
    from torchroute.checks import MAX_MODEL_NAME, MODEL_NAME

    if not isinstance(names, (list, tuple)) or not names:
        raise CheckpointError(f"{where}: arm_names must be a non-empty list of names")
    seen: dict[str, str] = {}
    for name in names:
        if not (isinstance(name, str) and 1 <= len(name) <= MAX_MODEL_NAME):
            raise CheckpointError(
                f"{where}: arm name {name!r} is not a name of 1 to 128 characters"
            )
        if not MODEL_NAME.fullmatch(name):
            raise CheckpointError(
                f"{where}: arm name {name!r} may only hold letters, digits and . _ - : / @ +"
            )
        if name.casefold() in seen:
            raise CheckpointError(
                f"{where}: arm name {name!r} repeats {seen[name.casefold()]!r}; names are unique"
            )
        seen[name.casefold()] = name
    return tuple(names)


def check_finite(value: Any, where: str, allow_inf: bool = False) -> None:
    """Every floating tensor in ``value`` (nested dicts and lists included) is finite (with
    ``allow_inf``: holds no NaN; an open bound may be infinite)."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            bad = torch.isnan(value) if allow_inf else ~torch.isfinite(value)
            if bool(bad.any()):
                what = "NaN" if allow_inf else "NaN or infinite values"
                raise CheckpointError(f"{where} holds {what}; refusing to use it")
    elif isinstance(value, Mapping):
        for k, v in value.items():
            check_finite(v, f"{where}.{k}", allow_inf)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_finite(v, f"{where}[{i}]", allow_inf)
    elif isinstance(value, float) and (
        math.isnan(value) or not (allow_inf or math.isfinite(value))
    ):
        raise CheckpointError(f"{where} is {value}; refusing to use it")


def check_problem_payload(payload: Any, path: Path, trials: int) -> tuple[Problem, dict]:
    """The problem and layout of a ``problem.pt`` payload, checked against the run's
    ``trials`` (``len(rhos) * len(seeds)``).

    Raises:
        CheckpointError: not a saved problem, or values a run cannot have written.
        ConfigError: a problem of a kind that cannot be read back (an older format).
    """
    from torchroute.errors import ConfigError

    _need(payload, ("problem",), path, "saved problem (problem.pt of a run)")
    state = _need(
        payload["problem"],
        ("num_trials", "num_arms", "dim", "rho", "arm_names"),
        path,
        "saved problem (problem.pt of a run)",
    )
    kind = state.get("kind", "Problem")
    if kind not in ("Problem", "SubsetProblem"):
        raise ConfigError(
            f"{path}: the run's learners were built for a {kind}; a run can be read back "
            "for single-choice learners (Problem) and subset learners (SubsetProblem)"
        )
    names = check_arm_names(state["arm_names"], f"{path}")
    for key in ("num_trials", "num_arms", "dim"):
        value = state[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise CheckpointError(f"{path}: {key} must be an integer >= 1, got {value!r}")
    if state["num_trials"] != trials:
        raise CheckpointError(
            f"{path}: holds {state['num_trials']} trials but the run's config.yaml has "
            f"{trials} (rhos x seeds); the file belongs to another run"
        )
    if len(names) != state["num_arms"]:
        raise CheckpointError(f"{path}: {len(names)} arm names for num_arms={state['num_arms']}")
    rho = state["rho"]
    if not isinstance(rho, torch.Tensor) or tuple(rho.shape) != (trials,):
        raise CheckpointError(f"{path}: rho must be a tensor of shape [{trials}]")
    if not bool(torch.isfinite(rho).all() & (rho >= 0).all()):
        raise CheckpointError(f"{path}: rho must be finite and >= 0")
    prices = state.get("prices")
    if prices is not None:
        if not isinstance(prices, torch.Tensor) or tuple(prices.shape) != (len(names),):
            raise CheckpointError(f"{path}: prices must be a tensor of shape [{len(names)}]")
        if not bool(torch.isfinite(prices).all() & (prices >= 0).all()):
            raise CheckpointError(f"{path}: prices must be finite and >= 0 (one per arm)")
    check_finite(state, f"{path}: problem", allow_inf=True)  # a target box may be open
    layout = payload.get("layout") or {"world_size": 1, "trial_chunk": None}
    world, chunk = layout.get("world_size", 1), layout.get("trial_chunk")
    if not isinstance(world, int) or isinstance(world, bool) or not 1 <= world <= trials:
        raise CheckpointError(f"{path}: layout.world_size must be in 1..{trials}, got {world!r}")
    if chunk is not None and (not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1):
        raise CheckpointError(f"{path}: layout.trial_chunk must be null or >= 1, got {chunk!r}")
    try:
        problem = problem_from_state(state)
    except SavedProblemError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{path}: the saved problem does not fit together: {exc}") from None
    return problem, {"world_size": world, "trial_chunk": chunk}


def check_checkpoint(
    payload: Any, path: Path, learner: str, fingerprint: Mapping[str, Any]
) -> None:
    """A learner checkpoint of the run: its entries, finite state, and the stored
    configuration equal to the run's ``fingerprint`` (``config.yaml`` without run-time keys).

    Raises:
        CheckpointError: a file of another kind, NaN/inf state, or another configuration.
    """
    _need(payload, ("learner", "learner_class", "config"), path, "learner checkpoint")
    if not isinstance(payload["learner"], dict) or not isinstance(payload["config"], dict):
        raise CheckpointError(f"{path}: 'learner' and 'config' must be dicts")
    stored = dict(payload["config"])
    stored.pop("layout", None)
    if stored.pop("learner", learner) != learner:
        raise CheckpointError(f"checkpoint {path} holds another learner than {learner!r}")
    differ = sorted(
        k for k in set(stored) | set(fingerprint) if stored.get(k) != fingerprint.get(k)
    )
    if differ:
        raise CheckpointError(
            f"checkpoint {path} was written by another configuration than the run's "
            f"config.yaml ({', '.join(differ[:3])} differ); serve the run that wrote it"
        )
    check_finite(payload["learner"], f"checkpoint {path}: learner state")


def check_feature_state(state: Any, path: Path, embed_dim: int | None) -> dict:
    """The ``features`` entry of a ``features.pt``: source, flags, and a PCA mean ``[e]``
    and components ``[p, e]`` of the run's embedding size ``e``, finite."""
    _need(state, ("source", "bias", "normalize", "mean", "components"), path, "feature map")
    if state["source"] not in FEATURE_SOURCES:
        raise CheckpointError(
            f"{path}: source must be one of {FEATURE_SOURCES}, got {state['source']!r}"
        )
    for key in ("bias", "normalize"):
        if not isinstance(state[key], bool):
            raise CheckpointError(f"{path}: {key} must be true or false, got {state[key]!r}")
    mean, components = state["mean"], state["components"]
    if (mean is None) != (components is None):
        raise CheckpointError(f"{path}: mean and components go together")
    if components is not None:
        ok = isinstance(mean, torch.Tensor) and isinstance(components, torch.Tensor)
        ok = ok and mean.ndim in (1, 2) and mean.shape[:-1] in ((), (1,)) and components.ndim == 2
        ok = ok and components.shape[1] == mean.shape[-1]
        if ok and embed_dim is not None:
            ok = mean.shape[-1] == embed_dim
        if not ok:
            raise CheckpointError(
                f"{path}: mean and components must be tensors [1, e] and [p, e] with e = "
                f"{embed_dim} (the run's embedding size)"
            )
    check_finite(state, f"{path}: features")
    return state


def check_router_state(payload: dict, where: str) -> None:
    """A serve state (``kind: router``): its arm names (the ``/models`` rules), prices
    (finite, >= 0, one per arm) and a finite learner state; a NaN state is not served."""
    if not isinstance(payload.get("learner"), dict):
        raise CheckpointError(f"{where} has no learner state")
    names = check_arm_names(payload.get("arm_names"), where)
    prices = payload.get("prices")
    if prices is not None:
        ok = isinstance(prices, list) and len(prices) == len(names)
        ok = ok and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
            for v in prices
        )
        if not ok:
            raise CheckpointError(f"{where}: prices must be {len(names)} finite numbers >= 0")
    check_finite(payload["learner"], f"{where}: learner state")


__all__ = [
    "FEATURE_SOURCES",
    "check_arm_names",
    "check_checkpoint",
    "check_feature_state",
    "check_finite",
    "check_problem_payload",
    "check_router_state",
]
