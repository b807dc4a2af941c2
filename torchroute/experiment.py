"""One simulation experiment from a composed config: data -> features -> learners -> results."""

from __future__ import annotations

import inspect
import itertools
import logging
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from torchroute.checkpoint import CheckpointError, load_checkpoint
from torchroute.data.table import RoutingTable
from torchroute.envs.single_choice import SingleChoiceEnv
from torchroute.features import project_features
from torchroute.io import write_csv_atomic, write_text_atomic
from torchroute.learners.base import Learner
from torchroute.loop import simulate
from torchroute.tracking import NullTracker

log = logging.getLogger(__name__)

#: keys that do not change the numbers of a run (left out of the checkpoint's config)
_RUNTIME_KEYS = (
    "out_dir",
    "resume",
    "progress",
    "report",
    "ckpt_every",
    "logger",
    "run_learners",
    "cache_dir",
    "reference",
    "name",
)


class ConfigError(ValueError):
    """The experiment configuration asks for something impossible; names the key."""


def trial_grid(rhos: list[float], seeds: list[int]) -> tuple[list[float], list[int]]:
    """All (rho, seed) pairs as ``R = len(rhos) * len(seeds)`` trials, rho-major."""
    pairs = list(itertools.product(rhos, seeds))
    return [float(r) for r, _ in pairs], [int(s) for _, s in pairs]


def _validate(cfg: DictConfig) -> None:
    if not cfg.get("learners"):
        raise ConfigError("no learners configured: set learners (see configs/learner/)")
    rhos, seeds = list(cfg.rhos), list(cfg.seeds)
    if not rhos or not seeds:
        raise ConfigError(f"rhos and seeds must be non-empty, got rhos={rhos}, seeds={seeds}")
    bad = [r for r in rhos if not float(r) >= 0]
    if bad:
        raise ConfigError(f"rhos must be >= 0 (cost sensitivity), got {bad}")
    if cfg.get("run_learners"):
        unknown = sorted(set(cfg.run_learners) - set(cfg.learners))
        if unknown:
            raise ConfigError(
                f"run_learners names unknown learners {unknown}; configured: {sorted(cfg.learners)}"
            )
    if cfg.get("rounds") is not None and int(cfg.rounds) < 1:
        raise ConfigError(f"rounds must be >= 1 or null, got {cfg.rounds}")


def load_features(cfg: DictConfig) -> tuple[RoutingTable, torch.Tensor]:
    """Instantiate the table (``cfg.data``), embed it (``cfg.encoder``), build features."""
    table = _instantiate(cfg.data, "data")
    if cfg.get("encoder") is not None:
        table = _instantiate(cfg.encoder, "encoder")(table)
    if table.embeddings is None:
        raise ConfigError(
            f"{table.source}: the table has no embeddings; choose an encoder (encoder=minilm)"
        )
    f = cfg.features
    fit_rows = table.rows("train") if "train" in table.split else table.rows(cfg.split)
    feats = project_features(
        table.embeddings, fit_rows, f.get("pca_dim"), f.get("bias", True), f.get("normalize", True)
    )
    return table, feats


def _instantiate(node: Any, key: str, **kwargs: Any) -> Any:
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as exc:
        raise ConfigError(f"cannot build {key!r} from its config: {exc}") from exc


def build_learner(node: DictConfig, env: SingleChoiceEnv, name: str) -> Learner:
    """Instantiate one learner config, passing the run's shapes to the constructor.

    The constructor receives those of ``num_trials``, ``num_arms``, ``dim``,
    ``train_mean_utility``, ``rho`` and the train split's ``train_x``, ``train_scores``,
    ``train_costs`` that its signature names.
    """
    if "_target_" not in node:
        raise ConfigError(f"learners.{name} has no _target_ (see configs/learner/)")
    factory = _instantiate(node, f"learners.{name}", _partial_=True)
    available = {
        "num_trials": lambda: env.num_trials,
        "num_arms": lambda: env.num_arms,
        "dim": lambda: env.dim,
        "train_mean_utility": lambda: env.train_mean_utility(),
        "rho": lambda: env.rho,
        "train_x": lambda: env.split_data("train")[0],
        "train_scores": lambda: env.split_data("train")[1],
        "train_costs": lambda: env.split_data("train")[2],
    }
    params = inspect.signature(factory.func).parameters
    kwargs = {k: make() for k, make in available.items() if k in params}
    learner = factory(**kwargs)
    if not isinstance(learner, Learner):
        raise ConfigError(f"learners.{name} built a {type(learner).__name__}, not a Learner")
    return learner.to(env.device)


