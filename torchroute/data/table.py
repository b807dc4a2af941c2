"""The routing table: ``n`` queries x ``K`` arms with scores, costs and optional text."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import Tensor

from torchroute.errors import TableError

SPLITS = ("train", "val", "test")
MAX_COST = 1e30  # larger costs overflow sums over queries and rho * cost


@dataclass(frozen=True)
class RoutingTable:
    """Queries x arms: quality, cost and context of every (query, arm) pair.

    Attributes:
        scores: quality ``Y`` in ``[0, 1]``, ``[n, K]`` float64.
        costs: cost ``C >= 0``, ``[n, K]`` float64.
        arm_names: ``K`` distinct arm (model) names.
        query_ids: ``n`` distinct query ids.
        split: ``n`` entries from ``{"train", "val", "test"}``.
        text: optional ``n`` query strings.
        embeddings: optional ``[n, d]`` context features.
        facets: optional per-dimension scores ``[n, N, K]`` for sum-max rewards.
        groups: optional ``n`` group labels (task / sub-benchmark of each query).
        source: where the table came from, used in error messages.
    """

    scores: Tensor
    costs: Tensor
    arm_names: tuple[str, ...]
    query_ids: tuple[str, ...]
    split: tuple[str, ...]
    text: tuple[str, ...] | None = None
    embeddings: Tensor | None = None
    facets: Tensor | None = None
    groups: tuple[str, ...] | None = None
    source: str = field(default="<in-memory table>", compare=False)

    def __post_init__(self) -> None:
        src = self.source
        object.__setattr__(self, "scores", torch.as_tensor(self.scores, dtype=torch.float64))
        object.__setattr__(self, "costs", torch.as_tensor(self.costs, dtype=torch.float64))
        for name in ("arm_names", "query_ids", "split", "text", "groups"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(str(v) for v in value))
        scores, costs = self.scores, self.costs
        if scores.ndim != 2:
            raise TableError(f"{src}: scores must be [n, K], got shape {tuple(scores.shape)}")
        n, k = scores.shape
        if n == 0:
            raise TableError(f"{src}: the table has no queries")
        if costs.shape != scores.shape:
            raise TableError(
                f"{src}: costs have shape {tuple(costs.shape)}, expected {(n, k)} like scores"
            )
        if len(self.arm_names) != k or len(set(self.arm_names)) != k:
            raise TableError(f"{src}: expected {k} distinct arm names, got {self.arm_names}")
        if len(self.query_ids) != n:
            raise TableError(f"{src}: expected {n} query ids, got {len(self.query_ids)}")
        blank_ids = [i for i, q in enumerate(self.query_ids) if not str(q).strip()]
        if blank_ids:
            raise TableError(
                f"{src}: {len(blank_ids)} of {n} query ids are blank (queries {blank_ids[:3]} "
                "counted from 0); every query needs an id (or id_column=null: the row number)"
            )
        if len(set(self.query_ids)) != n:
            seen: set[str] = set()
            dup = [q for q in self.query_ids if q in seen or seen.add(q)][:3]
            raise TableError(f"{src}: query ids must be distinct; repeated: {dup}")
        if len(self.split) != n:
            raise TableError(f"{src}: expected {n} split labels, got {len(self.split)}")
        bad_split = sorted(set(self.split) - set(SPLITS))
        if bad_split:
            raise TableError(f"{src}: split labels must be one of {SPLITS}, got {bad_split}")
        self._check_cells("scores", scores, lo=0.0, hi=1.0)
        self._check_cells("costs", costs, lo=0.0, hi=None)
        huge = costs > MAX_COST
        if huge.any():
            rows, cols = torch.nonzero(huge, as_tuple=True)
            raise TableError(
                f"{src}: {int(huge.sum())} costs cells are above {MAX_COST:g}, e.g. "
                f"{self._cell_names(rows[:3], cols[:3])} = {costs[rows[0], cols[0]].item():g}; "
                "sums of costs and rho * cost must stay finite (use another cost unit)"
            )
        if self.text is not None:
            blank = [i for i, t in enumerate(self.text) if not t.strip()]
            if blank:
                shown = ", ".join(repr(self.query_ids[i]) for i in blank[:3])
                raise TableError(
                    f"{src}: {len(blank)} of {n} queries have a blank text, e.g. {shown}; "
                    "every query needs its text (or read no text: text_column=null)"
                )
        for name in ("text", "groups"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise TableError(f"{src}: expected {n} {name} entries, got {len(value)}")
        if self.embeddings is not None:
            emb = torch.as_tensor(self.embeddings)
            if emb.ndim != 2 or emb.shape[0] != n:
                raise TableError(
                    f"{src}: embeddings must be [n={n}, d], got shape {tuple(emb.shape)} "
                    "(the embedding count must match the number of queries)"
                )
            if not torch.isfinite(emb).all():
                raise TableError(f"{src}: embeddings contain NaN or infinite values")
            object.__setattr__(self, "embeddings", emb.float())
        if self.facets is not None:
            facets = torch.as_tensor(self.facets, dtype=torch.float64)
            if facets.ndim != 3 or facets.shape[0] != n or facets.shape[2] != k:
                raise TableError(
                    f"{src}: facets must be [n={n}, N, K={k}], got {tuple(facets.shape)}"
                )
            self._check_cells("facets", facets, lo=0.0, hi=1.0)
            object.__setattr__(self, "facets", facets)

    def _check_cells(self, name: str, values: Tensor, lo: float, hi: float | None) -> None:
        """Raise on NaN (missing), infinite, or out-of-range cells, naming a few of them."""
        expected = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        flat = values.reshape(values.shape[0], -1)

        def where(mask: Tensor) -> str:
            rows, cols = torch.nonzero(mask, as_tuple=True)
            return self._cell_names(rows[:3], cols[:3] % values.shape[-1])

        missing = torch.isnan(flat)
        if missing.any():
            raise TableError(
                f"{self.source}: {int(missing.sum())} missing (NaN) {name} cells, e.g. "
                f"{where(missing)}; pass drop_missing=True to the loader to drop those queries"
            )
        infinite = torch.isinf(flat)
        if infinite.any():
            raise TableError(
                f"{self.source}: {int(infinite.sum())} infinite {name} cells, e.g. "
                f"{where(infinite)}; expected finite values {expected}"
            )
        bad = flat < lo if hi is None else (flat < lo) | (flat > hi)
        if bad.any():
            raise TableError(
                f"{self.source}: {int(bad.sum())} {name} cells are not {expected}, e.g. "
                f"{where(bad)}"
            )

    def _cell_names(self, rows: Tensor, cols: Tensor) -> str:
        return ", ".join(
            f"(query {self.query_ids[r]!r}, arm {self.arm_names[c]!r})"
            for r, c in zip(rows.tolist(), cols.tolist())
        )

    # ------------------------------------------------------------------ views
    @property
    def num_queries(self) -> int:
        """``n``, the number of queries."""
        return self.scores.shape[0]

    @property
    def num_arms(self) -> int:
        """``K``, the number of arms."""
        return self.scores.shape[1]

    def rows(self, split: str | Sequence[str]) -> np.ndarray:
        """Indices of the queries in ``split`` (one name or several); raises if empty."""
        wanted = {split} if isinstance(split, str) else set(split)
        unknown = sorted(wanted - set(SPLITS))
        if unknown:
            raise TableError(f"{self.source}: unknown split {unknown}; expected one of {SPLITS}")
        idx = np.flatnonzero(np.isin(np.asarray(self.split), sorted(wanted)))
        if idx.size == 0:
            raise TableError(f"{self.source}: split {sorted(wanted)} is empty")
        return idx

    def select(self, index: Sequence[int] | np.ndarray) -> RoutingTable:
        """A new table with the queries at ``index`` (in that order)."""
        idx = np.asarray(index, dtype=np.int64)
        t = torch.as_tensor(idx)

        def pick(values):
            return None if values is None else tuple(values[i] for i in idx)

        return replace(
            self,
            scores=self.scores[t],
            costs=self.costs[t],
            query_ids=pick(self.query_ids),
            split=pick(self.split),
            text=pick(self.text),
            groups=pick(self.groups),
            embeddings=None if self.embeddings is None else self.embeddings[t],
            facets=None if self.facets is None else self.facets[t],
        )

    def with_embeddings(self, embeddings: Tensor) -> RoutingTable:
        """The same table with ``embeddings`` ``[n, d]`` attached (validated)."""
        return replace(self, embeddings=embeddings)

    def utility(self, rho: Tensor | float) -> Tensor:
        """``clip(Y - rho * C, 0, 1)``: ``[n, K]`` for a float, ``[R, n, K]`` for ``rho [R]``.

        Computed by :func:`torchroute.functional.utility.utility`; raises ``ValueError`` for a
        negative ``rho``.
        """
        from torchroute.functional.utility import utility

        rho_t = torch.as_tensor(rho, dtype=torch.float64)
        if (rho_t < 0).any():
            raise ValueError(f"rho must be >= 0, got {rho_t.tolist()}")
        return utility(self.scores, self.costs, rho_t if rho_t.ndim == 0 else rho_t[:, None, None])

    def fingerprint(self) -> str:
        """A short hash of arms, ids, splits, scores and costs (checkpoints store it)."""
        h = hashlib.sha256()
        h.update("\x1f".join(self.arm_names).encode())
        h.update("\x1f".join(self.query_ids).encode())
        h.update("\x1f".join(self.split).encode())
        h.update(self.scores.numpy().tobytes())
        h.update(self.costs.numpy().tobytes())
        return h.hexdigest()[:16]

    def __repr__(self) -> str:
        counts = {s: self.split.count(s) for s in SPLITS if s in self.split}
        extras = [
            n for n in ("text", "embeddings", "facets", "groups") if getattr(self, n) is not None
        ]
        return (
            f"RoutingTable(source={self.source!r}, queries={self.num_queries}, "
            f"arms={self.num_arms}, splits={counts}, with={extras})"
        )
