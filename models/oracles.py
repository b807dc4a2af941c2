"""Reward and affinity oracles (``docs/papers/cabs.md`` (oracles)) and the oracle artifact on disk.

- :class:`RewardOracle`: surrogate utilities ``s_j = clip(y_i + delta^_j - rho c^_j, 0, 1)``
  for the arms a played arm ``i`` did not reveal, with the IQR pruning switch.
- :class:`AffinityOracle`: ``R[i, j] = 1 - 2 |y_bar_i - y_bar_j|`` (diagonal ``-inf``) and the
  feedback graph ``A[i, j] ~ Bernoulli(sigmoid((1 - R[i, j]) / 2))`` of CABS-C line 6.

Both are thin modules over the pure functions of :mod:`torchroute.functional.oracle`
(:func:`surrogate_utility`, :func:`iqr_keep_mask`, :func:`affinity_from_accuracy`,
:func:`sample_graph`), which this module re-exports.
- :func:`save_oracle` / :func:`load_oracle`: one self-describing ``torch.save`` dict, written
  atomically and loadable with ``weights_only=True`` (no Lightning needed).
"""

from __future__ import annotations

import os
import pickle
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from torchroute.errors import UserError
from torchroute.functional.oracle import (
    affinity_from_accuracy,
    iqr_keep_mask,
    sample_graph,
    surrogate_utility,
)
from torchroute.io import atomic_write
from torchroute.models.heads import MultiHeadOracle

__all__ = [
    "AffinityOracle",
    "OracleArtifactError",
    "RewardOracle",
    "affinity_from_accuracy",
    "iqr_keep_mask",
    "load_oracle",
    "sample_graph",
    "save_oracle",
    "surrogate_utility",
]

ORACLE_FORMAT = 1
ORACLE_KIND = "torchroute.MultiHeadOracle"


class OracleArtifactError(UserError, ValueError):
    """An oracle file is missing, not an oracle artifact, or does not fit the data."""


