"""Shared fixtures: offline hubs, RNG hygiene, and the real data folder beside the checkout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# On pytest-xdist workers the cores are shared: each worker (and what it starts) gets its
# share of them, as two workers of two threads each on two cores would oversubscribe them.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1 and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // _WORKERS))

import torch  # noqa: E402  (after the thread setting above)

if _WORKERS > 1:
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# the tests read no package list from their wandb runs: not listing ~1,500 packages per run
os.environ.setdefault("WANDB__SAVE_REQUIREMENTS", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("TORCHROUTE_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(autouse=True)
def _restore_rng_state():
    """Tests may seed the global RNG; put it back afterwards."""
    state = torch.random.get_rng_state()
    yield
    torch.random.set_rng_state(state)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder not found at {SHARED_DATA} (set TORCHROUTE_SHARED_DATA)")
    return SHARED_DATA


def make_table(n: int = 60, k: int = 4, d: int = 6, seed: int = 0):
    """A small random routing table with embeddings and all three splits."""
    from torchroute.data.table import RoutingTable

    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(n, d, generator=g)
    theta = torch.randn(d, k, generator=g)
    scores = torch.sigmoid(emb @ theta)
    costs = torch.rand(n, k, generator=g) * 1e-3
    split = ["train"] * (n // 2) + ["val"] * (n // 6) + ["test"] * (n - n // 2 - n // 6)
    return RoutingTable(
        scores=scores,
        costs=costs,
        arm_names=[f"arm{i}" for i in range(k)],
        query_ids=[f"q{i}" for i in range(n)],
        split=split,
        embeddings=emb,
        text=[f"query number {i}" for i in range(n)],
    )


def make_priced_table(n: int = 60, k: int = 4, d: int = 6, seed: int = 0, groups: int = 0):
    """:func:`make_table` where the better a model's mean train score, the dearer it is
    (cost x 1, 3, 10, 30 by rank), so best-of-M budgets lie between its models' costs;
    ``groups > 0``: the queries fall into that many groups (``g0``, ``g1``, ... in turn)."""
    import dataclasses

    table = make_table(n, k, d, seed)
    rank = table.scores[table.rows("train")].mean(0).argsort().argsort()
    scale = torch.tensor([1.0, 3.0, 10.0, 30.0][:k] + [30.0] * max(0, k - 4))
    named = [f"g{i % groups}" for i in range(n)] if groups else None
    return dataclasses.replace(table, costs=table.costs * scale[rank], groups=named)


def naive_best_arms(table, rho) -> list[int]:
    """Each rho's arm of largest mean train utility, by a loop over arms (a reference)."""
    rows = table.rows("train")
    best = []
    for r in rho:
        means = [
            float((table.scores[rows, k] - r * table.costs[rows, k]).clamp(0, 1).mean())
            for k in range(table.num_arms)
        ]
        best.append(max(range(len(means)), key=means.__getitem__))
    return best


@pytest.fixture
def tiny_table():
    """60 queries x 4 arms with 6-d embeddings (30 train, 10 val, 20 test)."""
    return make_table()


def tiny_run_config(out_dir: Path, learners: dict, *overrides: str):
    """A ``simulate`` config on :func:`make_table` (no encoder, PCA to 3 features) that runs
    ``learners`` (``{name: config node}``) into ``out_dir``; ``overrides`` as on the command
    line (``rhos=[0,100]``, ``seeds=[0]`` unless given)."""
    from omegaconf import OmegaConf

    from torchroute.configs_path import compose_config

    given = {o.split("=", 1)[0] for o in overrides}
    defaults = [o for o in ("rhos=[0,100]", "seeds=[0]") if o.split("=", 1)[0] not in given]
    base = ["features.pca_dim=3", "progress=false", "report=false", "~logger"]
    cfg = compose_config("simulate", [f"out_dir={out_dir}", *defaults, *base, *overrides])
    OmegaConf.set_struct(cfg, False)
    cfg.data = OmegaConf.create({"_target_": "tests.conftest.make_table"})
    cfg.encoder = None
    cfg.learners = OmegaConf.create(learners)
    return cfg


#: a bare learner node of the shipped LinUCB (its class defaults)
LINUCB_NODE = {"_target_": "torchroute.learners.LinUCB.from_problem", "_partial_": True}
