"""``torchroute evaluate``: off-policy evaluation of candidate routers on a decision log.

::

    torchroute evaluate logs=decisions.parquet targets=[squarecb,arm:gpt-4] replay=[linucb] \\
        rhos=[0,500] checkpoint=outputs/default out_dir=outputs/ope

Keys (``key=value``; lists in brackets):

- ``logs``: the decision log (``.parquet`` or ``.csv``, see :mod:`torchroute.data.decisions`).
- ``targets``: policies evaluated *frozen*: learner config names (``configs/learner/``, then
  the folders of ``--config-dir``; a learner of the ``checkpoint`` run is that run's trained
  learner, one trial per rho, read as ``serve`` reads it) or ``arm:<model>`` (always route
  to that model). A plug-in learner's classes are built only with ``--trust MODULE``.
- ``replay``: learner config names evaluated *learning through the log* (Li et al. 2011).
- ``rhos``: cost sensitivities to evaluate at (utilities are recomputed from the logged
  score and cost; default: the log's rho when it has one, else 0).
- ``estimators`` (default all of ips, snips, dm, dr, switch_dr, clipped_dr),
  ``interval`` (bootstrap | bernstein | normal), ``bootstrap`` (replicates, 200),
  ``alpha`` (0.05), ``switch_tau`` (10), ``clip`` (10), ``lam`` (ridge penalty of the
  reward model, 1), ``folds`` (cross-fitting folds, 2), ``crossfit`` (``random``: each
  fold predicted by the fit on the other folds, drawn at random; ``forward``: the folds are
  blocks in log order, by timestamp when the log has one, each predicted by the fit on the
  blocks before it, which keeps DR's intervals valid when the logging policy learned while
  it logged), ``seed`` (0), ``device`` (cpu), ``out_dir`` (``outputs/evaluate``).

Writes ``out_dir/ope.csv`` (one row per target x rho x estimator), ``out_dir/report.md``
and ``out_dir/ope.png``. Rows without feedback (null score) are left out, and counted.
The intervals are clipped to the utility's range ``[0, 1]`` (``clipped`` says which), and
what the log cannot support (propensity-1 decisions, a small log, a small effective sample
size) is warned about and said in the report (:mod:`torchroute.ope.limits`).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf

from torchroute.data.decisions import DecisionLog, load_decisions
from torchroute.errors import EvaluateError
from torchroute.functional.ope import ESTIMATORS, NEEDS_MODEL, estimate
from torchroute.functional.ope_model import fold_assignment, ridge_reward_model, time_blocks
from torchroute.functional.random import TrialRNG, trial_keys
from torchroute.io import check_writable_folder, write_csv_atomic
from torchroute.ope.keys import DEFAULTS
from torchroute.ope.limits import clip_intervals, log_warnings, row_warnings
from torchroute.ope.replay import replay
from torchroute.types import Problem

logger = logging.getLogger(__name__)


def parse_options(overrides: Sequence[str]) -> DictConfig:
    """``key=value`` overrides on :data:`DEFAULTS`, validated (unknown keys are refused)."""
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise EvaluateError(f"expected key=value arguments, got {bad}")
    try:
        given = OmegaConf.from_dotlist(list(overrides))
    except Exception as exc:  # omegaconf's grammar errors
        raise EvaluateError(f"cannot parse the arguments: {exc}") from exc
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise EvaluateError(f"unknown key(s) {unknown}; known: {sorted(DEFAULTS)}")
    cfg = OmegaConf.merge(OmegaConf.create(DEFAULTS), given)
    if not cfg.logs:
        raise EvaluateError("logs=<file> is required (a decision log, .parquet or .csv)")
    if not cfg.targets and not cfg.replay:
        raise EvaluateError("nothing to evaluate: give targets=[...] and/or replay=[...]")
    unknown = sorted(set(cfg.estimators) - set(ESTIMATORS))
    if unknown:
        raise EvaluateError(f"estimators: unknown {unknown}; choose from {list(ESTIMATORS)}")
    if cfg.interval not in ("bootstrap", "bernstein", "normal"):
        raise EvaluateError(f"interval must be bootstrap, bernstein or normal, got {cfg.interval}")
    if cfg.crossfit not in ("random", "forward"):
        raise EvaluateError(f"crossfit must be random or forward, got {cfg.crossfit!r}")
    for key, low in (("bootstrap", 0), ("folds", 1)):
        if not isinstance(cfg[key], int) or isinstance(cfg[key], bool) or cfg[key] < low:
            raise EvaluateError(f"{key} must be an integer >= {low}, got {cfg[key]!r}")
    if cfg.folds < 2:
        raise EvaluateError(
            f"folds must be an integer >= 2, got {cfg.folds}: cross-fitting predicts each "
            "fold by a reward model fitted on the others"
        )
    if not isinstance(cfg.seed, int) or isinstance(cfg.seed, bool) or cfg.seed < 0:
        raise EvaluateError(f"seed must be an integer >= 0, got {cfg.seed!r}")
    for key in ("alpha", "switch_tau", "clip", "lam"):
        if isinstance(cfg[key], bool) or not isinstance(cfg[key], (int, float)):
            raise EvaluateError(f"{key} must be a number, got {cfg[key]!r}")
    if not 0 < float(cfg.alpha) < 1:
        raise EvaluateError(f"alpha must be in (0, 1), got {cfg.alpha}")
    for key in ("switch_tau", "clip", "lam"):
        if not 0 < float(cfg[key]) < float("inf"):
            raise EvaluateError(f"{key} must be a finite number > 0, got {cfg[key]}")
    check_writable_folder(cfg.out_dir, "out_dir")
    return cfg


def _init_seed(cfg: Any) -> int:
    """The seed of fresh targets' initial weights: the ``loop_seed`` of the run in
    ``checkpoint`` (as that run built its learners), else ``seed``."""
    if cfg.checkpoint is None:
        return int(cfg.seed)
    from torchroute.run.trained import run_options

    return int(run_options(Path(str(cfg.checkpoint))).loop_seed)


def run(
    overrides: Sequence[str],
    config_dirs: Sequence[str | Path] = (),
    trusted: Sequence[str] = (),
) -> pd.DataFrame:
    """Evaluate the configured targets on the log; write ``ope.csv``, ``report.md``, the plot.

    Args:
        overrides: ``key=value`` options (see the module docstring).
        config_dirs: folders of extra learner configs (``learner/<name>.yaml``) searched
            after the packaged ones (``--config-dir``).
        trusted: module prefixes (``my_routing.``) whose classes a target may name besides
            torchroute's own (``--trust``).
    """
    from torchroute.ope.targets import frozen_probs, replay_learner

    cfg = parse_options(overrides)
    extra = [str(d) for d in config_dirs]
    full = load_decisions(cfg.logs)
    log = full.select(full.has_feedback)
    if log.num_decisions < 2:
        raise EvaluateError(f"{cfg.logs}: {log.num_decisions} decisions with feedback; need >= 2")
    x = _context(log, cfg.logs)
    rhos = _rhos(cfg, log)
    device = torch.device(cfg.device)
    g = len(rhos)
    rho_t = torch.tensor(rhos, dtype=torch.float64)
    problem = Problem(
        num_trials=g,
        num_arms=log.num_arms,
        dim=x.shape[1],
        rho=rho_t.to(device),
        arm_names=log.arm_names,
        horizon=log.num_decisions,
        device=device,
        dtype=torch.float64,
    )
    generator = torch.Generator().manual_seed(int(cfg.seed))
    init_seed = _init_seed(cfg)
    reward = log.utility(rho_t)  # [G, n]
    rows = []
    on_policy = estimate(
        torch.nn.functional.one_hot(log.action, log.num_arms).double()[None].expand(g, -1, -1),
        log.action,
        torch.ones_like(log.propensity),
        reward,
        estimators=("ips",),
        num_bootstrap=0,
        interval="normal",
        alpha=float(cfg.alpha),
    )
    rows += _rows("behaviour (logged)", "on_policy", rhos, on_policy, ("on_policy",))
    if cfg.targets:
        names, probs = [], []
        for name in cfg.targets:
            probs.append(
                frozen_probs(
                    str(name), problem, x.to(device), cfg, generator, extra, trusted, init_seed
                ).cpu()
            )
            names.append(str(name))
        pi = torch.cat(probs)  # [P G, n, K]
        estimators = tuple(cfg.estimators)
        q_hat = None
        if set(estimators) & set(NEEDS_MODEL):
            forward = cfg.crossfit == "forward"
            fold = _folds(log, int(cfg.folds), forward, generator, cfg.logs)
            q_hat = ridge_reward_model(
                x, log.action, reward, log.num_arms, cfg.lam, fold, forward=forward
            )
            q_hat = q_hat.repeat(len(names), 1, 1)  # [P G, n, K]
        result = estimate(
            pi,
            log.action,
            log.propensity,
            reward.repeat(len(names), 1),
            q_hat,
            estimators=estimators,
            switch_tau=float(cfg.switch_tau),
            clip=float(cfg.clip),
            num_bootstrap=int(cfg.bootstrap),
            interval=cfg.interval,
            alpha=float(cfg.alpha),
            generator=generator,
        )
        for j, name in enumerate(names):
            part = slice(j * g, (j + 1) * g)
            rows += _rows(name, "frozen", rhos, result, estimators, part)
    for name in cfg.replay:
        learner = replay_learner(str(name), problem, extra, trusted, init_seed)
        keys = trial_keys(pd.DataFrame({"rho": rhos}), int(cfg.seed), stream=f"replay:{name}")
        out = replay(
            learner,
            x.to(device),
            log.action.to(device),
            log.propensity.to(device),
            log.score.to(device),
            log.cost.to(device),
            rho_t.to(device),
            TrialRNG(keys, device=device),
        )
        z = float(torch.special.ndtri(torch.tensor(1 - float(cfg.alpha) / 2)))
        for i, rho in enumerate(rhos):
            v, se = float(out.value[i]), float(out.std_error[i])
            rows.append(
                _row(str(name), "replay", rho, "replay", v, se, v - z * se, v + z * se)
                | {"accepted": int(out.accepted[i])}
            )
    frame = pd.DataFrame(rows)
    frame["n"] = log.num_decisions
    frame["dropped_no_feedback"] = full.num_decisions - log.num_decisions
    notes = log_warnings(log.propensity)
    clipped = clip_intervals(frame)
    notes += row_warnings(frame)
    for note in notes:
        logger.warning("%s", note)
    out_dir = Path(str(cfg.out_dir))
    write_csv_atomic(out_dir / "ope.csv", frame)
    from torchroute.ope.report import write_evaluate_report

    write_evaluate_report(frame, out_dir, cfg, notes=notes, clipped=clipped)
    return frame


def _folds(
    log: DecisionLog, folds: int, forward: bool, generator: torch.Generator, source: str
) -> torch.Tensor:
    """``[n]`` fold of each decision: random, or blocks in log (timestamp) order."""
    n = log.num_decisions
    if folds > n:
        raise EvaluateError(f"folds={folds} exceeds the {n} decisions with feedback in {source}")
    if not forward:
        return fold_assignment(n, folds, generator)
    if log.timestamp is None:
        return time_blocks(n, folds)
    rank = torch.empty(n, dtype=torch.long)
    rank[torch.argsort(log.timestamp, stable=True)] = torch.arange(n)
    return time_blocks(n, folds)[rank]


def _context(log: DecisionLog, source: str) -> torch.Tensor:
    if log.features is not None:
        return log.features
    if log.embedding is not None:
        return log.embedding
    raise EvaluateError(
        f"{source}: targets need the contexts the router saw: a 'features' or 'embedding' "
        "column (a simulate run writes them with log_decisions=true log_contexts=true)"
    )


def _rhos(cfg: DictConfig, log: DecisionLog) -> list[float]:
    if cfg.rhos is not None:
        rhos = [float(r) for r in cfg.rhos]
    elif log.rho is not None and log.rho.unique().numel() == 1:
        rhos = [float(log.rho[0])]
    else:
        rhos = [0.0]
    if not rhos or any(not (0 <= r < float("inf")) for r in rhos):
        raise EvaluateError(f"rhos must be a non-empty list of finite values >= 0, got {rhos}")
    return rhos


def _row(target, mode, rho, estimator, value, se, lower, upper) -> dict[str, Any]:
    return {
        "target": target,
        "mode": mode,
        "rho": rho,
        "estimator": estimator,
        "value": value,
        "std_error": se,
        "lower": lower,
        "upper": upper,
    }


def _rows(target, mode, rhos, result, estimators, part=slice(None)) -> list[dict[str, Any]]:
    out = []
    idx = range(*part.indices(result.value.shape[1]))
    for (e, name), (i, p) in itertools.product(enumerate(estimators), enumerate(idx)):
        row = _row(
            target,
            mode,
            rhos[i],
            name,
            float(result.value[e, p]),
            float(result.std_error[e, p]),
            float(result.lower[e, p]),
            float(result.upper[e, p]),
        )
        out.append(row | {"ess": float(result.ess[p])})
    return out
