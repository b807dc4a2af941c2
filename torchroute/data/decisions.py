"""Logged routing decisions: one row per decision a behaviour policy took, read and validated.

The format (Parquet with native list columns, or CSV with list cells JSON-encoded)::

    request_id     string, unique
    timestamp      float64 seconds since the epoch (optional)
    query_id       string, a row id of a routing table      } at least one
    text           string, the prompt                       } of these four
    embedding      list<float64>, the encoder's embedding   } context
    features       list<float64>, the features the learner saw } columns
    arm            string, the model chosen
    propensity     float64 in (0, 1], the behaviour policy's probability of ``arm``
    arms           list<string>, the models available, in the learner's order (optional)
    probabilities  list<float64>, the behaviour policy's probability of each of ``arms``
    score, cost    float64, null when no feedback arrived
    learner, rho   optional metadata
    seed, trial    optional metadata: the trial's stream seed and its index in the run

Other columns are ignored. :func:`load_decisions` checks every cell and raises a one-line
:class:`DecisionLogError` naming the file, the row and the column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from torchroute.data.decision_cells import CellChecker, DecisionLogError

CONTEXT_COLUMNS = ("query_id", "text", "embedding", "features")
REQUIRED_COLUMNS = ("request_id", "arm", "propensity")
_TOL = 1e-6


@dataclass(frozen=True)
class DecisionLog:
    """``n`` logged decisions over ``K`` arms.

    Attributes:
        request_ids: ``n`` distinct ids.
        arm_names: the ``K`` arms, in the order of the log's ``arms`` lists (or as given).
        action: the chosen arm of each decision, ``[n]`` long.
        propensity: the behaviour policy's probability of ``action``, ``[n]`` float64.
        probabilities: the behaviour policy's distribution ``[n, K]`` or ``None``.
        score: quality of the chosen arm ``[n]`` float64 (NaN: no feedback).
        cost: cost of the chosen arm ``[n]`` float64 (NaN: no feedback).
        features: ``[n, d]`` float64 or ``None``; embedding: ``[n, e]`` or ``None``.
        query_ids, text: ``n`` strings each, or ``None``.
        timestamp: ``[n]`` float64 or ``None``.
        learner: the behaviour learner's name per row, or ``None``; rho: ``[n]`` or ``None``.
        seed, trial: ``[n]`` long (the simulated trial's stream seed and index) or ``None``.
        source: where the log came from (errors name it).
    """

    request_ids: tuple[str, ...]
    arm_names: tuple[str, ...]
    action: Tensor
    propensity: Tensor
    score: Tensor
    cost: Tensor
    probabilities: Tensor | None = None
    features: Tensor | None = None
    embedding: Tensor | None = None
    query_ids: tuple[str, ...] | None = None
    text: tuple[str, ...] | None = None
    timestamp: Tensor | None = None
    learner: tuple[str, ...] | None = None
    rho: Tensor | None = None
    seed: Tensor | None = None
    trial: Tensor | None = None
    source: str = "<in-memory log>"

    @property
    def num_decisions(self) -> int:
        """``n``, the number of logged decisions."""
        return self.action.numel()

    @property
    def num_arms(self) -> int:
        """``K``, the number of arms of the log."""
        return len(self.arm_names)

    @property
    def has_feedback(self) -> Tensor:
        """``[n]`` bool: the decisions whose score and cost came back."""
        return ~(torch.isnan(self.score) | torch.isnan(self.cost))

    def utility(self, rho: Tensor | float) -> Tensor:
        """``clip(score - rho cost, 0, 1)`` of the chosen arms: ``[n]``, or ``[G, n]`` for
        ``rho [G]`` (NaN where no feedback came back)."""
        rho_t = torch.as_tensor(rho, dtype=torch.float64)
        if (rho_t < 0).any():
            raise ValueError(f"rho must be >= 0, got {rho_t.tolist()}")
        rho_b = rho_t if rho_t.ndim == 0 else rho_t[:, None]
        value = (self.score - rho_b * self.cost).clamp(0.0, 1.0)
        return torch.where(self.has_feedback, value, torch.nan)

    def select(self, keep: Tensor) -> DecisionLog:
        """The decisions where ``keep [n]`` (bool) is true, as a new log."""
        idx = torch.nonzero(torch.as_tensor(keep), as_tuple=True)[0]
        pos = idx.tolist()

        def pick(value):
            if value is None:
                return None
            if isinstance(value, Tensor):
                return value[idx]
            return tuple(value[i] for i in pos)

        changes = {
            name: pick(getattr(self, name))
            for name in self.__dataclass_fields__
            if name not in ("arm_names", "source")
        }
        return DecisionLog(**changes, arm_names=self.arm_names, source=self.source)


def load_decisions(path: str | Path, arms: Sequence[str] | None = None) -> DecisionLog:
    """Read and validate a decision log (``.parquet``/``.pq`` or ``.csv``).

    Args:
        path: the log file (never modified).
        arms: the arm names a target policy knows, in its order; every logged ``arm`` (and
            every ``arms`` list) must use only these. Default: the log's ``arms`` lists,
            or, without them, the chosen arms in order of first appearance.

    Returns:
        A :class:`DecisionLog`.

    Raises:
        DecisionLogError: a one-line message naming the file, the row (1-based data row and
            its ``request_id``) and the column of the first bad cell.
    """
    path = Path(path)
    frame = _read(path)
    return decisions_from_frame(frame, arms=arms, source=str(path))


def decisions_from_frame(
    frame: pd.DataFrame, arms: Sequence[str] | None = None, source: str = "<frame>"
) -> DecisionLog:
    """Validate a decision-log frame (list cells as lists or JSON strings); see
    :func:`load_decisions`."""
    check = CellChecker(frame, source)
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise DecisionLogError(
            f"{source}: missing column(s) {missing}; a decision log needs {list(REQUIRED_COLUMNS)}"
        )
    if not any(c in frame.columns for c in CONTEXT_COLUMNS):
        raise DecisionLogError(
            f"{source}: no context column; a decision log needs one of {list(CONTEXT_COLUMNS)}"
        )
    if len(frame) == 0:
        raise DecisionLogError(f"{source}: the log has no rows")
    ids = check.strings("request_id")
    seen: dict[str, int] = {}
    for i, rid in enumerate(ids):
        if rid in seen:
            raise DecisionLogError(
                f"{source}: row {i + 1}, column 'request_id': {rid!r} repeats row {seen[rid] + 1}"
                "; request ids must be unique"
            )
        seen[rid] = i
    check.ids = ids
    chosen = check.strings("arm")
    names = _arm_names(check, chosen, arms)
    index = {a: k for k, a in enumerate(names)}
    for i, a in enumerate(chosen):
        if a not in index:
            check.fail(i, "arm", f"unknown arm {a!r}; known arms: {list(names)}")
    action = torch.tensor([index[a] for a in chosen], dtype=torch.long)
    propensity = check.floats("propensity", lo=0.0, hi=1.0, open_lo=True)
    probabilities = None
    if "probabilities" in frame.columns:
        probabilities = _probabilities(check, names, propensity, action)
    score = check.floats("score", lo=0.0, hi=1.0, nullable=True) if "score" in frame else None
    cost = check.floats("cost", lo=0.0, hi=None, nullable=True) if "cost" in frame else None
    n = len(frame)
    score = torch.full((n,), torch.nan, dtype=torch.float64) if score is None else score
    cost = torch.full((n,), torch.nan, dtype=torch.float64) if cost is None else cost
    for i in torch.nonzero(torch.isnan(score) != torch.isnan(cost)).flatten()[:1].tolist():
        col = "cost" if torch.isnan(cost[i]) else "score"
        check.fail(i, col, "null while the other of score/cost is set; give both or neither")
    return DecisionLog(
        request_ids=tuple(ids),
        arm_names=tuple(names),
        action=action,
        propensity=propensity,
        score=score,
        cost=cost,
        probabilities=probabilities,
        features=check.vectors("features") if "features" in frame else None,
        embedding=check.vectors("embedding") if "embedding" in frame else None,
        query_ids=tuple(check.strings("query_id")) if "query_id" in frame else None,
        text=tuple(check.strings("text")) if "text" in frame else None,
        timestamp=check.floats("timestamp", lo=None, hi=None) if "timestamp" in frame else None,
        learner=tuple(check.strings("learner")) if "learner" in frame else None,
        rho=check.floats("rho", lo=0.0, hi=None) if "rho" in frame else None,
        seed=check.integers("seed") if "seed" in frame else None,
        trial=check.integers("trial") if "trial" in frame else None,
        source=source,
    )


def _read(path: Path) -> pd.DataFrame:
    if not path.is_file():
        from torchroute.io import not_a_file

        raise DecisionLogError(f"{path}: {not_a_file(path)}; expected a decision log file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            return pd.read_csv(path, dtype={"request_id": str, "query_id": str, "arm": str})
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
    except pd.errors.EmptyDataError as err:
        raise DecisionLogError(f"{path}: the file is empty; expected a header and rows") from err
    except (OSError, ValueError, pd.errors.ParserError) as err:
        raise DecisionLogError(f"{path}: could not be read ({err})") from err
    raise DecisionLogError(f"{path}: expected a .parquet/.pq or .csv decision log")


def _arm_names(check: CellChecker, chosen: list[str], arms: Sequence[str] | None) -> list[str]:
    lists = check.lists("arms", str) if "arms" in check.frame.columns else None
    if arms is not None:
        names = [str(a) for a in arms]
        if len(set(names)) != len(names):
            raise DecisionLogError(f"{check.source}: arms {names} are not distinct")
    elif lists is not None:
        names = list(lists[0])
    else:
        names = list(dict.fromkeys(chosen))
    if lists is not None:
        for i, row in enumerate(lists):
            if list(row) != names:
                check.fail(
                    i,
                    "arms",
                    f"{list(row)} differs from the arms {names}; every row "
                    "must list the same arms in the same order",
                )
    if len(names) < 2:
        raise DecisionLogError(f"{check.source}: a decision log needs >= 2 arms, got {names}")
    return names


def _probabilities(check: CellChecker, names: list[str], propensity: Tensor, action: Tensor):
    rows = check.lists("probabilities", float)
    k = len(names)
    for i, row in enumerate(rows):
        if len(row) != k:
            check.fail(i, "probabilities", f"{len(row)} entries, expected {k} (one per arm)")
    probs = torch.tensor(np.asarray(rows, dtype=np.float64).reshape(-1, k))
    bad = ~torch.isfinite(probs).all(1) | (probs < 0).any(1) | (probs > 1).any(1)
    bad |= (probs.sum(1) - 1).abs() > _TOL
    if bad.any():
        i = int(torch.nonzero(bad)[0])
        check.fail(
            i, "probabilities", f"{rows[i]} is not a distribution (entries in [0, 1] summing to 1)"
        )
    gap = (probs.gather(1, action[:, None])[:, 0] - propensity).abs() > _TOL
    if gap.any():
        i = int(torch.nonzero(gap)[0])
        check.fail(
            i,
            "propensity",
            f"{float(propensity[i])} differs from the probability "
            f"{float(probs[i, action[i]])} that 'probabilities' gives the chosen arm",
        )
    return probs


__all__ = [
    "CONTEXT_COLUMNS",
    "REQUIRED_COLUMNS",
    "DecisionLog",
    "DecisionLogError",
    "decisions_from_frame",
    "load_decisions",
]
