"""One simulation experiment from a composed config: data -> env -> learners -> results.

Output folder layout (``out_dir``)::

    config.yaml              the composed configuration
    fingerprint.json         hash of the keys that change the numbers (see ``runtime_keys``)
    results.csv, curves.csv  one row per learner x trial / per learner x trial x logged round
    runs/<learner>/          summary.csv, curve.csv and fingerprint.json of each learner
    checkpoints/<learner>.pt the learner's last checkpoint (resume from it); a run split into
                             pieces has one per piece: <learner>[.rank<r>of<W>][.chunk<c>].pt

A folder written by another configuration is refused unless ``overwrite=true``; results of
a learner are reused (on ``resume``) only when their fingerprint matches.

With ``rng=per_trial`` the trials can run ``trial_chunk`` at a time and, under ``torchrun``,
in contiguous shards over the ranks (:mod:`torchroute.runner`); the results are those of a
single process.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
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
from torchroute.distributed import Distributed
from torchroute.envs.base import Env
from torchroute.features import FEATURE_SOURCES, oracle_features, project_features
from torchroute.functional.random import TrialRNG, trial_keys
from torchroute.io import write_csv_atomic, write_text_atomic
from torchroute.learners.base import Learner
from torchroute.pieces import layout, plan
from torchroute.runner import Job, run_learner
from torchroute.tracking import NullTracker
from torchroute.types import Problem

log = logging.getLogger(__name__)

_DTYPES = ("float32", "float64")
_RNGS = ("shared", "per_trial")


class ConfigError(ValueError):
    """The experiment configuration asks for something impossible; names the key."""


def trial_grid(rhos: list[float], seeds: list[int]) -> tuple[list[float], list[int]]:
    """All (rho, seed) pairs as ``R = len(rhos) * len(seeds)`` trials, rho-major."""
    pairs = list(itertools.product(rhos, seeds))
    return [float(r) for r, _ in pairs], [int(s) for _, s in pairs]


def _number_list(cfg: DictConfig, key: str, kind: type) -> list:
    values = list(cfg.get(key) or [])
    if not values:
        raise ConfigError(f"{key} must be a non-empty list, got {values}")
    out = []
    for v in values:
        try:
            number = kind(v)
        except (TypeError, ValueError):
            number = None
        if number is None or isinstance(v, bool) or (kind is int and float(v) != number):
            raise ConfigError(f"{key} must hold {kind.__name__} values, got {v!r} in {values}")
        out.append(number)
    return out


def _validate(cfg: DictConfig) -> None:
    if not cfg.get("learners"):
        raise ConfigError("no learners configured: set learners (see configs/learner/)")
    rhos = _number_list(cfg, "rhos", float)
    _number_list(cfg, "seeds", int)
    bad = [r for r in rhos if not (r >= 0 and r < float("inf"))]
    if bad:
        raise ConfigError(f"rhos must be finite and >= 0 (cost sensitivity), got {bad}")
    if cfg.get("run_learners"):
        unknown = sorted(set(cfg.run_learners) - set(cfg.learners))
        if unknown:
            raise ConfigError(
                f"run_learners names unknown learners {unknown}; configured: {sorted(cfg.learners)}"
            )
    rounds = cfg.get("rounds")
    if rounds is not None and (
        not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1
    ):
        raise ConfigError(f"rounds must be an integer >= 1 or null, got {rounds!r}")
    if cfg.get("dtype", "float32") not in _DTYPES:
        raise ConfigError(f"dtype must be one of {list(_DTYPES)}, got {cfg.get('dtype')!r}")
    if cfg.get("rng", "shared") not in _RNGS:
        raise ConfigError(f"rng must be one of {list(_RNGS)}, got {cfg.get('rng')!r}")
    chunk = cfg.get("trial_chunk")
    if chunk is not None and (not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1):
        raise ConfigError(f"trial_chunk must be an integer >= 1 or null, got {chunk!r}")
    if chunk is not None and cfg.get("rng", "shared") != "per_trial":
        raise ConfigError(
            "trial_chunk needs rng=per_trial (with one shared generator a trial's numbers "
            "depend on the trials beside it)"
        )
    for key in ("log_every", "ckpt_every"):
        value = cfg.get(key)
        if value is None and key == "ckpt_every":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{key} must be an integer >= 1, got {value!r}")


def load_features(cfg: DictConfig) -> tuple[RoutingTable, torch.Tensor]:
    """Instantiate the table (``cfg.data``), embed it (``cfg.encoder``), build features."""
    table = _instantiate(cfg.data, "data")
    if not isinstance(table, RoutingTable):
        raise ConfigError(f"data built a {type(table).__name__}, not a RoutingTable")
    if cfg.get("encoder") is not None:
        table = _instantiate(cfg.encoder, "encoder")(table)
    if table.embeddings is None:
        raise ConfigError(
            f"{table.source}: the table has no embeddings; choose an encoder (encoder=minilm)"
        )
    f = cfg.features
    source = f.get("source", "pca")
    if source not in FEATURE_SOURCES:
        raise ConfigError(f"features.source must be one of {FEATURE_SOURCES}, got {source!r}")
    if source == "oracle":  # the pre-trained feature head (CABS paper): features.oracle node
        if f.get("oracle") is None:
            raise ConfigError(
                "features.source=oracle needs a features.oracle node (e.g. _target_: "
                "torchroute.trainers.load_or_pretrain, see configs/experiment/cabs_table2.yaml)"
            )
        oracle = _instantiate(
            f.oracle,
            "features.oracle",
            arm_names=list(table.arm_names),
            embed_dim=int(table.embeddings.shape[1]),
        )
        feats = oracle_features(
            table.embeddings, oracle, f.get("bias", True), f.get("normalize", True)
        )
        return table, feats
    fit_rows = table.rows("train") if "train" in table.split else table.rows(cfg.split)
    pca_dim = None if source == "raw" else f.get("pca_dim")
    feats = project_features(
        table.embeddings, fit_rows, pca_dim, f.get("bias", True), f.get("normalize", True)
    )
    return table, feats


def _instantiate(node: Any, key: str, **kwargs: Any) -> Any:
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as exc:
        cause = exc.__cause__ or exc
        raise ConfigError(f"cannot build {key!r} from its config: {cause}") from exc


def build_env(cfg: DictConfig, device: torch.device | None = None) -> Env:
    """The environment of ``cfg.env`` (on ``device``, default ``cfg.device``).

    With a table (``cfg.data`` set) the env factory is called with ``table``, the
    ``rho`` x ``seed`` grid as ``rho`` and ``seeds``, the bandit ``features``, ``device``
    and ``dtype``. A self-contained env (``data: null``: a simulator, a dataset the env
    reads itself) is called with ``seeds``, ``device`` and ``dtype`` only; its config
    holds the rest, and its ``trials()`` say what each trial varies.
    """
    seeds = _number_list(cfg, "seeds", int)
    device = device or _device(str(cfg.get("device", "cpu")))
    dtype = getattr(torch, cfg.get("dtype", "float32"))
    # Objects are passed to the partial, not to instantiate (which would merge them into
    # the config and convert dataclasses such as the table).
    factory = _instantiate(cfg.env, "env", _partial_=True)
    if cfg.get("data") is None:
        kwargs: dict[str, Any] = {"seeds": seeds}
    else:
        table, feats = load_features(cfg)
        rhos, seeds = trial_grid(_number_list(cfg, "rhos", float), seeds)
        kwargs = {"table": table, "rho": rhos, "seeds": seeds, "features": feats}
    try:
        env = factory(**kwargs, device=device, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"env: {exc}") from exc
    if not isinstance(env, Env):
        raise ConfigError(f"env built a {type(env).__name__}, not a torchroute.envs.Env")
    return env


def build_learner(
    node: DictConfig,
    problem: Problem,
    name: str,
    init_seed: int = 0,
    init_keys: torch.Tensor | None = None,
) -> Learner:
    """Instantiate one learner config: a factory (``_partial_: true``) called with ``problem``.

    Hyper-parameters are validated here, before anything of the run is written. The factory
    runs with torch's default generator seeded by ``init_seed`` (and restored afterwards), so
    the initial weights of a neural learner are the same in every run of a configuration.
    With ``init_keys`` (``[R]`` trial keys, :func:`~torchroute.functional.random.trial_keys`)
    the problem carries fresh per-trial streams (``Problem.init_rng``) instead, so each
    trial's initial weights do not depend on the trials built with it.
    """
    if "_target_" not in node:
        raise ConfigError(f"learners.{name} has no _target_ (see configs/learner/)")
    factory = _instantiate(node, f"learners.{name}")
    if not callable(factory) or isinstance(factory, Learner):
        raise ConfigError(
            f"learners.{name} must be a factory called with the Problem (a "
            "'<Learner>.from_problem' _target_ with _partial_: true)"
        )
    if init_keys is not None:
        problem = dataclasses.replace(problem, init_rng=TrialRNG(init_keys))
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            learner = factory(problem)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"learners.{name}: {exc}") from exc
    if not isinstance(learner, Learner):
        raise ConfigError(f"learners.{name} built a {type(learner).__name__}, not a Learner")
    return learner.to(problem.device)


def config_fingerprint(cfg: DictConfig) -> dict[str, Any]:
    """The configuration without the keys of ``cfg.runtime_keys`` (they leave numbers alone)."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    runtime = set(plain.get("runtime_keys") or ()) | {"runtime_keys"}
    return {k: v for k, v in plain.items() if k not in runtime}


