"""One trial's trained learner, read back from the out_dir of a simulate run.

Serving (:func:`torchroute.serve.load_router`) and off-policy evaluation of a checkpoint
(``torchroute evaluate checkpoint=RUN``) read a run the same way, with nothing rebuilt:

1. ``config.yaml`` gives the learner's config node; it is built only when every
   ``_target_`` in it is one of torchroute's classes or under a trusted prefix
   (:mod:`torchroute.run.trust`), with a pre-trained oracle loaded from the artifact the run
   wrote;
2. ``problem.pt`` gives the :class:`~torchroute.types.Problem` the run's learners were
   built for (with its layout: torchrun ranks and trial chunks), read with
   ``weights_only=True``; the trial's one-trial problem is cut from it;
3. the checkpoint holding the trial (``<learner>.pt``, or
   ``<learner>[.rank<r>of<W>][.chunk<c>].pt`` for a run split into pieces) gives its state:
   entries with one row per trial are sliced to the trial, entries shared by all trials
   (an oracle's weights, a train split's statistics) are loaded as saved.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from torchroute.checkpoint import CheckpointError, load_checkpoint
from torchroute.learners.base import Learner
from torchroute.run.build import build_learner, trial_grid
from torchroute.run.options import ConfigError, RunOptions
from torchroute.run.outdir import PROBLEM_FILE
from torchroute.run.saved import SavedProblemError, problem_from_state, trial_problem
from torchroute.run.shards import plan
from torchroute.run.trust import check_trusted
from torchroute.types import Problem

_PRETRAINED = "torchroute.trainers.load_or_pretrain"


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


def run_options(run_dir: Path) -> RunOptions:
    """The options of the run in ``run_dir`` (its ``config.yaml``, on the CPU)."""
    source = run_dir / "config.yaml"
    if not source.is_file():
        raise FileNotFoundError(f"{source} not found: give the out_dir of a simulate run")
    config = OmegaConf.to_container(OmegaConf.load(source), resolve=False)
    return RunOptions.from_config({**config, "device": "cpu"}, need_learners=False)


def load_trained(
    run_dir: str | Path,
    learner: str | None = None,
    rho: float | None = None,
    seed: int | None = None,
    *,
    fresh: bool = False,
    trusted: Iterable[str] = (),
    cache: dict[Path, Any] | None = None,
) -> TrainedTrial:
    """The learner ``learner`` of trial ``(rho, seed)`` of the run in ``run_dir``.

    Args:
        run_dir: the ``out_dir`` of ``torchroute simulate``.
        learner: the learner's name in the config; may be left out when the run has one.
        rho: the trial's rho (default: the first of ``rhos``).
        seed: the trial's seed (default: the first of ``seeds``).
        fresh: a fresh learner of the config (no checkpoint read).
        trusted: module prefixes besides torchroute's own whose ``_target_``s may be built.
        cache: the run's files already read (``problem.pt`` and checkpoints, by path),
            filled as they are read: calls for several trials of one run that share it read
            each file once.

    Raises:
        FileNotFoundError: no ``config.yaml`` in ``run_dir``.
        CheckpointError: the learner's checkpoint is missing or does not fit.
        ConfigError: an unknown learner or trial, a ``_target_`` that is not trusted, or a
            run written before runs saved their problem.
    """
    run_dir = Path(run_dir)
    opts = run_options(run_dir)
    name = learner_name(opts, learner)
    node = trained_node(opts.learners[name], run_dir)
    check_trusted(node, f"learners.{name}", str(run_dir / "config.yaml"), trusted)
    rho, seed, trial = trial_of(opts, rho, seed)
    cache = {} if cache is None else cache
    whole, layout = _read_once(cache, run_dir / PROBLEM_FILE, lambda: saved_problem(run_dir))
    problem = trial_problem(whole, trial)
    factory = partial(_build, node, name=name)
    model = factory(problem)
    if not fresh:
        path, index, size = checkpoint_of(run_dir, name, trial, whole.num_trials, layout)
        load_trial(model, _read_once(cache, path, lambda: load_checkpoint(path)), index, size, path)
    return TrainedTrial(model, factory, problem, whole, opts, name, rho, seed, trial)


def _read_once(cache: dict[Path, Any], path: Path, read: Callable[[], Any]) -> Any:
    """``cache[path]``, read by ``read()`` the first time."""
    if path not in cache:
        cache[path] = read()
    return cache[path]


def _build(node: dict, problem: Problem, name: str) -> Learner:
    return build_learner(node, problem, name).cpu()


def trained_node(node: dict, run_dir: Path) -> dict:
    """The learner node with every pre-trained oracle loaded from the artifact the run
    wrote (reading a run never pre-trains, so the pretrain config is dropped)."""
    node = copy.deepcopy(node)

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            if value.get("_target_") == _PRETRAINED and value.get("checkpoint") is None:
                out_dir = (value.get("config") or {}).get("out_dir")
                if out_dir is None or not (Path(str(out_dir)) / "oracle.pt").is_file():
                    raise ConfigError(
                        f"{run_dir}: the learner reads an oracle pre-trained into {out_dir}, "
                        "which holds no oracle.pt"
                    )
                value["checkpoint"] = str(out_dir)
            if value.get("_target_") == _PRETRAINED:
                value.pop("config", None)  # only read to pre-train
            for v in value.values():
                visit(v)
        elif isinstance(value, list):
            for v in value:
                visit(v)

    visit(node)
    return node


def learner_name(opts: RunOptions, learner: str | None) -> str:
    """``learner``, checked against the run's learners (the only one when ``None``)."""
    names = list(opts.run_learners)
    if learner is None:
        if len(names) != 1:
            raise ConfigError(
                f"the run has learners {names}; choose one with --learner "
                "(learner=... of load_router in Python)"
            )
        return names[0]
    if learner not in opts.learners:
        raise ConfigError(f"learner {learner!r} is not in the run; its learners: {names}")
    return learner


