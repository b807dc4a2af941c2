"""Build a :class:`Router` from the output folder of ``torchroute simulate``."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from torchroute.checkpoint import CheckpointError, load_checkpoint
from torchroute.experiment import ConfigError, build_env, build_learner, trial_grid
from torchroute.learners.base import Learner
from torchroute.serve.features import FeatureMap
from torchroute.serve.router import Router


def load_router(
    run_dir: str | Path,
    learner: str | None = None,
    rho: float | None = None,
    seed: int | None = None,
    *,
    state_path: str | Path | None = None,
    fresh: bool = False,
    encoder: bool = True,
) -> Router:
    """The router of one trial of one learner of a simulate run.

    ``run_dir`` holds ``config.yaml`` (how the table, the features and the learner were
    built) and ``checkpoints/<learner>.pt`` (the state of all ``R`` trials). A trial is
    one ``(rho, seed)`` pair of the run's grid: ``rho`` is the cost sensitivity the router
    serves, ``seed`` the stream order that trial replayed (trials of the same rho with
    other seeds are other runs of the same learner on the same data). The router starts
    from that trial's learner state after the whole stream; its features are rebuilt from
    the config (the PCA is refitted on the train split and checked against the run's
    features) and texts are embedded with the run's encoder.

    Args:
        run_dir: the ``out_dir`` of ``torchroute simulate``.
        learner: the learner's name in the config; may be left out when there is one.
        rho: the trial's rho (default: the first of ``rhos``).
        seed: the trial's seed (default: the first of ``seeds``).
        state_path: the router's state file (default ``run_dir/serve/<learner>_rho<rho>_
            seed<seed>.pt``); when it exists the router resumes from it.
        fresh: start from a fresh learner (the config's hyper-parameters, no checkpoint).
        encoder: load the run's text encoder (``False``: embeddings only).

    Raises:
        FileNotFoundError: no ``config.yaml`` in ``run_dir``.
        CheckpointError: the learner's checkpoint is missing or does not fit.
        ConfigError: an unknown learner or trial, or a run without a table.
    """
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(
            f"{run_dir / 'config.yaml'} not found: give the out_dir of a simulate run"
        )
    cfg = OmegaConf.load(run_dir / "config.yaml")
    name = _learner_name(cfg, learner)
    rho, seed, trial = _trial(cfg, rho, seed)
    payload = None if fresh else load_checkpoint(run_dir / "checkpoints" / f"{name}.pt")
    one = cfg.copy()
    one.rhos, one.seeds, one.device = [rho], [seed], "cpu"
    env = build_env(one)
    table = getattr(env, "table", None)
    if table is None or table.embeddings is None:
        raise ConfigError(f"{run_dir}: serving needs a run on a routing table with embeddings")
    problem = env.problem()
    factory = partial(_build, cfg.learners[name], name=name)
    model = factory(problem)
    if payload is not None:
        _load_trial(model, payload, trial, run_dir / "checkpoints" / f"{name}.pt")
    features = _feature_map(cfg, table)
    _check_features(features, env, table.embeddings)
    encode = None
    if encoder and cfg.get("encoder") is not None:
        text_encoder = instantiate(cfg.encoder.encoder)
        encode = partial(text_encoder.encode, progress=False)
    if state_path is None:
        state_path = run_dir / "serve" / f"{name}_rho{rho:g}_seed{seed}.pt"
    return Router(
        model,
        factory,
        problem,
        features=features,
        encode=encode,
        state_path=state_path,
        seed=int(cfg.get("loop_seed", 0)),
    )


def _build(node: DictConfig, problem: Any, name: str) -> Learner:
    return build_learner(node, problem, name).cpu()


def _learner_name(cfg: DictConfig, learner: str | None) -> str:
    names = list(cfg.get("run_learners") or cfg.learners)
    if learner is None:
        if len(names) != 1:
            raise ConfigError(f"the run has learners {names}; choose one with learner=")
        return names[0]
    if learner not in cfg.learners:
        raise ConfigError(f"learner {learner!r} is not in the run; its learners: {names}")
    return learner


def _trial(cfg: DictConfig, rho: float | None, seed: int | None) -> tuple[float, int, int]:
    """``(rho, seed, index)`` of the trial in the run's rho-major grid."""
    pairs = list(zip(*trial_grid(list(cfg.rhos), list(cfg.seeds))))
    rho = pairs[0][0] if rho is None else float(rho)
    seed = pairs[0][1] if seed is None else int(seed)
    if (rho, seed) not in pairs:
        raise ConfigError(
            f"no trial with rho={rho}, seed={seed} in the run; rhos: {list(cfg.rhos)}, "
            f"seeds: {list(cfg.seeds)}"
        )
    return rho, seed, pairs.index((rho, seed))


def _load_trial(learner: Learner, payload: dict, trial: int, path: Path) -> None:
    """Load trial ``trial`` of an ``[R, ...]`` state into a one-trial learner."""
    if payload.get("learner_class") != type(learner).__name__:
        raise CheckpointError(
            f"checkpoint {path} holds a {payload.get('learner_class')}, not a "
            f"{type(learner).__name__}"
        )
    state = {}
    for key, value in payload["learner"].items():
        if not isinstance(value, torch.Tensor) or value.ndim == 0:
            raise CheckpointError(f"checkpoint {path}: state {key!r} has no trial dimension")
        state[key] = value[trial : trial + 1].clone()
    try:
        learner.load_state_dict(state)
    except RuntimeError as exc:
        raise CheckpointError(
            f"checkpoint {path} does not fit the config's learner: {exc}"
        ) from exc


def _feature_map(cfg: DictConfig, table: Any) -> FeatureMap:
    f = cfg.features
    source, bias, normalize = f.get("source", "pca"), f.get("bias", True), f.get("normalize", True)
    if source == "oracle":
        oracle = instantiate(
            f.oracle, arm_names=list(table.arm_names), embed_dim=int(table.embeddings.shape[1])
        )
        return FeatureMap(oracle=oracle, bias=bias, normalize=normalize)
    fit_rows = table.rows("train") if "train" in table.split else table.rows(cfg.split)
    pca_dim = None if source == "raw" else f.get("pca_dim")
    return FeatureMap.fit(table.embeddings, fit_rows, pca_dim, bias, normalize)


def _check_features(features: FeatureMap, env: Any, embeddings: torch.Tensor) -> None:
    """The rebuilt features of the stream's first query equal the run's."""
    context = env.context(0)
    got = features(embeddings[context.index[0].cpu()])  # [1, d]
    if not torch.allclose(got, context.x[0].cpu().float(), atol=1e-5):
        raise ConfigError(
            "the rebuilt features differ from the run's; check features.* in config.yaml"
        )
