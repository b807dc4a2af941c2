"""``run_pretrain(cfg)``: pre-train the oracle heads with Lightning, write the artifact and metrics.

(Over 400 lines: one pipeline, table -> encoder -> Lightning fit -> artifact, kept in one
place; the table and the encoder config are read by the run's build path,
:mod:`torchroute.run.build`.)

Outputs in ``out_dir``: ``oracle.pt`` (see :func:`torchroute.models.oracles.save_oracle`;
loads without Lightning), ``metrics.json`` (test-split figures, see :func:`oracle_metrics`),
``checkpoints/best.ckpt`` (Lightning), ``wandb/`` (offline run), and ``encoder/`` when the
encoder was fine-tuned.

Configuration: the sections ``oracle``, ``module``, ``data_module`` and ``trainer`` of
``configs/pretrain.yaml`` are ``_target_`` nodes built with ``hydra.utils.instantiate`` (as
partials completed with what only the run knows: the table, the encoder, the oracle, the
callbacks), so the constructors' signatures are the schema and no default is repeated here.
A given config is merged over the packaged file (:func:`resolve_config`), and an unknown
option is refused by name before anything runs.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import pydoc
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from torch import Tensor

from torchroute.buildable import buildable
from torchroute.data.table import RoutingTable, TableError
from torchroute.errors import UserError
from torchroute.functional.threads import intra_op_threads
from torchroute.io import write_text_atomic
from torchroute.models.embedding_cache import EmbeddingCache
from torchroute.models.encoders import TextEncoder, load_encoder
from torchroute.models.heads import MultiHeadOracle
from torchroute.models.oracles import load_oracle, save_oracle
from torchroute.run.build import instantiate_node, instantiate_table
from torchroute.trainers.datamodule import RoutingDataModule
from torchroute.trainers.oracle_module import OracleModule, unfreeze_top_layers
from torchroute.trainers.oracle_quality import CooccurrenceTable, predictor_table, surrogate_quality
from torchroute.trainers.pretrain_checks import check_values

__all__ = [
    "SECTIONS",
    "PretrainConfigError",
    "load_or_pretrain",
    "oracle_metrics",
    "packaged_config",
    "resolve_config",
    "resolve_encoder",
    "run_pretrain",
]

#: the config sections run_pretrain builds; a given section is merged over the packaged one
SECTIONS = ("oracle", "module", "data_module", "train", "metrics", "trainer", "logger")
#: sections without a ``_target_``: their keys are checked against the packaged file
_PLAIN_SECTIONS = ("train", "metrics")
log = logging.getLogger(__name__)
#: arguments run_pretrain passes itself when it builds a section (refused in the config)
_RUNTIME = {
    "oracle": ("embed_dim", "num_arms", "arm_names", "encoder_name"),
    "module": ("oracle", "encoder"),
    "data_module": ("table", "encoder", "cache", "finetune", "seed"),
    "trainer": ("default_root_dir", "logger", "callbacks"),
}


class PretrainConfigError(UserError, ValueError):
    """A pretrain config names an option its section does not take, or cannot be built."""


def _plain(node: Any) -> Any:
    """An OmegaConf node as plain containers, interpolations resolved (other values as is)."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    return node


def packaged_config() -> dict[str, Any]:
    """The packaged ``configs/pretrain.yaml`` as plain containers, without its ``defaults``
    list (``data`` and ``encoder`` are the caller's): the defaults of every section."""
    from omegaconf import OmegaConf

    from torchroute.configs_path import config_dir

    node = OmegaConf.load(config_dir() / "pretrain.yaml")
    node.pop("defaults", None)
    return OmegaConf.to_container(node, resolve=True)


def _merge(base: Any, given: Any) -> Any:
    """``given`` over ``base``, recursively for mappings; a node naming another ``_target_``
    replaces the base node instead of being merged into it."""
    if not isinstance(base, dict) or not isinstance(given, Mapping):
        return given
    if "_target_" in given and given["_target_"] != base.get("_target_"):
        return dict(given)
    out = dict(base)
    for key, value in given.items():
        out[key] = _merge(out.get(key), value)
    return out