def trial_of(opts: RunOptions, rho: float | None, seed: int | None) -> tuple[float, int, int]:
    """``(rho, seed, index)`` of the trial in the run's rho-major grid (default: the first
    rho, the first seed)."""
    pairs = list(zip(*trial_grid(list(opts.rhos), list(opts.seeds))))
    rho = pairs[0][0] if rho is None else float(rho)
    seed = pairs[0][1] if seed is None else int(seed)
    if (rho, seed) not in pairs:
        raise ConfigError(
            f"no trial with rho={rho}, seed={seed} in the run; rhos: {list(opts.rhos)}, "
            f"seeds: {list(opts.seeds)}"
        )
    return rho, seed, pairs.index((rho, seed))


def saved_problem(run_dir: Path) -> tuple[Problem, dict]:
    """The run's ``problem.pt``: the problem of all its trials, and its layout
    (``world_size``, ``trial_chunk``)."""
    path = run_dir / PROBLEM_FILE
    if not path.is_file():
        raise ConfigError(
            f"{path} not found: the run was written by an older torchroute; run simulate "
            "again to read it"
        )
    payload = load_checkpoint(path)
    kind = payload["problem"].get("kind", "Problem")
    if kind not in ("Problem", "SubsetProblem"):
        raise ConfigError(
            f"{run_dir}: the run's learners were built for a {kind}; a run can be read back "
            "for single-choice learners (Problem) and subset learners (SubsetProblem)"
        )
    layout = payload.get("layout") or {"world_size": 1, "trial_chunk": None}
    try:
        return problem_from_state(payload["problem"]), layout
    except SavedProblemError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def checkpoint_of(
    run_dir: Path, name: str, trial: int, num_trials: int, layout: dict
) -> tuple[Path, int, int]:
    """``(checkpoint, index of the trial in it, trials it holds)`` for a plain run or a
    run split into torchrun ranks and chunks."""
    world = int(layout.get("world_size", 1))
    for rank in range(world):
        for piece in plan(num_trials, layout.get("trial_chunk"), world, rank):
            if piece.start <= trial < piece.stop:
                path = run_dir / "checkpoints" / piece.checkpoint_name(name)
                return path, trial - piece.start, piece.stop - piece.start
    raise ConfigError(f"trial {trial} is not in the run's {num_trials} trials")


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
