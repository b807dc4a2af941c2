"""Small problems for the device checks: one builder per environment, float64.

Every builder takes ``(device, rounds)`` and builds the same world on any device (all set-up
randomness comes from CPU generators with fixed seeds), so a CPU env and a device env of
one builder differ only in where their tensors live.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import torch
from torch import nn

from torchroute.data.table import RoutingTable
from torchroute.envs import (
    Env,
    LowRankExperts,
    SingleChoiceEnv,
    SubsetEnv,
    table_subset_env,
)

F64 = torch.float64
TRIALS = 4  # R of every small problem
ARMS = 5  # K of the table problems
EMBED = 6  # d of the table's embeddings (the bandit features and the oracle's input)
RHO = (0.0, 0.3, 0.6, 0.0)
SEEDS = (0, 1, 2, 3)


def routing_table(rounds: int, seed: int = 0) -> RoutingTable:
    """A random table: ``rounds`` test rows, 60 train rows, ``K = 5``, ``6``-d embeddings.

    Scores are ``sigmoid`` of a linear function of the embedding plus an arm bias rising
    with the arm's cost; costs of arm ``k`` are ``U(0, c_k)``, ``c = linspace(0.05, 0.5)``;
    queries come in two groups (for the grouped contexts of the subset table env).
    """
    g = torch.Generator().manual_seed(seed)
    n_train = 60
    n = n_train + rounds
    emb = torch.randn(n, EMBED, generator=g, dtype=F64)
    theta = torch.randn(EMBED, ARMS, generator=g, dtype=F64)
    scores = torch.sigmoid(emb @ theta + torch.linspace(-1.0, 1.0, ARMS))  # dearer: better
    costs = torch.rand(n, ARMS, generator=g, dtype=F64) * torch.linspace(0.05, 0.5, ARMS)
    return RoutingTable(
        scores=scores,
        costs=costs,
        arm_names=[f"arm{i}" for i in range(ARMS)],
        query_ids=[f"q{i}" for i in range(n)],
        split=["train"] * n_train + ["test"] * rounds,
        embeddings=emb,
        groups=[f"g{i % 2}" for i in range(n)],
    )


def single_choice(device: str, rounds: int, feedback: str = "bandit") -> Env:
    """:class:`SingleChoiceEnv` on :func:`routing_table`, ``R = 4`` (rho x seed)."""
    return SingleChoiceEnv(
        routing_table(rounds), RHO, SEEDS, horizon=rounds, feedback=feedback,
        device=device, dtype=F64,
    )  # fmt: skip


def subset(device: str, rounds: int) -> Env:
    """:class:`SubsetEnv`: ``R = 4, K = 6, N = 2`` facets, 2 cost coordinates, ``M = 3``,
    Beta noise (``kappa = 20``), one absent bound."""
    g = torch.Generator().manual_seed(0)
    r, k, n, d = TRIALS, 6, 2, 2
    means = torch.rand(r, 1, n, k, generator=g, dtype=F64)
    costs = torch.rand(r, d, k, generator=g, dtype=F64)
    upper = torch.full((r, d), 1.6, dtype=F64)
    upper[0, 1] = torch.inf
    lower = torch.full((r, d), -torch.inf, dtype=F64)
    trials = pd.DataFrame({"seed": range(r)})
    return SubsetEnv(
        means, costs, lower, upper, 3, rounds, trials, kappa=20.0, device=device, dtype=F64
    )


def table_subset(device: str, rounds: int) -> Env:
    """Best-of-``M`` routing (``M = 2``) on :func:`routing_table`, ``R = 4``."""
    return table_subset_env(
        routing_table(rounds),
        RHO,
        SEEDS,
        horizon=rounds,
        draws=2,
        budget=0.5,
        device=device,
        dtype=F64,
    )


def low_rank(device: str, rounds: int) -> Env:
    """:class:`LowRankExperts`: ``M = 4`` rank-2 experts, ``d = 16``, 4 seeds."""
    return LowRankExperts(
        seeds=SEEDS, dims=(16,), num_experts=4, rank=2, horizon=rounds, latent_dim=4,
        item_dim=4, num_items=8, num_clusters=4, device=device, dtype=F64,
    )  # fmt: skip


ENVS: dict[str, Callable[[str, int], Env]] = {
    "single_choice": single_choice,
    "single_choice_full": lambda device, rounds: single_choice(device, rounds, "full"),
    "subset": subset,
    "table_subset": table_subset,
    "low_rank": low_rank,
}


def tiny_oracle(arm_names: tuple[str, ...]) -> nn.Module:
    """A small :class:`~torchroute.models.MultiHeadOracle` (fixed weights, no dropout)."""
    from torchroute.models import MultiHeadOracle

    with torch.random.fork_rng():
        torch.manual_seed(0)
        oracle = MultiHeadOracle(
            EMBED, len(arm_names), feature_dim=4, hidden=8, dropout=0.0, arm_names=arm_names
        )
    return oracle.double().eval()