def run_config(cfg: DictConfig) -> pd.DataFrame:
    """Run every configured learner on the configured table; write results under ``out_dir``.

    Writes ``results.csv`` (one row per learner x trial), ``curves.csv``,
    ``config.yaml`` and ``checkpoints/<learner>.pt``; returns the results frame.
    """
    _validate(cfg)
    out_dir = Path(cfg.out_dir)
    names = list(cfg.run_learners or cfg.learners)
    run_config_dict = _numbers_config(cfg)
    resume_name = _check_resume(cfg, run_config_dict)
    rhos, seeds = trial_grid(list(cfg.rhos), list(cfg.seeds))
    device = _device(cfg.get("device", "cpu"))
    dtype = getattr(torch, cfg.get("dtype", "float32"))
    table, feats = load_features(cfg)
    env = SingleChoiceEnv(
        table,
        rhos,
        seeds,
        split=cfg.split,
        horizon=cfg.get("rounds"),
        features=feats,
        feedback=cfg.feedback,
        device=device,
        dtype=dtype,
    )
    learners = {name: build_learner(cfg.learners[name], env, name) for name in names}
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    log.info(
        "%s: %d trials x %d rounds, d=%d, K=%d",
        table.source,
        env.num_trials,
        env.horizon,
        env.dim,
        env.num_arms,
    )
    summaries, curves = [], []
    for name, learner in learners.items():
        run_dir = out_dir / "runs" / name
        if cfg.get("resume") and name != resume_name and (run_dir / "summary.csv").is_file():
            summary, curve = (
                pd.read_csv(run_dir / "summary.csv"),
                pd.read_csv(run_dir / "curve.csv"),
            )
        else:
            tracker = _tracker(cfg, name, run_config_dict)
            result = simulate(
                learner,
                env,
                seed=int(cfg.get("loop_seed", 0)),
                log_every=int(cfg.log_every),
                ckpt_every=cfg.get("ckpt_every"),
                ckpt_path=out_dir / "checkpoints" / f"{name}.pt",
                resume_from=cfg.resume if name == resume_name else None,
                tracker=tracker,
                config={**run_config_dict, "learner": name},
                progress=bool(cfg.progress),
                desc=name,
            )
            summary, curve = result.summary, result.curve
            summary.insert(0, "learner", name)
            curve.insert(0, "learner", name)
            tracker.log_table("results", summary)
            tracker.finish()
            write_csv_atomic(run_dir / "summary.csv", summary)
            write_csv_atomic(run_dir / "curve.csv", curve)
        summaries.append(summary)
        curves.append(curve)
    results = pd.concat(summaries, ignore_index=True)
    write_csv_atomic(out_dir / "results.csv", results)
    write_csv_atomic(out_dir / "curves.csv", pd.concat(curves, ignore_index=True))
    return results


def _numbers_config(cfg: DictConfig) -> dict:
    plain = OmegaConf.to_container(cfg, resolve=True)
    return {k: v for k, v in plain.items() if k not in _RUNTIME_KEYS}


def _check_resume(cfg: DictConfig, numbers: dict) -> str | None:
    """Validate ``cfg.resume`` before anything is written; returns the learner it resumes."""
    if not cfg.get("resume"):
        return None
    payload = load_checkpoint(cfg.resume)
    stored = dict(payload.get("config", {}))
    name = stored.pop("learner", None)
    if stored != numbers or name not in (cfg.run_learners or cfg.learners):
        raise CheckpointError(
            f"checkpoint {cfg.resume} was written by another configuration (learner {name!r}); "
            "resume with the same experiment and overrides"
        )
    return name


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={name!r} but CUDA is not available here; use device=cpu")
    return torch.device(name)


def _tracker(cfg: DictConfig, name: str, config: dict):
    if cfg.get("logger") is None:
        return NullTracker()
    factory = _instantiate(cfg.logger, "logger", _partial_=True)
    return factory(name=name, group=cfg.name, config={**config, "learner": name})
