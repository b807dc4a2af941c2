"""Small problems for the device checks: one builder per environment, float64.

The envs are found from the ``env/*.yaml`` configs of the packaged config folder and of
any extra config folders (:func:`find_envs`): each config is built on the tiny problem of
its protocol with :data:`CONFIG_OVERRIDES` for its sizes, so a new env config is checked
without editing this file.

Every builder takes ``(device, rounds)`` and builds the same world on any device (all set-up
randomness comes from CPU generators with fixed seeds), so a CPU env and a device env of
one builder differ only in where their tensors live.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from torch import nn

from torchroute.configs_path import config_dir, group_configs
from torchroute.data.table import RoutingTable
from torchroute.envs import Env, SubsetEnv
from torchroute.run.build import env_takes_table

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


#: the folder of the packaged env configs
ENV_CONFIG_DIR = config_dir() / "env"
#: per-env overrides of its config on the tiny problem (sizes, and a budget the tiny table
#: can reach); every other value is the config's
CONFIG_OVERRIDES: dict[str, dict[str, Any]] = {
    "table_subset": {"budget": 0.5},
    "low_rank_experts": {
        "dims": [16], "num_experts": 4, "latent_dim": 8, "item_dim": 4, "num_items": 8,
        "num_clusters": 4,
    },
}  # fmt: skip
#: env configs not built here, with the reason
SKIPPED_ENV_CONFIGS: dict[str, str] = {
    "trec_subset": "reads the TREC crowdsourcing files of the data folder; it builds a plain "
    "SubsetEnv, which the 'subset' problem covers",
}


def env_from_config(
    stem: str,
    device: str,
    rounds: int,
    directory: Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> Env:
    """The env of ``<directory>/<stem>.yaml`` (default: the packaged env configs) on the
    tiny problem.

    An env whose factory takes a ``table`` is called as the runner calls a table env, with
    :func:`routing_table`, the ``rho`` x ``seed`` grid ``RHO`` x ``SEEDS``, ``device`` and
    float64; a self-contained env with ``seeds`` only. ``horizon`` is ``rounds``; the run's
    keys a config reads (``split``, ``rounds``, ``feedback``) are ``test``, ``rounds`` and
    ``bandit``; ``overrides`` (default :data:`CONFIG_OVERRIDES`) replace config values.
    """
    node = OmegaConf.load((directory or ENV_CONFIG_DIR) / f"{stem}.yaml")
    root = OmegaConf.create({"split": "test", "rounds": rounds, "feedback": "bandit"})
    root.env = node
    plain = OmegaConf.to_container(root.env, resolve=True)
    plain.update(CONFIG_OVERRIDES.get(stem, {}) if overrides is None else overrides)
    plain["horizon"] = rounds
    factory = instantiate(plain, _partial_=True)
    if env_takes_table(plain):
        return factory(table=routing_table(rounds), rho=list(RHO), seeds=list(SEEDS),
                       device=device, dtype=F64)  # fmt: skip
    return factory(seeds=list(SEEDS), device=device, dtype=F64)


def env_configs(extra: Sequence[str | Path] = ()) -> dict[str, Path]:
    """``{config stem: file}`` of every ``env/*.yaml`` of the packaged configs and of the
    ``extra`` config folders (:func:`torchroute.configs_path.config_dirs`) but
    :data:`SKIPPED_ENV_CONFIGS`."""
    found = group_configs("env", extra)
    return {stem: path for stem, path in found.items() if stem not in SKIPPED_ENV_CONFIGS}


def find_envs(extra: Sequence[str | Path] = ()) -> dict[str, Callable[[str, int], Env]]:
    """``{config stem: builder(device, rounds)}`` of every env config of
    :func:`env_configs` (packaged and ``extra``)."""
    return {
        stem: functools.partial(_config_env, stem, env_folder(path))
        for stem, path in env_configs(extra).items()
    }


def env_folder(path: Path) -> Path | None:
    """The folder of an env config file; ``None`` for the packaged env configs."""
    return None if path.parent == ENV_CONFIG_DIR.resolve() else path.parent


def _config_env(stem: str, directory: Path | None, device: str, rounds: int) -> Env:
    return env_from_config(stem, device, rounds, directory)


def is_subset_env(stem: str, directory: Path | None = None) -> bool:
    """Whether the env of config ``stem`` is a subset-routing env (a :class:`SubsetEnv`),
    found by building it on the CPU for two rounds."""
    return isinstance(env_from_config(stem, "cpu", 2, directory), SubsetEnv)


def single_choice_full(device: str, rounds: int) -> Env:
    """The ``single_choice`` config with full-information feedback."""
    return env_from_config("single_choice", device, rounds, overrides={"feedback": "full"})


def subset(device: str, rounds: int) -> Env:
    """:class:`SubsetEnv`: ``R = 4, K = 6, N = 2`` facets, 2 cost coordinates, ``M = 3``,
    Beta noise (``kappa = 20``), one absent bound (the subset protocol, no config)."""
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


#: tiny problems that are no env config: a variant of one, and the bare subset protocol
EXTRA_ENVS: dict[str, Callable[[str, int], Env]] = {
    "single_choice_full": single_choice_full,
    "subset": subset,
}
#: every env of the check: each packaged env config (found, not listed) and the extras
ENVS: dict[str, Callable[[str, int], Env]] = {**find_envs(), **EXTRA_ENVS}


def all_envs(extra: Sequence[str | Path] = ()) -> dict[str, Callable[[str, int], Env]]:
    """:data:`ENVS` and the env configs of the ``extra`` config folders."""
    return {**find_envs(extra), **EXTRA_ENVS}


def tiny_oracle(arm_names: tuple[str, ...]) -> nn.Module:
    """A small :class:`~torchroute.models.MultiHeadOracle` (fixed weights, no dropout)."""
    from torchroute.models import MultiHeadOracle

    with torch.random.fork_rng():
        torch.manual_seed(0)
        oracle = MultiHeadOracle(
            EMBED, len(arm_names), feature_dim=4, hidden=8, dropout=0.0, arm_names=arm_names
        )
    return oracle.double().eval()
