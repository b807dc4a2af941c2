"""The cases of the device check, found from the learner and env configs, and its coverage.

A case is one learner config on one small env (:mod:`torchroute.devicecheck.problems`) with
the tolerance of its comparison. Every learner config (packaged, of an extra config folder,
or of a ``--learner-dir``) is a case on the tiny env of its class's protocol and feedback
(:func:`protocol_env`) with the tolerance the class declares (``device_tolerance``,
:func:`~torchroute.devicecheck.compare.tolerance_of`); :data:`EXTRA_CASES` runs some configs
on a second env; an env config that no case runs on is a case of the probe learner of its
protocol (``random@<env>``, ``random_subset@<env>`` for a subset env); and any
``<learner config>@<env>`` pair is a case when asked for by name (:func:`pair_case`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

import torchroute.envs
import torchroute.learners
from torchroute.configs_path import config_dir, group_configs
from torchroute.devicecheck import problems
from torchroute.devicecheck.compare import EXACT, Tol, tolerance_of
from torchroute.envs import Env
from torchroute.learners import Learner
from torchroute.run.classes import own_learner_class

#: the folder of the packaged learner configs
CONFIG_DIR = config_dir() / "learner"


@dataclass(frozen=True)
class Case:
    """One learner config on one small env, with the tolerance of the comparison."""

    config: str
    env: str
    tol: Tol
    directory: Path | None = None  # where <config>.yaml is; None: the packaged learners
    env_directory: Path | None = None  # where <env>.yaml is; None: a packaged env


#: the tolerance of a learner class that declares none (and of the probe cases)
DEFAULT_TOL = EXACT
#: extra cases, a config on a second env: case name ``<config>@<env>`` -> (config, env of
#: ``problems.ENVS``); the tolerance is the one the config's class declares
EXTRA_CASES: dict[str, tuple[str, str]] = {
    "contextual_omd@table_subset": ("contextual_omd", "table_subset"),
}
#: the learner that checks an env config no case runs on: (single-choice, subset)
PROBES = ("random", "random_subset")
#: the tiny env of each protocol a learner class declares (``Learner.protocol``)
PROTOCOL_ENVS = {"single": "single_choice", "subset": "subset", "low_rank": "low_rank_experts"}


def protocol_env(learner: type[Learner]) -> str:
    """The env of a learner class's protocol (``Learner.protocol``): a single-choice
    learner that learns from every arm's reward (``feedback = "full"``) plays the
    single-choice env with full-information feedback."""
    protocol = getattr(learner, "protocol", "single")
    if protocol not in PROTOCOL_ENVS:
        raise ValueError(
            f"{learner.__name__}.protocol = {protocol!r}: expected one of {sorted(PROTOCOL_ENVS)}"
        )
    if protocol == "single" and getattr(learner, "feedback", "bandit") == "full":
        return "single_choice_full"
    return PROTOCOL_ENVS[protocol]


def learner_configs(
    extra: Sequence[str | Path] = (), learner_dirs: Sequence[str | Path] = ()
) -> dict[str, Path]:
    """``{config stem: file}`` of the packaged learner configs, those of the ``extra``
    config folders (their ``learner/``) and those of the ``learner_dirs`` (plain folders of
    learner configs).

    Raises:
        ValueError: a learner dir that is missing, or a config name found twice.
    """
    found = group_configs("learner", extra)
    for folder in learner_dirs:
        path = Path(folder)
        if not path.is_dir():
            raise ValueError(f"--learner-dir {folder}: no such folder")
        for file in sorted(path.glob("*.yaml")):
            if file.stem in found:
                raise ValueError(
                    f"--learner-dir {folder}: {file.name} is also {found[file.stem]}; "
                    "give it another name"
                )
            found[file.stem] = file.resolve()
    return dict(sorted(found.items()))


def learner_folder(path: Path) -> Path | None:
    """The folder of a learner config file; ``None`` for a packaged one."""
    return None if path.parent == CONFIG_DIR.resolve() else path.parent


def find_cases(
    extra: Sequence[str | Path] = (), learner_dirs: Sequence[str | Path] = ()
) -> dict[str, Case]:
    """Every case of the configs of :func:`learner_configs` and
    :func:`~torchroute.devicecheck.problems.env_configs` (packaged, ``extra`` config
    folders, ``learner_dirs``): one per learner config, :data:`EXTRA_CASES`, and a probe
    case per env config no other case runs on."""
    learners = learner_configs(extra, learner_dirs)
    envs = problems.env_configs(extra)
    folders = {stem: learner_folder(p) for stem, p in learners.items()}
    classes = {stem: _target_class(stem, folder) for stem, folder in folders.items()}
    cases = {
        stem: Case(stem, protocol_env(classes[stem]), tolerance_of(classes[stem]), folder)
        for stem, folder in folders.items()
        if stem not in SKIPPED_CONFIGS
    }
    cases |= {
        name: Case(config, env, tolerance_of(classes[config]), folders[config])
        for name, (config, env) in EXTRA_CASES.items()
        if config in learners
    }
    used = {case.env for case in cases.values()}
    for stem, path in envs.items():
        if stem in used:
            continue
        folder = problems.env_folder(path)
        probe = PROBES[1] if problems.is_subset_env(stem, folder) else PROBES[0]
        cases[f"{probe}@{stem}"] = Case(probe, stem, DEFAULT_TOL, None, folder)
    return cases


def pair_case(
    name: str, cases: dict[str, Case], extra: Sequence[str | Path] = (),
    learner_dirs: Sequence[str | Path] = (),
) -> Case | None:  # fmt: skip
    """The case ``<learner config>@<env>`` of a config and an env that no case pairs (the
    tolerance of the config's own case), or ``None`` when ``name`` names no such pair."""
    config, _, env = name.partition("@")
    learners = learner_configs(extra, learner_dirs)
    envs = problems.env_configs(extra)
    if config not in learners or (env not in envs and env not in problems.EXTRA_ENVS):
        return None
    tol = cases[config].tol if config in cases else DEFAULT_TOL
    env_dir = problems.env_folder(envs[env]) if env in envs else None
    return Case(config, env, tol, learner_folder(learners[config]), env_dir)


#: learner configs not checked, with the reason (none at present)
SKIPPED_CONFIGS: dict[str, str] = {}
#: names of torchroute.learners.__all__ that no config targets, with the reason
SKIPPED_LEARNERS: dict[str, str] = {
    "Learner": "abstract base class",
    "RidgeLearner": "base class of the ridge learners (covered through them)",
    "SubsetLearner": "base class of the subset learners (covered through them)",
}


def env_coverage() -> dict[str, str]:
    """``{name in torchroute.envs.__all__: the env of the check that covers it}``, found
    from the ``_target_`` of each packaged env config (plus the bare ``SubsetEnv``)."""
    return {"SubsetEnv": "subset", **{_env_name(stem): stem for stem in problems.find_envs()}}


def _env_name(stem: str) -> str:
    """The exported name an env config's ``_target_`` builds (its last dotted part)."""
    target = str(OmegaConf.load(problems.ENV_CONFIG_DIR / f"{stem}.yaml")["_target_"])
    return target.rsplit(".", 1)[-1]


SKIPPED_ENVS: dict[str, str] = {
    "Env": "abstract base class",
    "SubsetProblem": "the problem description of SubsetEnv, not an env",
    **{_env_name(stem): reason for stem, reason in problems.SKIPPED_ENV_CONFIGS.items()},
}


def _target_class(stem: str, directory: Path | None = None) -> type:
    """The learner class ``<directory>/<stem>.yaml`` builds
    (:func:`~torchroute.run.classes.own_learner_class`: a config folder given on the
    command line is the user's own)."""
    path = (directory or CONFIG_DIR) / f"{stem}.yaml"
    cls = own_learner_class(OmegaConf.to_container(OmegaConf.load(path)))
    if cls is None:
        raise ValueError(f"{path}: its _target_ does not name a learner class")
    return cls


#: every case of the packaged configs: each learner config and the overrides
CASES: dict[str, Case] = find_cases()


def coverage_failures(config_stems: list[str] | None = None) -> list[str]:
    """One line per packaged config, learner class or env that is neither checked nor
    skipped (``config_stems``: the packaged learner configs, found when ``None``)."""
    stems = config_stems if config_stems is not None else packaged_config_stems()
    failures = []
    checked = {case.config for case in CASES.values()}
    for stem in sorted(set(stems) - checked - set(SKIPPED_CONFIGS)):
        failures.append(f"coverage: configs/learner/{stem}.yaml is neither in CASES nor skipped")
    for stem in sorted((checked | set(SKIPPED_CONFIGS)) - set(stems)):
        failures.append(f"coverage: CASES or SKIPPED_CONFIGS name {stem!r}, not a config")
    targets = {_target_class(stem).__name__ for stem in checked & set(stems)}
    for name in torchroute.learners.__all__:
        if name not in targets and name not in SKIPPED_LEARNERS:
            failures.append(f"coverage: learner {name} has no checked config and no skip reason")
    covered = env_coverage()
    for name in torchroute.envs.__all__:
        if name not in covered and name not in SKIPPED_ENVS:
            failures.append(f"coverage: env {name} is neither checked nor skipped")
    for case_name, case in CASES.items():
        if case.env not in problems.ENVS:
            failures.append(f"coverage: case {case_name} names an unknown env {case.env!r}")
    return failures


def packaged_config_stems() -> list[str]:
    """The names of the packaged learner configs."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def case_learner(config: str, env: Env, directory: Path | None = None) -> Learner:
    """The learner of ``<directory>/<config>.yaml`` (default: the packaged learner configs)
    for ``env`` (on its device, float64), built by the runner's factory
    (:func:`torchroute.run.build.build_learner`).

    A config's ``oracle`` node (a pre-trained checkpoint) is replaced by
    :func:`~torchroute.devicecheck.problems.tiny_oracle`.
    """
    from torchroute.run.build import build_learner

    node = OmegaConf.load((directory or CONFIG_DIR) / f"{config}.yaml")
    extra: dict[str, Any] = {}
    problem = env.problem()
    if "oracle" in node:
        del node["oracle"]
        extra["oracle"] = problems.tiny_oracle(problem.arm_names)
    learner = build_learner(node, problem, config, **extra)  # cold: warm starts are tested apart
    return learner.to(device=env.device, dtype=torch.float64)