def _digest(config: dict[str, Any]) -> str:
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_config(cfg: DictConfig) -> pd.DataFrame:
    """Run every configured learner on the configured env; write results under ``out_dir``.

    Everything is validated and built (table, env, every learner) before the first file
    is written. Writes ``results.csv`` (one row per learner x trial), ``curves.csv``,
    ``config.yaml``, ``fingerprint.json``, ``runs/<learner>/`` and
    ``checkpoints/<learner>.pt``; returns the results frame.

    With ``trial_chunk=C`` (needs ``rng=per_trial``) the trials run ``C`` at a time, each
    chunk with its own env (``Env.select_trials``) and learner. Under ``torchrun``
    (``WORLD_SIZE > 1``; needs ``rng=per_trial``) the process group is set up (gloo on the
    CPU, nccl on CUDA, one GPU per local rank), each rank runs a contiguous slice of the
    trials, and rank 0 gathers the results and alone writes files and logs; other ranks
    return the rows of their own trials. Both give the numbers of a single process.
    """
    _validate(cfg)
    ranks = Distributed.from_env()
    if ranks.world_size > 1 and cfg.get("rng", "shared") != "per_trial":
        raise ConfigError(
            f"torchrun (WORLD_SIZE={ranks.world_size}) shards the trials and needs "
            "rng=per_trial (with one shared generator a trial's numbers depend on the others)"
        )
    device = ranks.device(_device(str(cfg.get("device", "cpu"))))
    with ranks.group(device):
        return _run(cfg, ranks, device)


