"""The target policies of ``torchroute evaluate``: learner configs, checkpoints, fixed arms."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from torchroute.checkpoint import CheckpointError, load_checkpoint
from torchroute.learners.base import Learner
from torchroute.types import Context, Problem


def build_target(name: str, problem: Problem, node: Any = None) -> Learner:
    """The learner of config ``configs/learner/<name>.yaml`` (or ``node``) for ``problem``.

    Only ``_target_``s under ``torchroute.`` are instantiated.
    """
    from hydra.utils import instantiate

    from torchroute.cli import config_dir

    if node is None:
        path = config_dir() / "learner" / f"{name}.yaml"
        if not path.is_file():
            known = sorted(p.stem for p in path.parent.glob("*.yaml"))
            raise ValueError(
                f"targets: no learner config {name!r} (known: {known}); or use arm:<model>"
            )
        node = OmegaConf.load(path)
    target = str(node.get("_target_", ""))
    if not target.startswith("torchroute."):
        raise ValueError(f"targets: {name!r} has _target_ {target!r}, not a torchroute class")
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            learner = instantiate(node)(problem)
    except Exception as exc:  # instantiation wraps every constructor error
        cause = exc.__cause__ or exc
        raise ValueError(f"targets: cannot build {name!r} for the log: {cause}") from exc
    if not isinstance(learner, Learner):
        raise ValueError(f"targets: {name!r} built a {type(learner).__name__}, not a Learner")
    return learner.to(problem.device).double()


def frozen_probs(
    name: str, problem: Problem, x: Tensor, cfg: DictConfig, generator: torch.Generator
) -> Tensor:
    """The target's distribution on every logged context, ``[G, n, K]`` (``G`` rhos).

    ``arm:<model>`` is one-hot on that model; a learner config acts once on all ``n``
    contexts (``B = n``) without learning, from its checkpoint in ``cfg.checkpoint`` when
    that run has one for ``name``.
    """
    g, n = problem.num_trials, x.shape[0]
    if name.startswith("arm:"):
        arm = name[4:]
        if arm not in problem.arm_names:
            raise ValueError(f"targets: {name!r}: unknown model; the log's: {problem.arm_names}")
        probs = torch.zeros(g, n, problem.num_arms, dtype=torch.float64)
        probs[..., problem.arm_names.index(arm)] = 1.0
        return probs
    node = None
    payload = None
    if cfg.checkpoint is not None:
        run = Path(str(cfg.checkpoint))
        ckpt = run / "checkpoints" / f"{name}.pt"
        if not (run / "config.yaml").is_file():
            raise FileNotFoundError(f"checkpoint={run}: no config.yaml (a simulate out_dir?)")
        run_cfg = OmegaConf.load(run / "config.yaml")
        if ckpt.is_file() and name in run_cfg.get("learners", {}):
            node = run_cfg.learners[name]
            payload = (load_checkpoint(ckpt), _trials(run_cfg, problem, ckpt))
    learner = build_target(name, problem, node)
    if payload is not None:
        _load(learner, payload[0], payload[1], ckpt)
    context = Context(x=x.to(torch.float64)[None].expand(g, n, -1))  # [G, n, d]
    with torch.no_grad():
        return learner.act(context, generator).probs.double()  # [G, n, K]


def replay_learner(name: str, problem: Problem) -> Learner:
    """A fresh learner of config ``name`` (one trial per rho) to run through the log."""
    return build_target(name, problem)


def _trials(run_cfg: DictConfig, problem: Problem, path: Path) -> list[int]:
    """The run's trial (first seed) of each rho of ``problem``, in its rho-major grid."""
    pairs = list(itertools.product([float(r) for r in run_cfg.rhos], list(run_cfg.seeds)))
    out = []
    for rho in problem.rho.tolist():
        match = [i for i, (r, _) in enumerate(pairs) if abs(r - rho) < 1e-12]
        if not match:
            raise CheckpointError(
                f"{path}: the run has no trial with rho={rho} (its rhos: {list(run_cfg.rhos)})"
            )
        out.append(match[0])
    return out


def _load(learner: Learner, payload: dict, trials: list[int], path: Path) -> None:
    if payload.get("learner_class") != type(learner).__name__:
        raise CheckpointError(
            f"{path} holds a {payload.get('learner_class')}, not a {type(learner).__name__}"
        )
    index = torch.tensor(trials)
    state = {}
    for key, value in payload["learner"].items():
        if not isinstance(value, Tensor) or value.ndim == 0:
            raise CheckpointError(f"{path}: state {key!r} has no trial dimension")
        state[key] = value[index].clone()
    try:
        learner.load_state_dict(state)
    except RuntimeError as exc:
        raise CheckpointError(f"{path} does not fit the target built for the log: {exc}") from exc
