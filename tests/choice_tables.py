"""Hand-made tables for the choice of change options on validation."""

from __future__ import annotations

import torch

from torchroute.data.table import RoutingTable


def two_model_table(n_train: int = 40, n_val: int = 200, n_test: int = 200, d: int = 4):
    """Two free models whose scores do not depend on the query: ``a`` about 0.75, ``b``
    about 0.6 (each plus Gaussian noise of sd 0.2, clipped to [0, 1]); random embeddings."""
    g = torch.Generator().manual_seed(0)
    n = n_train + n_val + n_test
    noise = 0.2 * torch.randn(n, 2, generator=g)
    return RoutingTable(
        scores=(torch.tensor([0.75, 0.6]) + noise).clamp(0.0, 1.0),
        costs=torch.zeros(n, 2),
        arm_names=["a", "b"],
        query_ids=[f"q{i}" for i in range(n)],
        split=["train"] * n_train + ["val"] * n_val + ["test"] * n_test,
        embeddings=torch.randn(n, d, generator=g),
        text=[f"query {i}" for i in range(n)],
    )
