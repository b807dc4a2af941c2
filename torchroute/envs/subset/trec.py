"""Subset-routing instances: TREC 2010 crowdsourcing teams and best-of-M LLM routing.

docs/papers/subset.md ("TREC 2010 crowdsourcing instance", paper 002 Section 6.1 and
Table 1) and the best-of-M routing of a query to up to ``M`` LLMs on a routing table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from torchroute.buildable import buildable
from torchroute.envs.subset.base import SubsetEnv

#: constraint levels of paper 002 Table 1: (budget margin, expert cap); ``None``: no bound
LEVELS: dict[str, tuple[float, float] | None] = {
    "tight": (0.0, 2.0),
    "medium": (0.1, 2.5),
    "loose": (0.5, 5.0),
    "none": None,
}
ENV_KINDS = ("stochastic", "regime")


def load_trec_pool(path: str | Path, num_groups: int, min_annotations: int = 5) -> dict:
    """The worker pool: per worker, annotation count and correct/total per task group.

    Inner join of ``trec_crowd.txt`` (``item worker label``) with ``trec_truth.txt``
    (``item gold``) on the item; ``correct = [label == gold]``; workers with fewer than
    ``min_annotations`` gold-joined annotations are dropped; items are split into
    ``num_groups`` groups round-robin by sorted item id.

    Returns:
        ``{"count": [W], "correct": [W, N], "total": [W, N]}`` numpy arrays.
    """
    folder = Path(path)
    crowd_file, truth_file = folder / "trec_crowd.txt", folder / "trec_truth.txt"
    for f in (crowd_file, truth_file):
        if not f.is_file():
            raise FileNotFoundError(f"path: {f} not found (the TREC 2010 crowdsourcing data)")
    crowd = pd.read_csv(crowd_file, sep=r"\s+", header=None, names=["item", "worker", "label"])
    truth = pd.read_csv(truth_file, sep=r"\s+", header=None, names=["item", "gold"])
    joined = crowd.merge(truth, on="item", how="inner")
    joined["correct"] = (joined["label"] == joined["gold"]).astype(float)
    items = np.sort(joined["item"].unique())
    group_of = pd.Series(np.arange(len(items)) % num_groups, index=items)
    joined["group"] = group_of.loc[joined["item"]].to_numpy()
    counts = joined.groupby("worker").size()
    keep = counts[counts >= min_annotations].index.to_numpy()
    joined = joined[joined["worker"].isin(keep)]
    correct = joined.pivot_table(
        index="worker", columns="group", values="correct", aggfunc="sum", fill_value=0.0
    ).reindex(index=keep, columns=range(num_groups), fill_value=0.0)
    total = joined.pivot_table(
        index="worker", columns="group", values="correct", aggfunc="count", fill_value=0
    ).reindex(index=keep, columns=range(num_groups), fill_value=0)
    return {
        "count": counts.loc[keep].to_numpy(float),
        "correct": correct.to_numpy(float),
        "total": total.to_numpy(float),
    }


def trec_instance(pool: dict, seed: int, num_workers: int, num_experts: int = 10):
    """``(V_base [N, K], costs [2, K])`` of one seed: ``K`` workers sampled from the pool.

    ``V_base[n, i]``: worker ``i``'s accuracy on group ``n`` (overall accuracy when it has
    no annotation there); costs: workload (annotation count / the largest in the sample)
    and the expert indicator (the ``num_experts`` most accurate workers overall).
    """
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(pool["count"]), size=num_workers, replace=False)
    correct, total = pool["correct"][pick], pool["total"][pick]  # [K, N]
    overall = correct.sum(1) / total.sum(1)
    acc = np.where(total > 0, correct / np.maximum(total, 1), overall[:, None])
    workload = pool["count"][pick] / pool["count"][pick].max()
    expert = np.zeros(num_workers)
    expert[np.argsort(-overall, kind="stable")[:num_experts]] = 1.0
    return acc.T, np.stack([workload, expert]), rng


@buildable
def trec_subset_env(
    seeds: list[int],
    path: str | None = None,
    num_groups: int = 3,
    num_workers: int = 50,
    draws: int = 5,
    horizon: int = 10_000,
    rounds: int | None = None,
    kinds: list[str] = ("stochastic", "regime"),
    constraints: list[str] = ("tight", "medium", "loose", "none"),
    kappa: float = 20.0,
    num_blocks: int = 10,
    slow_share: float = 0.1,
    slow_factor: float = 0.2,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> SubsetEnv:
    """The TREC 2010 crowdsourcing team-formation env (docs/papers/subset.md).

    Trials: every (kind, constraint, seed). ``stochastic``: ``V^(t) ~ Beta(kappa V_base,
    kappa (1 - V_base))``; ``regime``: the same noise, and in each of ``num_blocks`` blocks
    a fresh random ``slow_share`` of the workers has its mean multiplied by ``slow_factor``
    (drawn at set-up from the trial's seed, held as the env's restorable state). Targets:
    workload <= ``M * mean workload + margin``, experts per round <= cap (Table 1).
    ``rounds`` (the run's ``rounds=`` key), when set, replaces ``horizon``. ``path``: the
    data folder; ``None`` is ``trec_crowd`` under the data root (:mod:`torchroute.data_root`),
    never a folder relative to the current one.
    """
    if rounds is not None:
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValueError(f"rounds must be an integer >= 1 or null, got {rounds!r}")
        horizon = rounds
    bad = sorted(set(kinds) - set(ENV_KINDS))
    if bad:
        raise ValueError(f"kinds must be among {list(ENV_KINDS)}, got {bad}")
    bad = sorted(set(constraints) - set(LEVELS))
    if bad:
        raise ValueError(f"constraints must be among {list(LEVELS)}, got {bad}")
    if path is None:
        from torchroute.data_root import under_data_root

        path = under_data_root("trec_crowd")
    pool = load_trec_pool(path, num_groups)
    if not 1 <= num_workers <= len(pool["count"]):
        raise ValueError(f"num_workers must be in 1..{len(pool['count'])}, got {num_workers}")
    means, costs, lower, upper, rows = [], [], [], [], []
    for kind in kinds:
        for level in constraints:
            for seed in seeds:
                base, cost, rng = trec_instance(pool, int(seed), num_workers)
                block = np.repeat(base[None], num_blocks if kind == "regime" else 1, 0)
                if kind == "regime":
                    slow = max(1, round(slow_share * num_workers))
                    for p in range(num_blocks):
                        block[p][:, rng.choice(num_workers, slow, replace=False)] *= slow_factor
                bound = LEVELS[level]
                up = [np.inf, np.inf]
                if bound is not None:
                    up = [draws * cost[0].mean() + bound[0], bound[1]]
                means.append(block)
                costs.append(cost)
                lower.append([-np.inf, -np.inf])
                upper.append(up)
                rows.append({"seed": int(seed), "env": kind, "constraint": level})
    # stationary trials repeat their one block so that every trial has the same blocks
    width = max(m.shape[0] for m in means)
    means = [np.concatenate([m, np.repeat(m[-1:], width - m.shape[0], 0)]) for m in means]
    return SubsetEnv(
        means=torch.as_tensor(np.stack(means)),
        costs=torch.as_tensor(np.stack(costs)),
        lower=torch.as_tensor(np.asarray(lower, float)),
        upper=torch.as_tensor(np.asarray(upper, float)),
        draws=draws,
        horizon=horizon,
        trials=pd.DataFrame(rows),
        kappa=kappa,
        device=device,
        dtype=dtype,
    )