def _run(cfg: DictConfig, ranks: Distributed, device: torch.device) -> pd.DataFrame:
    out_dir = Path(str(cfg.out_dir))
    names = list(cfg.run_learners or cfg.learners)
    numbers = config_fingerprint(cfg)
    digest = _digest(numbers)
    overwrite = bool(cfg.get("overwrite", False))
    resume_name, resume_layout = ranks.on_rank0(
        lambda: (_check_out_dir(out_dir, digest, overwrite), _check_resume(cfg, numbers))[1]
    )
    env = ranks.rank0_first(lambda: build_env(cfg, device))
    chunk = cfg.get("trial_chunk")
    try:
        pieces = plan(env.num_trials, chunk, ranks.world_size, ranks.rank)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    job = Job(
        cfg=cfg,
        ranks=ranks,
        env=env,
        pieces=pieces,
        numbers=numbers,
        layout=layout(env.num_trials, chunk, ranks.world_size),
        digest=lambda name: _digest({**numbers, "learner": name}),
        build=functools.partial(_build, cfg),
        tracker=lambda name: _tracker(cfg, name, numbers),
        resume_name=resume_name,
    )
    if resume_name is not None and resume_layout != job.layout:
        raise CheckpointError(_layout_mismatch(cfg.resume, resume_layout, job.layout))
    try:
        first_env = job.piece_env(pieces[0])
    except NotImplementedError as exc:
        raise ConfigError(f"trial_chunk / torchrun: {exc}") from exc
    learners = {name: _build(cfg, name, first_env) for name in names}
    ranks.barrier()  # every rank validated before rank 0 writes
    if ranks.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        write_text_atomic(out_dir / "fingerprint.json", json.dumps({"config": digest}) + "\n")
        problem = first_env.problem()
        log.info(
            "%s: %d trials x %d rounds, d=%d, K=%d",
            type(env).__name__,
            env.num_trials,
            env.horizon,
            problem.dim,
            env.num_arms,
        )
    summaries, curves = [], []
    for name in names:
        reused = None
        if cfg.get("resume") and name != resume_name:
            reusable = functools.partial(_reusable, out_dir / "runs" / name, job.digest(name))
            reused = ranks.on_rank0(reusable)
        if reused is not None:
            summary, curve = reused
            learners.pop(name)
        else:
            summary, curve = run_learner(job, name, learners.pop(name))
        summaries.append(summary)
        curves.append(curve)
    results = pd.concat(summaries, ignore_index=True)
    if ranks.is_main:
        write_csv_atomic(out_dir / "results.csv", results)
        write_csv_atomic(out_dir / "curves.csv", pd.concat(curves, ignore_index=True))
    return results


