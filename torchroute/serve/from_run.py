"""Build a :class:`Router` from the output folder of ``torchroute simulate``.

Nothing is rebuilt: the run saved the :class:`~torchroute.types.Problem` its learners were
built for (``problem.pt``) and its fitted feature map (``features.pt``); both are read with
``weights_only=True``. The learner comes from its config node in ``config.yaml`` only when
every ``_target_`` in it is one of torchroute's own classes (:mod:`torchroute.run.trust`),
and its state from the checkpoint that holds the trial: ``<learner>.pt`` for a plain run,
``<learner>[.rank<r>of<W>][.chunk<c>].pt`` for a run split into pieces. A run of a
subset learner (its problem a :class:`~torchroute.envs.subset.SubsetProblem`) is served
by a :class:`~torchroute.serve.subset_router.SubsetRouter`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from torchroute.checkpoint import CheckpointError, load_checkpoint
from torchroute.envs.subset.base import SubsetProblem
from torchroute.features import FEATURES_FILE, FeatureMap
from torchroute.learners.base import Learner
from torchroute.run.build import build_learner, instantiate_node, trial_grid
from torchroute.run.options import ConfigError, RunOptions
from torchroute.run.outdir import PROBLEM_FILE
from torchroute.run.saved import SavedProblemError, problem_from_state, trial_problem
from torchroute.run.shards import plan
from torchroute.run.trust import check_trusted
from torchroute.serve.router import Router
from torchroute.serve.subset_router import SubsetRouter
from torchroute.types import Problem

_PRETRAINED = "torchroute.trainers.load_or_pretrain"


def load_router(
    run_dir: str | Path,
    learner: str | None = None,
    rho: float | None = None,
    seed: int | None = None,
    *,
    state_path: str | Path | None = None,
    fresh: bool = False,
    encoder: bool = True,
    trusted: Iterable[str] = (),
) -> Router:
    """The router of one trial of one learner of a simulate run (a
    :class:`~torchroute.serve.subset_router.SubsetRouter` for a subset learner).

    A trial is one ``(rho, seed)`` pair of the run's grid: ``rho`` is the cost
    sensitivity the router serves, ``seed`` the stream order that trial replayed. The
    router starts from that trial's learner state after the whole stream, maps embeddings
    with the run's saved feature map and embeds texts with the run's encoder.

    Args:
        run_dir: the ``out_dir`` of ``torchroute simulate``.
        learner: the learner's name in the config; may be left out when there is one.
        rho: the trial's rho (default: the first of ``rhos``).
        seed: the trial's seed (default: the first of ``seeds``).
        state_path: the router's state file (default ``run_dir/serve/<learner>_rho<rho>_
            seed<seed>.pt``); when it exists the router resumes from it.
        fresh: start from a fresh learner (the config's hyper-parameters, no checkpoint).
        encoder: load the run's text encoder (``False``: embeddings only).
        trusted: module prefixes besides torchroute's own whose ``_target_``s may be built
            (a plug-in package the caller trusts).

    Raises:
        FileNotFoundError: no ``config.yaml`` in ``run_dir``.
        CheckpointError: the learner's checkpoint is missing or does not fit.
        ConfigError: an unknown learner or trial, a ``_target_`` that is not torchroute's,
            or a run without a table.
    """
    run_dir = Path(run_dir)
    source = run_dir / "config.yaml"
    if not source.is_file():
        raise FileNotFoundError(f"{source} not found: give the out_dir of a simulate run")
    config = OmegaConf.to_container(OmegaConf.load(source), resolve=False)
    opts = RunOptions.from_config({**config, "device": "cpu"}, need_learners=False)
    name = _learner_name(opts, learner)
    node = _served_node(opts.learners[name], run_dir)
    check_trusted(node, f"learners.{name}", str(source), trusted)
    encoder_node = None
    if encoder and opts.encoder is not None and opts.encoder.get("encoder") is not None:
        encoder_node = opts.encoder["encoder"]
        check_trusted(encoder_node, "encoder.encoder", str(source), trusted)
    rho, seed, trial = _trial(opts, rho, seed)
    whole, layout = _saved_problem(run_dir)
    subset = isinstance(whole, SubsetProblem)
    has_features = subset or (run_dir / FEATURES_FILE).is_file()
    if not has_features or whole.embed_dim is None:
        raise ConfigError(f"{run_dir}: serving needs a run on a routing table with embeddings")
    problem = trial_problem(whole, trial)
    factory = partial(_build, node, name=name)
    model = factory(problem)
    if not fresh:
        path, index, size = _checkpoint_of(run_dir, name, trial, whole.num_trials, layout)
        load_trial(model, load_checkpoint(path), index, size, path)
    encode = None
    if encoder_node is not None:
        text_encoder = instantiate_node(encoder_node, "encoder.encoder")
        encode = partial(text_encoder.encode, progress=False)
    if state_path is None:
        state_path = run_dir / "serve" / f"{name}_rho{rho:g}_seed{seed}.pt"
    router = SubsetRouter if subset else Router
    return router(
        model,
        factory,
        problem,
        features=None if subset else FeatureMap.load(run_dir),
        encode=encode,
        state_path=state_path,
        seed=opts.loop_seed,
    )


def _build(node: dict, problem: Problem, name: str) -> Learner:
    return build_learner(node, problem, name).cpu()


def _served_node(node: dict, run_dir: Path) -> dict:
    """The learner node with every pre-trained oracle loaded from the artifact the run
    wrote (serving never pre-trains, so the pretrain config is dropped)."""
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
                value.pop("config", None)  # only read to pre-train, which serving never does
            for v in value.values():
                visit(v)
        elif isinstance(value, list):
            for v in value:
                visit(v)

    visit(node)
    return node


def _learner_name(opts: RunOptions, learner: str | None) -> str:
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


def _trial(opts: RunOptions, rho: float | None, seed: int | None) -> tuple[float, int, int]:
    """``(rho, seed, index)`` of the trial in the run's rho-major grid."""
    pairs = list(zip(*trial_grid(list(opts.rhos), list(opts.seeds))))
    rho = pairs[0][0] if rho is None else float(rho)
    seed = pairs[0][1] if seed is None else int(seed)
    if (rho, seed) not in pairs:
        raise ConfigError(
            f"no trial with rho={rho}, seed={seed} in the run; rhos: {list(opts.rhos)}, "
            f"seeds: {list(opts.seeds)}"
        )
    return rho, seed, pairs.index((rho, seed))


def _saved_problem(run_dir: Path) -> tuple[Problem, dict]:
    path = run_dir / PROBLEM_FILE
    if not path.is_file():
        raise ConfigError(
            f"{path} not found: the run was written by an older torchroute; run simulate "
            "again to serve it"
        )
    payload = load_checkpoint(path)
    kind = payload["problem"].get("kind", "Problem")
    if kind not in ("Problem", "SubsetProblem"):
        raise ConfigError(
            f"{run_dir}: the run's learners were built for a {kind}; the router serves "
            "single-choice learners (Problem) and subset learners (SubsetProblem)"
        )
    layout = payload.get("layout") or {"world_size": 1, "trial_chunk": None}
    try:
        return problem_from_state(payload["problem"]), layout
    except SavedProblemError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def _checkpoint_of(
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