class RewardOracle(nn.Module):
    """Surrogate utilities of the unplayed arms from one observed score.

    ``s_j = clip(y_i + delta^_j(x, i, y_i) - rho c^_j(x), 0, 1)`` with ``delta^`` from the
    propagation head and ``c^`` from the cost head of ``oracle``
    (:func:`~torchroute.functional.oracle.surrogate_utility`).

    Args:
        oracle: a module with ``propagation(e, anchor, y_anchor) -> [n, K]`` and
            ``cost(e) -> [n, K]`` (a :class:`MultiHeadOracle`).
        prune: apply :func:`~torchroute.functional.oracle.iqr_keep_mask` (on by default,
            as in the CABS paper).

    Shapes:
        ``e [R, B, d_e]``, ``anchor [R, B]``, ``y_anchor [R, B]``, ``rho [R]`` ->
        ``(s [R, B, K], keep [R, B, K] bool)``; ``keep`` is ``False`` at the anchor.
    """

    def __init__(self, oracle: nn.Module, prune: bool = True) -> None:
        super().__init__()
        self.oracle = oracle
        self.prune = prune

    def forward(
        self, e: Tensor, anchor: Tensor, y_anchor: Tensor, rho: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Surrogate utilities of every arm from the played one.

        Args:
            e: ``[R, B, d_e]`` encoder embeddings.
            anchor: ``[R, B]`` the played arm.
            y_anchor: ``[R, B]`` its observed accuracy.
            rho: ``[R]`` cost sensitivity per trial.

        Returns:
            ``(s, keep)``: surrogate utilities ``[R, B, K]`` and the mask ``[R, B, K]`` of the
            arms whose surrogate is used (never the anchor; IQR-pruned when ``prune``).
        """
        r, b, d = e.shape
        flat = e.reshape(r * b, d)
        delta = self.oracle.propagation(flat, anchor.reshape(-1), y_anchor.reshape(-1))
        delta = delta.reshape(r, b, -1)  # [R, B, K]
        cost = self.oracle.cost(flat).reshape(r, b, -1)  # [R, B, K]
        s = surrogate_utility(y_anchor, delta, cost, rho)  # [R, B, K]
        if self.prune:
            keep = iqr_keep_mask(delta, anchor)
        else:
            keep = torch.arange(delta.shape[-1], device=delta.device) != anchor[..., None]
        return s, keep


class AffinityOracle(nn.Module):
    """Arm affinities from the context-only accuracy head (CABS-C line 6).

    Args:
        oracle: a module with ``accuracy(e) -> [n, K]`` (a :class:`MultiHeadOracle`).

    Shapes:
        ``forward``: ``e [..., d_e]`` -> ``R [..., K, K]`` with ``-inf`` on the diagonal;
        ``sample``: ``e [R, B, d_e]`` -> ``A [R, B, K, K]`` bool.
    """

    def __init__(self, oracle: nn.Module) -> None:
        super().__init__()
        self.oracle = oracle

    def forward(self, e: Tensor) -> Tensor:
        """Affinities ``R [..., K, K]`` (``-inf`` on the diagonal) from ``e [..., d_e]``."""
        lead, d = e.shape[:-1], e.shape[-1]
        y_bar = self.oracle.accuracy(e.reshape(-1, d))
        return affinity_from_accuracy(y_bar.reshape(*lead, -1))

    def sample(self, e: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Draw the feedback graph for contexts ``e [R, B, d_e]`` -> ``[R, B, K, K]``."""
        return sample_graph(self(e), generator)


# ---------------------------------------------------------------------------- artifact
def save_oracle(
    oracle: MultiHeadOracle, path: str | os.PathLike, extra: dict[str, Any] | None = None
) -> Path:
    """Write ``oracle`` to ``path`` atomically (temporary file, then ``os.replace``).

    The file is a plain dict ``{"format", "kind", "arm_names", "embed_dim",
    "encoder_name", "config", "state_dict", "extra"}`` readable with
    ``torch.load(path, weights_only=True)``; ``extra`` must hold plain Python values.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": ORACLE_FORMAT,
        "kind": ORACLE_KIND,
        "arm_names": list(oracle.arm_names) if oracle.arm_names is not None else None,
        "embed_dim": oracle.embed_dim,
        "encoder_name": oracle.encoder_name,
        "config": oracle.config(),
        "state_dict": {k: v.detach().cpu() for k, v in oracle.state_dict().items()},
        "extra": dict(extra or {}),
    }
    with atomic_write(path, "wb") as fh:
        torch.save(payload, fh)
    return path


def load_oracle(
    path: str | os.PathLike,
    map_location: str | torch.device = "cpu",
    arm_names: Sequence[str] | None = None,
    embed_dim: int | None = None,
) -> MultiHeadOracle:
    """Load a :class:`MultiHeadOracle` written by :func:`save_oracle` (no Lightning needed).

    Args:
        path: the artifact (``oracle.pt``).
        map_location: device for the weights.
        arm_names: when given, the arms the caller's data has; a different arm set or
            order raises :class:`OracleArtifactError`.
        embed_dim: when given, the caller's embedding dimension; checked likewise.

    Returns:
        the oracle in eval mode.
    """
    path = Path(path)
    if not path.is_file():
        raise OracleArtifactError(f"no oracle artifact at {path}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's note on a foreign pickle protocol
            payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:  # a planted pickle: refused before any of it runs
        raise OracleArtifactError(
            f"{path} is not a torchroute file; refusing to unpickle it"
        ) from None
    except Exception as exc:  # zip errors: say what the file should have been
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
        raise OracleArtifactError(
            f"{path} is not a torchroute oracle artifact (torch.load failed: {first})"
        ) from None
    if not isinstance(payload, dict) or payload.get("kind") != ORACLE_KIND:
        raise OracleArtifactError(
            f"{path} is not a torchroute oracle artifact (expected a dict with "
            f"kind={ORACLE_KIND!r}; a Lightning .ckpt is not one: use the oracle.pt "
            "that pretraining writes)"
        )
    if payload.get("format") != ORACLE_FORMAT:
        raise OracleArtifactError(
            f"{path} has oracle format {payload.get('format')!r}; this version reads "
            f"format {ORACLE_FORMAT}"
        )
    # artifacts written before the propagation options existed hold the original head
    old = {"propagation": "delta", "conditioning": "concat", "point": "mean"}
    config = {**old, **payload["config"]}
    oracle = MultiHeadOracle(**config)
    oracle.load_state_dict(payload["state_dict"])
    try:
        oracle.check_compatible(arm_names, embed_dim, source=f"oracle {path}")
    except ValueError as exc:
        raise OracleArtifactError(str(exc)) from None
    return oracle.to(map_location).eval()
