"""The target policies of ``torchroute evaluate``: learner configs, checkpoints, fixed arms."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from torchroute.configs_path import config_dirs
from torchroute.errors import ConfigError, OptionError
from torchroute.learners.base import Learner
from torchroute.run.build import build_learner
from torchroute.run.folder import RunFolder
from torchroute.run.trained import load_trained
from torchroute.run.trust import check_trusted
from torchroute.types import Context, Problem


def learner_config(name: str, extra: Sequence[str | Path] = ()) -> tuple[Any, str]:
    """The node of ``learner/<name>.yaml`` in the packaged configs, then in the ``extra``
    folders (``--config-dir``), and the file it came from."""
    folders = config_dirs(extra)
    for folder in folders:
        path = folder / "learner" / f"{name}.yaml"
        if path.is_file():
            return OmegaConf.to_container(OmegaConf.load(path)), str(path)
    known = sorted({p.stem for folder in folders for p in (folder / "learner").glob("*.yaml")})
    raise OptionError(f"targets: no learner config {name!r} (known: {known}); or use arm:<model>")


def build_target(
    name: str,
    problem: Problem,
    extra: Sequence[str | Path] = (),
    trusted: Iterable[str] = (),
    seed: int = 0,
) -> Learner:
    """A fresh learner of config ``learner/<name>.yaml`` for ``problem`` (float64), built by
    the runner's factory (:func:`torchroute.run.build.build_learner`) with initial weights
    drawn under ``seed`` (a run's ``loop_seed``).

    Only torchroute's own classes and those under a ``trusted`` prefix are instantiated.

    Raises:
        ConfigError: a config that does not build a learner for ``problem``.
    """
    node, source = learner_config(name, extra)
    check_trusted(node, f"targets.{name}", source, trusted)
    try:  # built cold: a frozen target is evaluated as built, never warm-started
        learner = build_learner(OmegaConf.create(node), problem, name, init_seed=seed)
    except ConfigError as exc:
        raise ConfigError(f"targets: cannot build {name!r} for the log: {exc}") from exc
    return learner.double()


def frozen_probs(
    name: str,
    problem: Problem,
    x: Tensor,
    cfg: DictConfig,
    generator: torch.Generator,
    extra: Sequence[str | Path] = (),
    trusted: Iterable[str] = (),
    seed: int = 0,
) -> Tensor:
    """The target's distribution on every logged context, ``[G, n, K]`` (``G`` rhos).

    ``arm:<model>`` is one-hot on that model; a learner acts once on all ``n`` contexts
    (``B = n``) without learning. A learner of the run in ``cfg.checkpoint`` is that run's
    trained learner, one trial per rho (its first seed), read as serving reads it
    (:func:`torchroute.run.trained.load_trained`: plain, chunked and torchrun runs);
    another name is a fresh learner of its config (:func:`build_target`, initial weights
    under ``seed``).
    """
    g, n = problem.num_trials, x.shape[0]
    if name.startswith("arm:"):
        arm = name[4:]
        if arm not in problem.arm_names:
            raise OptionError(f"targets: {name!r}: unknown model; the log's: {problem.arm_names}")
        probs = torch.zeros(g, n, problem.num_arms, dtype=torch.float64)
        probs[..., problem.arm_names.index(arm)] = 1.0
        return probs
    if cfg.checkpoint is not None:
        run = RunFolder(Path(str(cfg.checkpoint)), tuple(trusted))  # read once for all rhos
        if name in run.options.learners:
            return torch.cat(
                [
                    _trained_probs(run, name, rho, x, problem, generator)
                    for rho in problem.rho.tolist()
                ]
            )
    learner = build_target(name, problem, extra, trusted, seed)
    context = Context(x=x.to(torch.float64)[None].expand(g, n, -1))  # [G, n, d]
    with torch.no_grad():
        return learner.act(context, generator).probs.double()  # [G, n, K]


def _trained_probs(
    run: RunFolder, name: str, rho: float, x: Tensor, problem: Problem, generator: torch.Generator
) -> Tensor:
    """``[1, n, K]``: the run's trained learner of the trial at ``rho`` on the log."""
    trained = load_trained(run, name, rho=rho)
    if list(trained.problem.arm_names) != list(problem.arm_names):
        raise OptionError(
            f"checkpoint={run.path}: the run's models {trained.problem.arm_names} are not the "
            f"log's {problem.arm_names}"
        )
    if trained.problem.dim != x.shape[1]:
        raise OptionError(
            f"checkpoint={run.path}: the run's learners read d={trained.problem.dim} features but "
            f"the log's contexts have {x.shape[1]}"
        )
    learner = trained.learner.to(problem.device).double()
    with torch.no_grad():
        return learner.act(Context(x=x.to(torch.float64)[None]), generator).probs.double()


def replay_learner(
    name: str,
    problem: Problem,
    extra: Sequence[str | Path] = (),
    trusted: Iterable[str] = (),
    seed: int = 0,
) -> Learner:
    """A fresh learner of config ``name`` (one trial per rho) to run through the log
    (initial weights under ``seed``)."""
    return build_target(name, problem, extra, trusted, seed)