def _build(cfg: DictConfig, name: str, env: Env) -> Learner:
    """Learner ``name`` for ``env``'s trials (per-trial initial streams with rng=per_trial)."""
    seed = int(cfg.get("loop_seed", 0))
    keys = None
    if cfg.get("rng", "shared") == "per_trial":
        keys = trial_keys(env.trials(), seed, stream="init")
    return build_learner(cfg.learners[name], env.problem(), name, seed, keys)


def _layout_mismatch(path: Any, stored: dict, current: dict) -> str:
    if stored["world_size"] != current["world_size"]:
        return (
            f"checkpoint {path} was written by a run of world size {stored['world_size']} "
            f"(torchrun processes), this run has {current['world_size']}; resume it with "
            f"world size {stored['world_size']}"
        )
    return (
        f"checkpoint {path} was written with trial_chunk={stored['trial_chunk']}, this run "
        f"splits its trials with trial_chunk={current['trial_chunk']}; resume it with "
        f"trial_chunk={stored['trial_chunk']}"
    )


def _read_digest(path: Path) -> str | None:
    try:
        return json.loads(path.read_text())["config"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _check_out_dir(out_dir: Path, digest: str, overwrite: bool) -> None:
    """Refuse an ``out_dir`` holding the results of another configuration (unless told)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"out_dir={str(out_dir)!r} exists and is not a folder")
    if overwrite or not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    stored = _read_digest(out_dir / "fingerprint.json")
    if stored == digest:
        return
    what = "another configuration" if stored else "files that are not a torchroute run"
    raise ConfigError(
        f"out_dir={str(out_dir)!r} holds the results of {what}; choose another out_dir, or "
        "pass overwrite=true to replace them"
    )


def _reusable(run_dir: Path, digest: str) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The finished results of ``run_dir`` when the same configuration wrote them."""
    files = [run_dir / "summary.csv", run_dir / "curve.csv"]
    if not all(f.is_file() for f in files):
        return None
    if _read_digest(run_dir / "fingerprint.json") != digest:
        log.warning("%s was written by another configuration: running it again", run_dir)
        return None
    return pd.read_csv(files[0]), pd.read_csv(files[1])


def _check_resume(cfg: DictConfig, numbers: dict) -> tuple[str | None, dict | None]:
    """Validate ``cfg.resume`` before anything is written; returns the learner it resumes
    and how the run that wrote it split its trials (see :func:`torchroute.pieces.layout`)."""
    if not cfg.get("resume"):
        return None, None
    payload = load_checkpoint(cfg.resume)
    stored = dict(payload.get("config", {}))
    name = stored.pop("learner", None)
    split = stored.pop("layout", {"world_size": 1, "trial_chunk": None})
    if stored != numbers or name not in (cfg.run_learners or cfg.learners):
        raise CheckpointError(
            f"checkpoint {cfg.resume} was written by another configuration (learner {name!r}); "
            "resume with the same experiment and overrides"
        )
    return name, split


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(
            f"device={name!r} is not a device; use cpu, cuda, cuda:N or auto"
        ) from exc
    if device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"device={name!r} is not supported; use cpu, cuda, cuda:N or auto")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={name!r} but CUDA is not available here; use device=cpu")
    return device


def _tracker(cfg: DictConfig, name: str, config: dict):
    if cfg.get("logger") is None:
        return NullTracker()
    factory = _instantiate(cfg.logger, "logger", _partial_=True)
    return factory(name=name, group=cfg.name, config={**config, "learner": name})
