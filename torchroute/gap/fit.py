"""Policy-class gap table (docs/papers/hpg.md; paper 000 Table 2) on a routing table.

With full information on the train split, fit the best policy of each class by maximising
``mean_q sum_m pi(m | q) R_m(q)`` (``R`` = the utility at rho): constant (best single
model), log-linear ``softmax(theta_m^T q)``, log-quadratic ``softmax(q^T W_m q)`` and
unrestricted (the per-query best, gap 0). ``Gap(pi) = mean_q [max_m R_m(q) - sum_m pi R_m]``
on the train split and on held-out queries. The queries ``q`` are the bandit features of
``features.*`` (``source`` ``pca``, ``raw`` or ``oracle``; the map fitted on the train split,
as ``simulate`` builds it; ``features.bias`` must be true). The classes are nested (``q``
ends with a constant 1): the constant policy is ``theta_m = 50 e_bias`` for the best model,
and the fitted lin is ``W_m = sym(e_bias theta_m^T) + L_m diag(s_m) L_m^T`` with ``s = 0``;
each fit keeps the best on train of the smaller class's solution and its own iterates
(started from a softened version: a saturated softmax has no gradient), so the train ordering
``Gap(quad) <= Gap(lin) <= Gap(const)`` holds by construction.

Command: ``torchroute gap experiment=<preset> out_dir=<dir>`` writes ``gap.csv`` with
columns ``table, split, rho, policy_class, gap``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig
from torch import Tensor

from torchroute.configs_path import config_dir
from torchroute.errors import ConfigError
from torchroute.gap.options import GapOptions, gap_presets
from torchroute.io import write_csv_atomic
from torchroute.run.build import build
from torchroute.run.options import RunOptions
from torchroute.run.outdir import check_run_folders

log = logging.getLogger(__name__)


def gap(probs: Tensor, utility: Tensor) -> Tensor:
    """``mean_q [max_m R_m(q) - sum_m pi(m | q) R_m(q)]`` for ``probs, utility [n, K]``."""
    return (utility.amax(-1) - (probs * utility).sum(-1)).mean()


def _ascend(
    params: list[Tensor], probs_of, utility: Tensor, steps: int, lr: float, incumbent: list
):
    """Full-batch Adam on ``mean sum pi R`` from ``params``; returns the best of
    ``incumbent`` (the smaller class's solution, embedded) and every iterate."""
    best = [p.detach().clone() for p in incumbent]
    with torch.no_grad():
        best_gap = gap(probs_of(*best), utility)
    opt = torch.optim.Adam(params, lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss = gap(probs_of(*params), utility)
        loss.backward()
        opt.step()
        with torch.no_grad():
            value = gap(probs_of(*params), utility)
        if value < best_gap:
            best_gap, best = value, [p.detach().clone() for p in params]
    return best


def _lin_probs(x: Tensor):
    return lambda theta: torch.softmax(x @ theta.T, -1)


def _quad_probs(x: Tensor):
    def probs(theta, left, scale):
        lin = x @ theta.T  # [n, K]; q^T sym(e_b theta^T) q = q_b theta^T q with q_b = 1
        proj = torch.einsum("nd,kdr->nkr", x, left)
        return torch.softmax(lin + (proj.square() * scale).sum(-1), -1)

    return probs


def fit_policies(
    x: Tensor, utility: Tensor, steps: int = 300, lr: float = 0.05, rank: int = 8, seed: int = 0
) -> dict[str, Callable[[Tensor], Tensor] | None]:
    """Fit const, lin and quad policies on ``x [n, d]`` (last column 1), ``utility [n, K]``.

    Returns ``{class: x -> probs [n, K]}`` including ``unrestricted`` (the per-query best).
    """
    if not bool((x[:, -1] == 1).all()):
        raise ValueError("gap: features must end with a constant 1 (features.bias=true)")
    d = x.shape[1]
    k = utility.shape[1]
    best_arm = int(utility.mean(0).argmax())
    theta0 = torch.zeros(k, d, dtype=x.dtype)
    theta0[best_arm, -1] = 50.0  # softmax == the constant policy to ~1e-22 (the incumbent)
    # the optimiser starts from a soft version (a saturated softmax has no gradient)
    theta = (theta0 / 25.0).requires_grad_(True)
    (theta_lin,) = _ascend([theta], _lin_probs(x), utility, steps, lr, [theta0])
    g = torch.Generator().manual_seed(seed)
    left = (0.1 * torch.randn(k, d, rank, generator=g, dtype=x.dtype)).requires_grad_(True)
    scale = torch.zeros(k, rank, dtype=x.dtype, requires_grad=True)
    start = theta.detach().clone().requires_grad_(True)  # lin's last iterate
    incumbent = [theta_lin, left.detach(), torch.zeros_like(scale)]  # == lin exactly
    quad = _ascend([start, left, scale], _quad_probs(x), utility, steps, lr, incumbent)

    def const(z):
        return torch.nn.functional.one_hot(torch.full((z.shape[0],), best_arm), k).to(z.dtype)

    return {
        "const": const,
        "lin": lambda z: _lin_probs(z)(theta_lin),
        "quad": lambda z: _quad_probs(z)(*quad),
        "unrestricted": None,
    }


def _subset(rows: np.ndarray, limit: int | None, seed: int) -> np.ndarray:
    if limit is None or rows.size <= limit:
        return rows
    return np.sort(np.random.default_rng(seed).choice(rows, size=limit, replace=False))


def run_gap(cfg: DictConfig | RunOptions, config_dirs: Sequence[str | Path] = ()) -> pd.DataFrame:
    """The gap table of ``cfg`` (a ``simulate`` config with a ``gap`` section); writes
    ``<out_dir>/gap.csv`` and returns it. ``config_dirs``: the ``--config-dir`` folders the
    config was composed with (their presets are named when ``cfg`` has no ``gap`` section)."""
    opts = cfg if isinstance(cfg, RunOptions) else RunOptions.from_config(cfg, need_learners=False)
    node = opts.config.get("gap")
    g = GapOptions.from_config(
        None if node is None else dict(node), gap_presets(config_dir(), *config_dirs)
    )  # every gap key checked before the table is read or a file written
    held_out = g.held_out
    if not opts.features.bias:
        raise ConfigError(
            "features.bias must be true for torchroute gap (each policy class is nested "
            "through the constant feature), got false"
        )
    check_run_folders(opts, gap_or_sweep=True)

    def keep_rows(table):
        # table order kept: the embedding cache is keyed by the texts in order
        train = _subset(table.rows("train"), g.max_train, g.seed)
        test = _subset(table.rows(held_out), g.max_held_out, g.seed)
        return table.select(np.sort(np.concatenate([train, test])))

    # the table and the feature map of features.source (pca, raw or oracle), as simulate
    # builds them (no env: the policies are fitted with full information)
    built = build(opts, env=False, select=keep_rows, fit_split="train")
    table, feats = built.table, built.features.double()
    name = g.table_name or opts.name
    rows = []
    for rho in g.rhos:
        utility = table.utility(rho).double()
        train = torch.as_tensor(table.rows("train"))
        policies = fit_policies(
            feats[train],
            utility[train],
            steps=g.steps,
            lr=g.lr,
            rank=g.rank,
            seed=g.seed,
        )
        for split in ("train", held_out):
            idx = torch.as_tensor(table.rows(split))
            for cls, policy in policies.items():
                value = 0.0 if policy is None else float(gap(policy(feats[idx]), utility[idx]))
                rows.append((name, split, rho, cls, value))
        log.info("gap %s rho=%g: %s", name, rho, rows[-8:])
    out = pd.DataFrame(rows, columns=["table", "split", "rho", "policy_class", "gap"])
    write_csv_atomic(opts.out_dir / "gap.csv", out)
    return out


def relative_improvements(frame: pd.DataFrame) -> pd.DataFrame:
    """``1 - Gap(lin)/Gap(const)`` and ``1 - Gap(quad)/Gap(lin)`` per table, split and rho."""
    wide = frame.pivot_table(index=["table", "split", "rho"], columns="policy_class", values="gap")
    wide["lin_vs_const"] = 1 - wide["lin"] / wide["const"]
    wide["quad_vs_lin"] = 1 - wide["quad"] / wide["lin"]
    return wide.reset_index()