def resolve_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` merged over :func:`packaged_config`, with its options checked.

    Sections (:data:`SECTIONS`) are merged key by key, so ``{"module": {"lr": 1e-3}}`` keeps
    the packaged loss; ``data`` and ``encoder`` (objects or ``_target_`` configs) are taken
    as given. Each ``_target_`` section is checked against its target's signature and
    ``train`` against the packaged keys.

    Raises:
        PretrainConfigError: an unknown option (named as ``section.key``), an option that
            run_pretrain sets itself, or a ``_target_`` that cannot be imported.
    """
    base = packaged_config()
    out: dict[str, Any] = {}
    for key in dict.fromkeys([*base, *cfg]):
        if key not in cfg:
            out[key] = base[key]
        elif key in SECTIONS:
            given = _plain(cfg[key])
            out[key] = None if given in (None, False) else _merge(base.get(key), given)
        else:
            out[key] = cfg[key]  # data / encoder: instantiated later, interpolations intact
            if key not in ("data", "encoder"):
                out[key] = _plain(out[key])
    _check_options(out, base)
    return out


def _target(section: str, node: Mapping[str, Any]) -> Any:
    """The callable a section's ``_target_`` names (``pydoc.locate``: no error logging)."""
    path = str(node["_target_"])
    try:
        target = pydoc.locate(path)
    except pydoc.ErrorDuringImport as exc:
        reason = " ".join(str(exc.value).split())
        msg = f"cfg.{section}._target_: importing {path!r} failed: {reason}"
        raise PretrainConfigError(msg) from exc.value
    if not callable(target):
        raise PretrainConfigError(f"cfg.{section}._target_: cannot import {path!r}")
    return target


def _check_options(cfg: Mapping[str, Any], base: Mapping[str, Any]) -> None:
    accepts: dict[str, set[str] | None] = {}  # section -> parameter names (None: **kwargs)
    for section in SECTIONS:
        node = cfg.get(section)
        if isinstance(node, Mapping) and "_target_" in node:
            params = inspect.signature(_target(section, node)).parameters.values()
            if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
                accepts[section] = None
            else:
                accepts[section] = {p.name for p in params} - set(_RUNTIME.get(section, ()))
        elif section in _PLAIN_SECTIONS and isinstance(node, Mapping):
            accepts[section] = set(base[section])
    for section, known in accepts.items():
        keys = [k for k in cfg[section] if not str(k).startswith("_")]
        for key in keys:
            if key in _RUNTIME.get(section, ()):
                raise PretrainConfigError(
                    f"cfg.{section}.{key} is set by run_pretrain (from the data, the encoder "
                    "and out_dir); remove it from the config"
                )
            if known is not None and key not in known:
                elsewhere = [s for s, k in accepts.items() if k is not None and key in k]
                hint = f"; did you mean {elsewhere[0]}.{key}?" if elsewhere else ""
                raise PretrainConfigError(
                    f"unknown option {section}.{key} ({cfg[section].get('_target_', section)} "
                    f"takes {sorted(known)}){hint}"
                )


def _build(cfg: Mapping[str, Any], section: str, **runtime: Any) -> Any:
    """Instantiate ``cfg[section]`` (as a partial) and call it with ``runtime`` arguments."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        factory = instantiate(cfg[section], _partial_=True)
    except InstantiationException as exc:
        reason = " ".join(str(exc).split())
        raise PretrainConfigError(f"cannot build cfg.{section}: {reason}") from exc
    return factory(**runtime)


def _quiet_trainer(trainer: Mapping[str, Any]) -> dict[str, bool]:
    """Lightning's progress bar, model summary and INFO lines off unless debug logging is
    on (the CLI's ``-v``) or the ``trainer`` config sets them: the figures go to
    metrics.json."""
    if logging.getLogger("torchroute").isEnabledFor(logging.DEBUG):
        return {}
    # Lightning sets its loggers to INFO when imported, with a console handler of its own
    for name in ("lightning.pytorch", "lightning.fabric", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    keys = ("enable_progress_bar", "enable_model_summary")
    return {key: False for key in keys if key not in trainer}


def resolve_encoder(
    node: Any, cache_dir: str | Path | None
) -> tuple[TextEncoder | None, EmbeddingCache | None]:
    """The encoder and cache from ``cfg.encoder``: ``None``, a hub name or path, a
    :class:`TextEncoder`, or a config that instantiates to either (or to the
    ``embed_table`` partial of ``configs/encoder/*.yaml``, whose keywords are used)."""
    # a config node is built as the run builds its encoder (moved targets, errors by key)
    configured = isinstance(node, Mapping) or hasattr(node, "_target_")
    obj = instantiate_node(node, "encoder") if configured else node
    cache = EmbeddingCache(Path(cache_dir) / "embeddings") if cache_dir is not None else None
    if isinstance(obj, functools.partial):
        return obj.keywords.get("encoder"), obj.keywords.get("cache", cache)
    if isinstance(obj, (str, os.PathLike)):
        obj = load_encoder(obj)
    if obj is not None and not isinstance(obj, TextEncoder):
        raise TypeError(f"encoder must be a TextEncoder, a name or a path, got {type(obj)}")
    return obj, cache


def _wandb_mode(mode: str) -> str:
    """The effective wandb mode; process-wide offline settings via the tracking module."""
    from torchroute.tracking import configure_wandb

    return configure_wandb(mode)


def _logger(cfg: Mapping[str, Any], out_dir: Path, name: str) -> Any:
    """The Lightning logger of ``cfg.logger``: ``False`` for none, a ``_target_`` config
    instantiated, else ``WandbLogger`` options (offline unless ``mode: online``)."""
    node = cfg.get("logger")
    if node is False or node is None:
        return False
    if "_target_" in node:
        return _build(cfg, "logger")
    from lightning.pytorch.loggers import WandbLogger

    opts = {"name": name, **node}
    mode = _wandb_mode(str(opts.pop("mode", "offline")))
    return WandbLogger(
        save_dir=str(out_dir),
        offline=mode == "offline",
        reinit="create_new",
        **({"mode": mode} if mode == "disabled" else {}),
        **opts,
    )


@torch.no_grad()
def oracle_metrics(
    oracle: MultiHeadOracle, embeddings: Tensor, scores: Tensor, costs: Tensor, train_mean: Tensor
) -> dict[str, float]:
    """Test-split figures of a trained oracle.

    Args:
        oracle: the oracle (put in eval mode).
        embeddings: ``[n, d_e]``; scores, costs: ``[n, K]``.
        train_mean: per-arm mean train score ``[K]`` (the baseline predictor).

    Returns:
        ``accuracy_mae`` and ``baseline_mae`` (per-arm-mean predictor), ``cost_mre`` (mean of
        ``|c^ - c| / c`` over cells with ``c > 0``), ``propagation_corr`` (Pearson of
        ``y_i + delta^_j`` vs ``Y[x, j]`` over all queries and ordered pairs ``i != j``) and
        ``anchor_corr`` (Pearson of ``y_i`` vs ``Y[x, j]`` over the same pairs).
    """
    oracle.eval()
    scores, costs = scores.float(), costs.float()
    n, k = scores.shape
    out = oracle(embeddings.float())
    c_hat = out["cost"]
    pos = costs > 0
    anchor = torch.arange(k).repeat(n)
    rows = scores.repeat_interleave(k, 0)  # [n*K, K]
    y_anchor = rows.gather(1, anchor[:, None])[:, 0]
    delta = oracle.propagation(embeddings.float().repeat_interleave(k, 0), anchor, y_anchor)
    off = torch.arange(k) != anchor[:, None]
    target = rows[off]

    def pearson(a: Tensor) -> float:
        return float(torch.corrcoef(torch.stack([a, target]))[0, 1])

    return {
        "accuracy_mae": float((out["accuracy"] - scores).abs().mean()),
        "baseline_mae": float((train_mean.float() - scores).abs().mean()),
        "cost_mre": float(((c_hat - costs).abs() / costs.clamp_min(1e-12))[pos].mean()),
        "propagation_corr": pearson((y_anchor[:, None] + delta)[off]),
        "anchor_corr": pearson(y_anchor[:, None].expand(-1, k)[off]),
        "num_test": n,
    }


def hide_arms(table: RoutingTable, names: Sequence[str]) -> RoutingTable:
    """``table`` with the scores of the models ``names`` set to 0 in every row (their costs
    kept): what an oracle pre-trained before those models existed knows of them (nothing
    but their price), as a scenario's new model in the problem's train split.

    Raises:
        PretrainConfigError: a name that is not a model of the table.
    """
    if not names:
        return table
    unknown = [n for n in names if n not in table.arm_names]
    if unknown:
        raise PretrainConfigError(
            f"cfg.hide_arms: no model {unknown[0]!r} in {table.source} (models: "
            f"{', '.join(table.arm_names)})"
        )
    hidden = torch.tensor([n in names for n in table.arm_names])
    return replace(table, scores=table.scores.masked_fill(hidden, 0.0))


def run_pretrain(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Pre-train a :class:`MultiHeadOracle` on a routing table; see the module docstring.

    ``cfg`` is merged over the packaged ``configs/pretrain.yaml`` (see
    :func:`resolve_config`), so a plain dict needs only ``data`` and ``out_dir``. Keys:
    ``data`` (a RoutingTable or a ``_target_`` config), ``out_dir``, ``encoder`` (optional:
    a :class:`TextEncoder`, a name or path, or a config), ``cache_dir``, ``seed``, ``name``,
    ``hide_arms`` (models whose scores the oracle never sees, :func:`hide_arms`), and the
    sections ``oracle`` (:class:`MultiHeadOracle`), ``module``
    (:class:`OracleModule`), ``data_module`` (:class:`RoutingDataModule`), ``trainer``
    (``lightning.Trainer``) -- ``_target_`` configs whose other arguments run_pretrain
    passes itself -- ``train`` (``patience``, ``unfreeze_layers``, ``init_from``,
    ``prior``: the pseudo-count of a co-occurrence propagation head,
    ``threads``: the torch intra-op thread count the whole run uses, restored after; ``None``
    keeps the caller's), ``metrics`` (``rhos``, ``clusters``, ``prior`` of the surrogate
    figures, see :mod:`torchroute.trainers.oracle_quality`) and
    ``logger`` (wandb options ``project/mode/group/tags/entity``, a ``_target_`` config,
    or ``null``/``false`` for none).

    Returns:
        the metrics also written to ``metrics.json`` (an empty dict on DDP ranks other
        than 0).

    Raises:
        PretrainConfigError: an unknown or misplaced option, named as ``section.key``.
    """
    start = time.perf_counter()
    if cfg.get("out_dir") is None or cfg.get("data") is None:
        raise ValueError("run_pretrain needs cfg.data and cfg.out_dir")
    cfg = resolve_config(cfg)
    check_values(cfg)
    threads = cfg["train"].get("threads")
    if threads is not None:
        log.debug(
            "pretrain: fitting on %d torch intra-op thread(s) (train.threads; the caller's "
            "setting, %d, is restored after), so the weights do not depend on it",
            threads,
            torch.get_num_threads(),
        )
    with intra_op_threads(threads):
        return _run(cfg, start)


def _run(cfg: dict[str, Any], start: float) -> dict[str, Any]:
    """:func:`run_pretrain` after its config checks, inside the fixed thread count."""
    out_dir = Path(str(cfg["out_dir"])).expanduser()
    train, seed = cfg["train"], int(cfg["seed"])
    L.seed_everything(seed, workers=True, verbose=False)
    table = instantiate_table(cfg["data"])  # as simulate reads its data
    if table.num_arms < 2:  # as simulate: an oracle of one arm routes nothing
        raise TableError(
            f"data: {table.source} has {table.num_arms} arm {list(table.arm_names)}; an oracle "
            "routes between models: give a table of at least 2"
        )
    table = hide_arms(table, cfg.get("hide_arms") or [])
    encoder, cache = resolve_encoder(cfg.get("encoder"), cfg.get("cache_dir"))
    finetune = int(train["unfreeze_layers"]) > 0
    dm = _build(
        cfg, "data_module", table=table, encoder=encoder, cache=cache, finetune=finetune, seed=seed
    )
    if finetune:
        unfreeze_top_layers(encoder.model, int(train["unfreeze_layers"]))
    if train["init_from"]:
        oracle = load_oracle(train["init_from"], arm_names=table.arm_names, embed_dim=dm.embed_dim)
    else:
        oracle = _build(
            cfg,
            "oracle",
            embed_dim=dm.embed_dim,
            num_arms=table.num_arms,
            arm_names=table.arm_names,
            encoder_name=encoder.name if encoder is not None else cfg.get("encoder_name"),
        )
        oracle.cost_head.set_normalization(dm.train_costs())
        if oracle.propagation_output == "cooccurrence":
            if finetune:
                raise PretrainConfigError(
                    "oracle.propagation=cooccurrence counts on the frozen embeddings; it "
                    "cannot be combined with train.unfreeze_layers > 0"
                )
            fit = torch.as_tensor(dm.rows("fit"))
            table = dm.embedded_table
            oracle.propagation_head.fit(
                table.embeddings[fit], table.scores[fit], float(train["prior"]), seed
            )
    module = _build(cfg, "module", oracle=oracle, encoder=encoder if finetune else None)
    ckpt = ModelCheckpoint(
        dirpath=out_dir / "checkpoints",
        filename="best",
        monitor="val/loss",
        mode="min",
        save_top_k=1,
        enable_version_counter=False,
    )
    early = EarlyStopping(monitor="val/loss", mode="min", patience=int(train["patience"]))
    logger = _logger(cfg, out_dir, str(cfg.get("name") or "pretrain"))
    trainer = _build(
        cfg,
        "trainer",
        default_root_dir=str(out_dir),
        logger=logger,
        callbacks=[ckpt, early],
        **_quiet_trainer(cfg["trainer"]),
    )
    trainer.fit(module, datamodule=dm)
    if ckpt.best_model_path:
        # weights_only=True works: Lightning's checkpoint holds tensors and plain containers
        # (the module's hparams are plain scalars: sections are plain dicts before instantiate).
        state = torch.load(ckpt.best_model_path, map_location="cpu", weights_only=True)
        module.load_state_dict(state["state_dict"])
    trainer.test(module, datamodule=dm, verbose=False)
    metrics: dict[str, Any] = {}
    if trainer.is_global_zero:
        metrics = _finish(module, dm, out_dir, finetune, trainer, ckpt, start, cfg["metrics"])
    if logger:
        if metrics and hasattr(logger, "log_metrics"):
            logger.log_metrics({f"test/{k}": v for k, v in _flat(metrics).items()})
        experiment = getattr(logger, "experiment", None)
        if hasattr(experiment, "finish"):
            experiment.finish()
    return metrics


def _flat(tree: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Numbers of a nested dict under ``a/b/c`` keys (for the logger)."""
    out: dict[str, float] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}/"))
        elif isinstance(value, (int, float)):
            out[f"{prefix}{key}"] = float(value)
    return out


def _finish(
    module: OracleModule,
    dm: RoutingDataModule,
    out_dir: Path,
    finetune: bool,
    trainer: L.Trainer,
    ckpt: ModelCheckpoint,
    start: float,
    quality: Mapping[str, Any],
) -> dict[str, Any]:
    """Rank 0: test metrics, the artifact (and the fine-tuned encoder), ``metrics.json``."""
    oracle = module.oracle.cpu().eval()
    table = dm.embedded_table
    held_out = ["val", "test"] if dm.has_split("val") else ["test"]
    if finetune:
        encoder = module.encoder.cpu()
        enc_dir = out_dir / "encoder"
        encoder.model.save_pretrained(enc_dir)
        encoder.tokenizer.save_pretrained(enc_dir)
        oracle.encoder_name = str(enc_dir.resolve())

    def embed(rows: Any) -> Tensor:
        if finetune:
            return encoder.encode([table.text[i] for i in rows.tolist()], progress=False)
        return table.embeddings[rows]

    fit = torch.as_tensor(dm.rows("fit"))
    train_mean = table.scores[fit].mean(0)
    test = torch.as_tensor(dm.rows("test"))
    emb = {split: embed(torch.as_tensor(dm.rows(split))) for split in held_out}
    metrics: dict[str, Any] = oracle_metrics(
        oracle, emb["test"], table.scores[test], table.costs[test], train_mean
    )
    cooc = CooccurrenceTable(
        embed(fit), table.scores[fit], int(quality["clusters"]), float(quality["prior"])
    )
    surrogates: dict[str, Any] = {
        "cost": "the oracle's cost head, for every predictor (as CABS-C)",
        "rhos": list(quality["rhos"]),
        "cooccurrence_clusters": int(quality["clusters"]),
    }
    for split in held_out:
        rows = torch.as_tensor(dm.rows(split))
        with torch.no_grad():
            cost_used = oracle.cost(emb[split].float())
        preds = predictor_table(oracle, emb[split], table.scores[rows], train_mean, cooc)
        surrogates[split] = {
            "num_queries": len(rows),
            **surrogate_quality(
                preds, table.scores[rows], table.costs[rows], cost_used, quality["rhos"]
            ),
        }
    best = ckpt.best_model_score
    metrics.update(
        {
            "surrogates": surrogates,
            "best_val_loss": float(best) if best is not None else None,
            "epochs": int(trainer.current_epoch),
            "num_train": len(dm.rows("fit")),
            "num_early_stopping": len(dm.rows("early_stopping")),
            "num_val": len(dm.rows("val")) if dm.has_split("val") else 0,
            "threads": torch.get_num_threads(),
            "wall_time_s": round(time.perf_counter() - start, 2),
        }
    )
    save_oracle(oracle, out_dir / "oracle.pt", extra={"metrics": metrics, "source": table.source})
    write_text_atomic(out_dir / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    return metrics


#: pretrain configs already trained in this process -> the folder holding their artifact
_PRETRAINED: dict[str, Path] = {}


def _pretrain_key(config: Mapping[str, Any]) -> str:
    """What an oracle was trained from: the config, and the size and modification time of
    the data file it names (a changed file trains again)."""
    plain = _plain(config)
    path = (plain.get("data") or {}).get("path") if isinstance(plain.get("data"), dict) else None
    stat = None
    if path is not None and Path(str(path)).exists():
        info = Path(str(path)).stat()
        stat = [info.st_size, info.st_mtime_ns]
    return json.dumps({"config": plain, "data_file": stat}, sort_keys=True, default=str)


@buildable
def load_or_pretrain(
    checkpoint: str | Path | None,
    config: Mapping[str, Any] | None = None,
    arm_names: Sequence[str] | None = None,
    embed_dim: int | None = None,
    hide_arms: Sequence[str] = (),
) -> MultiHeadOracle:
    """The oracle saved at ``checkpoint``, or one pre-trained on ``config`` first.

    Lets a simulation config name ``oracle_ckpt=<pretrain out_dir>`` or pre-train first
    (``configs/learner/regressor.yaml``).

    Args:
        checkpoint: an ``oracle.pt`` or the folder holding it; ``None`` runs
            :func:`run_pretrain` on ``config`` and loads what it wrote to ``config.out_dir``.
        config: a pretrain config; given keys are merged over the packaged
            ``configs/pretrain.yaml``, so ``{name, out_dir, data, encoder, cache_dir}`` is
            enough.
        arm_names: the caller's arms; an oracle trained for others is refused.
        embed_dim: the caller's embedding size; an oracle reading another is refused.
        hide_arms: models the oracle must not know (a scenario's new models, which the run
            passes here): pre-training reads their scores as 0 (``config.hide_arms``,
            :func:`hide_arms`). An oracle loaded from ``checkpoint`` is used as it is, with
            a warning.

    A config names the same oracle in several places (the ``oracle`` feature source and
    each learner that reads it): a pretrain config is trained at most once per process,
    later calls load the artifact it wrote. Across processes the artifact is cached too:
    ``out_dir/pretrain_key.json`` records the config it was trained on (with the size and
    modification time of a ``data.path`` file), and a later call with the same config loads
    ``out_dir/oracle.pt`` instead of training again.

    Raises:
        OracleArtifactError: no artifact, not an artifact, or other arms / embedding size.
    """
    if hide_arms and checkpoint is not None:
        log.warning(
            "the scenario's new models (%s) are not hidden from the oracle loaded from %s: it "
            "was pre-trained outside this run",
            ", ".join(hide_arms),
            checkpoint,
        )
    if checkpoint is None:
        if config is None or config.get("out_dir") is None:
            raise ValueError("load_or_pretrain needs a checkpoint or a config with out_dir")
        if hide_arms:
            config = {**_plain(config), "hide_arms": list(hide_arms)}
        key = _pretrain_key(config)
        if key not in _PRETRAINED:
            out_dir = Path(str(config["out_dir"])).expanduser()
            stamp = out_dir / "pretrain_key.json"
            cached = (out_dir / "oracle.pt").is_file() and stamp.is_file()
            if not (cached and stamp.read_text() == key + "\n"):
                run_pretrain(config)
                write_text_atomic(stamp, key + "\n")
            _PRETRAINED[key] = out_dir
        checkpoint = _PRETRAINED[key]
    path = Path(str(checkpoint))
    return load_oracle(
        path / "oracle.pt" if path.is_dir() else path, arm_names=arm_names, embed_dim=embed_dim
    )
