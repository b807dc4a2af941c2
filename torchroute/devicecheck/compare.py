"""Comparing a device run with its CPU run: tolerances, states, frames and placement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from torchroute.learners import Learner


@dataclass(frozen=True)
class Tol:
    """``||device - cpu|| <= atol + rtol ||cpu||`` per tensor or summary column (2-norm)."""

    rtol: float
    atol: float


#: closed-form updates
EXACT = Tol(1e-9, 1e-12)
#: MLPs trained with Adam (reductions summed in another order compound over the steps)
NEURAL = Tol(1e-7, 1e-10)
#: iterative solvers (projections, eigen-updates) and the OMD learners
SOLVER = Tol(1e-5, 1e-8)
#: CABS: targets divided by probabilities of the graph program (an interior-point method)
IPS = Tol(1e-4, 1e-8)
#: the tolerances by the name a learner gives in ``Learner.device_tolerance``
TOLERANCES: dict[str, Tol] = {"exact": EXACT, "neural": NEURAL, "solver": SOLVER, "ips": IPS}


def tolerance_of(learner: type[Learner]) -> Tol:
    """The tolerance a learner class declares (``device_tolerance``, one of
    :data:`TOLERANCES`)."""
    name = getattr(learner, "device_tolerance", "exact")
    if name not in TOLERANCES:
        raise ValueError(
            f"{learner.__name__}.device_tolerance = {name!r}: expected one of {sorted(TOLERANCES)}"
        )
    return TOLERANCES[name]


#: the names of the eigenvalues kept beside an eigenvector ``basis`` in a learner's state
EIGENVALUE_KEYS = ("theta", "lam")


def flatten(state: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts / lists of a state dict -> ``{"a.b.0": leaf}``."""
    if isinstance(state, dict):
        items = state.items()
    elif isinstance(state, (list, tuple)):
        items = enumerate(state)
    else:
        return {prefix: state}
    out: dict[str, Any] = {}
    for key, value in items:
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def comparable_state(learner: Learner) -> dict[str, Any]:
    """The flattened CPU copy of ``learner.state_dict()``, eigen-pairs as matrices.

    An eigen-pair ``basis [..., d, k]`` with its eigenvalues ``theta [..., k]`` (HPG's
    mirror iterate) or ``lam [..., k]`` (the Euclidean baselines' ``W``) becomes the one
    entry ``basis·diag(<eigenvalues>)·basisᵀ [..., d, d]``: eigenvector signs, the order of
    equal eigenvalues and the slots of zero eigenvalues are the solver's choice, the matrix
    is not.
    """
    flat = {k: v.detach().cpu() if torch.is_tensor(v) else v for k, v in flatten(
        learner.state_dict()).items()}  # fmt: skip
    for key in [k for k in flat if k == "basis" or k.endswith(".basis")]:
        for name in EIGENVALUE_KEYS:
            values_key = key[: -len("basis")] + name
            if values_key in flat:
                basis, values = flat.pop(key), flat.pop(values_key)
                flat[f"{key}·diag({name})·basisᵀ"] = (basis * values[..., None, :]) @ basis.mT
                break
    return flat


def placement_failures(learner: Learner, device: torch.device, when: str) -> list[str]:
    """State tensors of ``learner`` that are not on ``device``."""
    bad = []
    for key, value in flatten(learner.state_dict()).items():
        if not torch.is_tensor(value) or _same_device(value.device, device):
            continue
        if value.ndim == 0 and key.rsplit(".", 1)[-1] == "step":
            continue  # optimizer step counters live on the host by design
        bad.append(f"{key} on {value.device}")
    return [f"{when}: {', '.join(bad)}"] if bad else []


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def close(a: Any, b: Any, tol: Tol) -> tuple[bool, float]:
    """``(a within tol of b, relative error)`` for tensors, arrays or plain values.

    Floating values: the non-finite entries must match exactly and the finite ones satisfy
    ``||a - b|| <= atol + rtol ||b||`` (2-norm over the whole tensor); the relative error is
    ``||a - b|| / ||b||`` (``||a - b||`` when ``b`` is 0). Other values must be equal (error
    0 or inf).
    """
    if torch.is_tensor(a) and torch.is_tensor(b):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False, float("inf")
        a, b = a.numpy(), b.numpy()
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if a.shape != b.shape:
            return False, float("inf")
        if a.dtype.kind not in "fc":
            equal = bool(np.array_equal(a, b))
            return equal, 0.0 if equal else float("inf")
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        finite = np.isfinite(b64)
        same_nonfinite = np.array_equal(a64[~finite], b64[~finite], equal_nan=True)
        if not same_nonfinite or not np.isfinite(a64[finite]).all():
            return False, float("inf")
        err = float(np.linalg.norm(a64[finite] - b64[finite]))
        ref = float(np.linalg.norm(b64[finite]))
        return err <= tol.atol + tol.rtol * ref, err / ref if ref > 0 else err
    equal = bool(a == b)
    return equal, 0.0 if equal else float("inf")


def compare_frames(what: str, a: pd.DataFrame, b: pd.DataFrame, tol: Tol) -> list[str]:
    """Columns of ``a`` (device) outside ``tol`` of ``b`` (CPU)."""
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return [f"{what}: columns or rows differ ({list(a.columns)} vs {list(b.columns)})"]
    bad = []
    for column in a.columns:
        ok, diff = close(a[column].to_numpy(), b[column].to_numpy(), tol)
        if not ok:
            bad.append(f"{what}.{column} (rel err {diff:.3g})")
    return bad


def compare_states(a: dict[str, Any], b: dict[str, Any], tol: Tol) -> list[str]:
    """Entries of state ``a`` (device) outside ``tol`` of ``b`` (CPU)."""
    if a.keys() != b.keys():
        return [f"state keys differ: {sorted(set(a) ^ set(b))}"]
    bad = []
    for key in a:
        ok, diff = close(a[key], b[key], tol)
        if not ok:
            bad.append(f"state.{key} (rel err {diff:.3g})")
    return bad
