"""Best-of-M LLM routing on a routing table (docs/papers/subset.md, ``N = 1``).

A query goes to up to ``M`` models (``M`` draws, the distinct ones are called and all paid);
the reward is the best score among them (``V^(t) = facets[t]`` when the table has facets,
else its scores). Costs per model: the mean cost per query (train split; scaled by the
dearest model's) and a premium indicator; targets: a per-query budget between the
cheapest and the best single model's cost, and a cap on premium calls per query.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from torchroute.buildable import buildable
from torchroute.data.table import RoutingTable
from torchroute.envs.subset.base import SubsetEnv, SubsetProblem
from torchroute.functional.random import Source
from torchroute.functional.subset import expected_sum_max
from torchroute.types import Context


class TableSubsetEnv(SubsetEnv):
    """A :class:`SubsetEnv` whose round ``t`` of trial ``r`` is table row ``stream[r, t]``.

    Contexts are the one-hot of each query's group (``table.groups``; one group when
    absent), the finite context set of :class:`ContextualOMDApproachability`. The problem
    names the table's models (``arm_names``), its groups (``context_names``) and the
    width ``embed_dim`` of its embeddings (what a served router is sent).
    """

    #: names of the one-hot context coordinates (the table's groups)
    group_names: tuple[str, ...] = ("all",)
    #: the table's embedding width (``None``: no embeddings)
    embed_dim: int | None = None

    stationary_blocks = False  # every round replays its own query

    _trial_tensors = (*SubsetEnv._trial_tensors, "stream")

    def __init__(self, facets: Tensor, stream: Tensor, groups: Tensor, **kwargs) -> None:
        self.facets = facets.to(torch.float64)  # [n, N, K]
        self.stream = stream  # [R, T]
        self.groups = groups  # [n] long
        self.num_groups = int(groups.max()) + 1
        super().__init__(**kwargs)
        self.facets = self.facets.to(self.device)
        self.stream = self.stream.to(self.device)
        self.groups = self.groups.to(self.device)

    def problem(self) -> SubsetProblem:
        return dataclasses.replace(
            super().problem(),
            arm_names=tuple(self.arm_names),
            embed_dim=self.embed_dim,
            context_names=tuple(self.group_names),
        )

    def _opt_inputs(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        rows = self.facets[self.stream[r, : self.horizon]].cpu().numpy()
        values, weights = np.unique(rows, axis=0, return_counts=True)
        return values, weights.astype(float)

    def context(self, t: int) -> Context:
        self._t = t
        group = self.groups[self.stream[:, t]]  # [R]
        x = torch.nn.functional.one_hot(group, self.num_groups).to(self._dtype)
        return Context(x=x[:, None], index=self.stream[:, t, None])

    def values(self, t: int, context: Context, generator: Source) -> Tensor:
        return self.facets[self.stream[:, t]]

    def policy_value(self, q: Tensor, rounds: int) -> Tensor:
        values = self.facets[self.stream[:, :rounds]]  # [R, t, N, K]
        return expected_sum_max(q[:, None], values, self.draws).mean(-1)


@buildable
def table_subset_env(
    table: RoutingTable,
    rho: Sequence[float],
    seeds: Sequence[int],
    features: Tensor | None = None,
    split: str = "test",
    horizon: int | None = None,
    draws: int = 2,
    budget: float = 0.3,
    premium_ratio: float = 0.5,
    premium_cap: float = 0.5,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> TableSubsetEnv:
    """Best-of-M routing on ``table`` (a table env: the runner passes the rho x seed grid).

    Args:
        table: the routing table (``scores``/``costs`` ``[n, K]``).
        rho: the cost sensitivities of the trials.
        seeds: the stream seeds of the trials (trials = every (rho, seed) pair).
        features: ``[n, d]`` the contexts of the table's rows (None: the env has none).
        split: the split replayed online (each trial in its own seeded order).
        horizon: rounds (``None``: the whole split).
        draws: ``M``.
        budget: the per-query budget as a fraction between the cheapest model's mean cost
            (0) and the best single model's (1).
        premium_ratio: models whose mean cost is at least this share of the dearest's are
            premium.
        premium_cap: the most premium calls per query on average.
        device: where the env's tensors live.
        dtype: their floating dtype.
    """
    rows = np.flatnonzero(np.asarray(table.split) == split)
    if len(rows) == 0:
        raise ValueError(f"split: {table.source} has no {split!r} rows")
    fit = np.flatnonzero(np.asarray(table.split) == "train")
    fit = fit if len(fit) else rows
    horizon = len(rows) if horizon is None else int(horizon)
    if not 1 <= horizon <= len(rows):
        raise ValueError(f"horizon must be in 1..{len(rows)} (the {split} split), got {horizon}")
    if not 0.0 <= budget <= 1.0:
        raise ValueError(f"budget must be a fraction in [0, 1], got {budget}")
    if not 0.0 <= premium_ratio <= 1.0:
        raise ValueError(f"premium_ratio must be a fraction in [0, 1], got {premium_ratio}")
    if not 0.0 <= premium_cap < float("inf"):
        raise ValueError(f"premium_cap must be a finite number >= 0, got {premium_cap}")
    facets = table.facets if table.facets is not None else table.scores[:, None, :]
    mean_cost = table.costs[fit].mean(0).double()
    cost = mean_cost / mean_cost.max()
    premium = (cost >= premium_ratio).double()
    best = int(table.scores[fit].mean(0).argmax())
    spend = float(cost.min()) + budget * float(cost[best] - cost.min())
    r = len(seeds)
    perms = [
        torch.as_tensor(rows)[torch.randperm(len(rows), generator=torch.Generator().manual_seed(s))]
        for s in map(int, seeds)
    ]
    names = sorted(set(table.groups)) if table.groups is not None else ["all"]
    groups = (
        torch.tensor([names.index(g) for g in table.groups])
        if table.groups is not None
        else torch.zeros(len(table.split), dtype=torch.long)
    )
    trials = pd.DataFrame(
        {
            "rho": list(map(float, rho)),
            "seed": list(map(int, seeds)),
            "env": "best_of_m",
            "constraint": f"budget={budget:g},premium<={premium_cap:g}",
        }
    )
    env = TableSubsetEnv(
        facets=facets,
        stream=torch.stack(perms)[:, :horizon],
        groups=groups,
        means=facets[None, None, 0].expand(r, 1, -1, -1).double(),
        costs=torch.stack([cost, premium])[None].expand(r, -1, -1),
        lower=torch.full((r, 2), -torch.inf, dtype=torch.float64),
        upper=torch.tensor([[spend, premium_cap]], dtype=torch.float64).expand(r, -1),
        draws=draws,
        horizon=horizon,
        trials=trials,
        kappa=None,
        device=device,
        dtype=dtype,
    )
    env.arm_names = tuple(table.arm_names)
    env.group_names = tuple(map(str, names))
    env.embed_dim = None if table.embeddings is None else int(table.embeddings.shape[1])
    env.budget_line = spend
    return env
