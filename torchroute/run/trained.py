"""One trial's trained learner, read back from the out_dir of a simulate run.

Serving (:func:`torchroute.serve.load_router`) and off-policy evaluation of a checkpoint
(``torchroute evaluate checkpoint=RUN``) read a run the same way, through one
:class:`~torchroute.run.folder.RunFolder` (the trust check, ``problem.pt`` and the shard
plan of checkpoints: plain, chunked and torchrun runs), with nothing rebuilt: the learner
of the config (a pre-trained oracle loaded from the artifact the run wrote; list-valued
options set to what the trial chose on validation, :mod:`~torchroute.run.chosen_trial`) is
built for the trial's one-trial problem, and the checkpoint holding the trial gives its
state (the group that played it, when the trials chose differently):
entries with one row per trial are sliced to the trial, entries shared by all trials (an
oracle's weights, a train split's statistics) are loaded as saved."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from torchroute.checkpoint import CheckpointError
from torchroute.errors import ConfigError
from torchroute.learners.base import Learner
from torchroute.run.build import build_learner
from torchroute.run.chosen_trial import chosen_node, played_state
from torchroute.run.classes import learner_class
from torchroute.run.folder import RunFolder, is_pretrained
from torchroute.run.options import RunOptions
from torchroute.run.saved import trial_problem
from torchroute.types import Problem


@dataclass
class TrainedTrial:
    """What :func:`load_trained` read: one trial's learner and where it came from.

    Attributes:
        learner: the one-trial (``R = 1``) learner on the CPU, in the state the run left it
            (a fresh one with ``fresh=True``).
        factory: builds a fresh learner of the same config for a one-trial problem.
        problem: the trial's one-trial problem (the run's, cut to the trial).
        whole: the problem of all the run's trials.
        opts: the run's options (``config.yaml``).
        name, rho, seed, trial: the learner's name, the trial's rho and seed, and its index
            in the run's rho-major grid.
    """

    learner: Learner
    factory: Callable[[Problem], Learner]
    problem: Problem
    whole: Problem
    opts: RunOptions
    name: str
    rho: float
    seed: int
    trial: int


def run_options(run_dir: str | Path) -> RunOptions:
    """The options of the run in ``run_dir`` (its ``config.yaml``, on the CPU)."""
    return RunFolder(run_dir).options


def load_trained(
    run_dir: str | Path | RunFolder,
    learner: str | None = None,
    rho: float | None = None,
    seed: int | None = None,
    *,
    fresh: bool = False,
    trusted: Iterable[str] = (),
) -> TrainedTrial:
    """The learner ``learner`` of trial ``(rho, seed)`` of the run in ``run_dir``.

    Args:
        run_dir: the ``out_dir`` of ``torchroute simulate``, or the run already opened
            (:class:`~torchroute.run.folder.RunFolder`: calls for several trials of one run
            that share it read each file once).
        learner: the learner's name in the config; may be left out when the run has one.
        rho: the trial's rho (default: the first of ``rhos``).
        seed: the trial's seed (default: the first of ``seeds``).
        fresh: a fresh learner of the config (no checkpoint read).
        trusted: plug-in packages besides torchroute whose classes may be built (when
            ``run_dir`` is a path).

    Raises:
        RunFolderMissing: no ``config.yaml`` in ``run_dir``.
        CheckpointError: the learner's checkpoint is missing, damaged or does not fit.
        ConfigError: an unknown learner or trial, a ``_target_`` that is not trusted, a
            learner refitted on the world after the run's change (``static_refit``, a
            reference), or a run written before runs saved their problem.
    """
    folder = run_dir if isinstance(run_dir, RunFolder) else RunFolder(run_dir, tuple(trusted))
    name = folder.learner_name(learner)
    cls = learner_class(folder.options.learners[name], folder.trusted)  # a run's, not the user's
    if cls is not None and cls.refits_after_change:
        raise ConfigError(
            f"learners.{name} ({cls.__name__}) is refitted on the run's world after its "
            "change, which only the simulation knows: a reference of the report, not a "
            "router to read back; name another of the run's learners"
        )
    rho, seed, trial = folder.trial_of(rho, seed)
    node = chosen_node(folder.options.learners[name], name, folder.path, rho)
    node = trained_node(node, folder.path)
    whole = folder.problem
    problem = trial_problem(whole, trial)
    factory = partial(_build, node, name=name)
    model = factory(problem)
    if not fresh:
        payload, path, index, size = folder.checkpoint(name, trial)
        payload, index, size = played_state(payload, index, size, path, type(model).__name__)
        load_trial(model, payload, index, size, path)
    return TrainedTrial(model, factory, problem, whole, folder.options, name, rho, seed, trial)


def _build(node: dict, problem: Problem, name: str) -> Learner:
    return build_learner(node, problem, name).cpu()


def trained_node(node: dict, run_dir: Path) -> dict:
    """The learner node with every pre-trained oracle loaded from the artifact the run
    wrote (reading a run never pre-trains, so the pretrain config is dropped)."""
    node = copy.deepcopy(node)

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            pretrained = is_pretrained(value.get("_target_"))
            if pretrained and value.get("checkpoint") is None:
                out_dir = (value.get("config") or {}).get("out_dir")
                if out_dir is None or not (Path(str(out_dir)) / "oracle.pt").is_file():
                    raise ConfigError(
                        f"{run_dir}: the learner reads an oracle pre-trained into {out_dir}, "
                        "which holds no oracle.pt"
                    )
                value["checkpoint"] = str(out_dir)
            if pretrained:
                value.pop("config", None)  # only read to pre-train
            for v in value.values():
                visit(v)
        elif isinstance(value, list):
            for v in value:
                visit(v)

    visit(node)
    return node


def load_trial(learner: Learner, payload: dict, trial: int, size: int, path: Path) -> None:
    """Load trial ``trial`` of a checkpoint of ``size`` trials into a one-trial learner.

    Each entry of the saved state that has the shape of the one-trial learner's entry is
    shared by all trials (an oracle's weights, a train split's statistics) and is loaded
    as saved; an entry with a leading ``size`` dimension is sliced to the trial (nested
    entries such as an optimizer's state included).
    """
    if payload.get("learner_class") != type(learner).__name__:
        raise CheckpointError(
            f"checkpoint {path} holds a {payload.get('learner_class')}, not a "
            f"{type(learner).__name__}"
        )
    mine = learner.state_dict()
    state = {
        k: _one_trial(v, mine.get(k), trial, size, path, k) for k, v in payload["learner"].items()
    }
    try:
        learner.load_state_dict(state)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CheckpointError(
            f"checkpoint {path} does not fit the config's learner: {exc}"
        ) from exc


def _one_trial(value: Any, ref: Any, trial: int, size: int, path: Path, key: str) -> Any:
    if isinstance(value, torch.Tensor):
        if isinstance(ref, torch.Tensor) and ref.shape == value.shape:
            return value.clone()
        if value.ndim == 0:
            return value
        if value.shape[0] != size:
            raise CheckpointError(
                f"checkpoint {path}: state {key!r} has shape {tuple(value.shape)}, neither "
                f"[{size}, ...] (one row per trial) nor the learner's "
                f"{None if ref is None else tuple(ref.shape)}"
            )
        return value[trial : trial + 1].clone()
    if isinstance(value, dict):
        refs = ref if isinstance(ref, dict) else {}
        return {
            k: _one_trial(v, refs.get(k), trial, size, path, f"{key}.{k}") for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        refs = (
            ref
            if isinstance(ref, (list, tuple)) and len(ref) == len(value)
            else [None] * len(value)
        )
        return type(value)(_one_trial(v, r, trial, size, path, key) for v, r in zip(value, refs))
    return value
