"""``run_pretrain(cfg)``: pre-train the oracle heads with Lightning, write the artifact and metrics.

Outputs in ``out_dir``: ``oracle.pt`` (see :func:`torchroute.models.oracles.save_oracle`;
loads without Lightning), ``metrics.json`` (test-split figures, see :func:`oracle_metrics`),
``checkpoints/best.ckpt`` (Lightning), ``wandb/`` (offline run), and ``encoder/`` when the
encoder was fine-tuned.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from torch import Tensor

from torchroute.data.table import RoutingTable
from torchroute.io import write_text_atomic
from torchroute.models.embedding_cache import EmbeddingCache
from torchroute.models.encoders import TextEncoder, load_encoder
from torchroute.models.heads import MultiHeadOracle
from torchroute.models.oracles import load_oracle, save_oracle
from torchroute.trainers.datamodule import RoutingDataModule
from torchroute.trainers.oracle_module import OracleModule, unfreeze_top_layers

TRAINER_DEFAULTS = {
    "accelerator": "cpu",
    "devices": 1,
    "strategy": "auto",
    "precision": "32-true",
    "max_epochs": 100,
}
TRAIN_DEFAULTS = {
    "lr": 1e-4,
    "encoder_lr": 1e-5,
    "weight_decay": 0.0,
    "loss": "huber",
    "huber_delta": 1.0,
    "accuracy_weight": 1.0,
    "propagation_weight": 1.0,
    "cost_weight": 1.0,
    "batch_size": 128,
    "val_fraction": 0.1,
    "patience": 10,
    "unfreeze_layers": 0,
    "num_workers": 0,
}
ORACLE_DEFAULTS = {"feature_dim": 128, "hidden": 256, "dropout": 0.1, "init_from": None}


def _plain(node: Any) -> Any:
    """An OmegaConf node as plain containers (other values unchanged)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover - hydra-core is a dependency
        return node
    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    return node


def _section(cfg: Mapping, key: str, defaults: dict[str, Any]) -> dict[str, Any]:
    given = _plain(cfg.get(key)) or {}
    unknown = sorted(set(given) - set(defaults)) if key != "trainer" else []
    if unknown:
        raise ValueError(f"unknown {key} options {unknown}; known: {sorted(defaults)}")
    return {**defaults, **given}


def _instantiate(node: Any) -> Any:
    if isinstance(node, Mapping) or hasattr(node, "_target_"):
        from hydra.utils import instantiate

        return instantiate(node)
    return node


def resolve_encoder(
    node: Any, cache_dir: str | Path | None
) -> tuple[TextEncoder | None, EmbeddingCache | None]:
    """The encoder and cache from ``cfg.encoder``: ``None``, a hub name or path, a
    :class:`TextEncoder`, or a config that instantiates to either (or to the
    ``embed_table`` partial of ``configs/encoder/*.yaml``, whose keywords are used)."""
    obj = _instantiate(node)
    cache = EmbeddingCache(Path(cache_dir) / "embeddings") if cache_dir is not None else None
    if isinstance(obj, functools.partial):
        return obj.keywords.get("encoder"), obj.keywords.get("cache", cache)
    if isinstance(obj, (str, os.PathLike)):
        obj = load_encoder(obj)
    if obj is not None and not isinstance(obj, TextEncoder):
        raise TypeError(f"encoder must be a TextEncoder, a name or a path, got {type(obj)}")
    return obj, cache


def _logger(node: Any, out_dir: Path, name: str) -> Any:
    node = _plain(node)
    if node is False or node is None:
        return False
    if isinstance(node, Mapping) and "_target_" in node:
        return _instantiate(node)
    from lightning.pytorch.loggers import WandbLogger

    opts = {"project": "torchroute", "mode": "offline", "name": name, **dict(node)}
    mode = os.environ.get("WANDB_MODE", opts.pop("mode"))
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


def run_pretrain(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Pre-train a :class:`MultiHeadOracle` on a routing table; see the module docstring.

    Config keys: ``data`` (a RoutingTable or a ``_target_`` config), ``out_dir``,
    ``encoder`` (optional), ``cache_dir``, ``seed``, ``name``, ``oracle``
    (:data:`ORACLE_DEFAULTS`), ``train`` (:data:`TRAIN_DEFAULTS`), ``trainer``
    (:data:`TRAINER_DEFAULTS` plus any ``lightning.Trainer`` argument) and ``logger``
    (wandb options ``project/mode/name/group/tags/entity``, a ``_target_`` config, or
    ``null``/``false`` for none). Returns the metrics also written to ``metrics.json``
    (an empty dict on DDP ranks other than 0).
    """
    start = time.perf_counter()
    if cfg.get("out_dir") is None or cfg.get("data") is None:
        raise ValueError("run_pretrain needs cfg.data and cfg.out_dir")
    out_dir = Path(str(cfg["out_dir"])).expanduser()
    train, oc = _section(cfg, "train", TRAIN_DEFAULTS), _section(cfg, "oracle", ORACLE_DEFAULTS)
    trainer_opts = _section(cfg, "trainer", TRAINER_DEFAULTS)
    L.seed_everything(int(cfg.get("seed", 0)), workers=True, verbose=False)
    table = _instantiate(cfg["data"])
    if not isinstance(table, RoutingTable):
        raise TypeError(f"cfg.data must give a RoutingTable, got {type(table).__name__}")
    encoder, cache = resolve_encoder(cfg.get("encoder"), cfg.get("cache_dir"))
    finetune = int(train["unfreeze_layers"]) > 0
    dm = RoutingDataModule(
        table,
        encoder,
        cache,
        finetune=finetune,
        batch_size=int(train["batch_size"]),
        val_fraction=float(train["val_fraction"]),
        seed=int(cfg.get("seed", 0)),
        num_workers=int(train["num_workers"]),
    )
    if finetune:
        unfreeze_top_layers(encoder.model, int(train["unfreeze_layers"]))
    encoder_name = encoder.name if encoder is not None else cfg.get("encoder_name")
    if oc["init_from"]:
        oracle = load_oracle(oc["init_from"], arm_names=table.arm_names, embed_dim=dm.embed_dim)
    else:
        oracle = MultiHeadOracle(
            dm.embed_dim,
            table.num_arms,
            int(oc["feature_dim"]),
            int(oc["hidden"]),
            float(oc["dropout"]),
            table.arm_names,
            encoder_name,
        )
        oracle.cost_head.set_normalization(dm.train_costs())
    module = OracleModule(
        oracle,
        encoder if finetune else None,
        **{
            k: train[k]
            for k in (
                "lr",
                "encoder_lr",
                "weight_decay",
                "loss",
                "huber_delta",
                "accuracy_weight",
                "propagation_weight",
                "cost_weight",
            )
        },
    )
    ckpt = ModelCheckpoint(
        dirpath=out_dir / "checkpoints",
        filename="best",
        monitor="val/loss",
        mode="min",
        save_top_k=1,
        enable_version_counter=False,
    )
    early = EarlyStopping(monitor="val/loss", mode="min", patience=int(train["patience"]))
    logger = _logger(cfg.get("logger", {}), out_dir, str(cfg.get("name") or "pretrain"))
    trainer = L.Trainer(
        default_root_dir=str(out_dir), logger=logger, callbacks=[ckpt, early], **trainer_opts
    )
    trainer.fit(module, datamodule=dm)
    if ckpt.best_model_path:
        state = torch.load(ckpt.best_model_path, map_location="cpu", weights_only=False)
        module.load_state_dict(state["state_dict"])
    trainer.test(module, datamodule=dm, verbose=False)
    metrics: dict[str, Any] = {}
    if trainer.is_global_zero:
        metrics = _finish(module, dm, out_dir, finetune, trainer, ckpt, start)
    if logger:
        if metrics and hasattr(logger, "log_metrics"):
            logger.log_metrics(
                {f"test/{k}": v for k, v in metrics.items() if isinstance(v, (int, float))}
            )
        experiment = getattr(logger, "experiment", None)
        if hasattr(experiment, "finish"):
            experiment.finish()
    return metrics


def _finish(
    module: OracleModule,
    dm: RoutingDataModule,
    out_dir: Path,
    finetune: bool,
    trainer: L.Trainer,
    ckpt: ModelCheckpoint,
    start: float,
) -> dict[str, Any]:
    """Rank 0: test metrics, the artifact (and the fine-tuned encoder), ``metrics.json``."""
    oracle = module.oracle.cpu().eval()
    table = dm.embedded_table
    test = torch.as_tensor(table.rows("test"))
    if finetune:
        encoder = module.encoder.cpu()
        enc_dir = out_dir / "encoder"
        encoder.model.save_pretrained(enc_dir)
        encoder.tokenizer.save_pretrained(enc_dir)
        oracle.encoder_name = str(enc_dir.resolve())
        embeddings = encoder.encode([table.text[i] for i in test.tolist()], progress=False)
    else:
        embeddings = table.embeddings[test]
    train_mean = table.scores[torch.as_tensor(table.rows("train"))].mean(0)
    metrics: dict[str, Any] = oracle_metrics(
        oracle, embeddings, table.scores[test], table.costs[test], train_mean
    )
    best = ckpt.best_model_score
    metrics.update(
        {
            "best_val_loss": float(best) if best is not None else None,
            "epochs": int(trainer.current_epoch),
            "num_train": len(table.rows("train")),
            "num_val": len(table.rows("val")),
            "wall_time_s": round(time.perf_counter() - start, 2),
        }
    )
    save_oracle(oracle, out_dir / "oracle.pt", extra={"metrics": metrics, "source": table.source})
    write_text_atomic(out_dir / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    return metrics


def load_or_pretrain(checkpoint: str | Path | None, config: Mapping[str, Any]) -> MultiHeadOracle:
    """The oracle saved at ``checkpoint`` (an ``oracle.pt`` or the folder holding it), or,
    when ``checkpoint`` is ``None``, a fresh one pre-trained with :func:`run_pretrain`
    on ``config`` (its ``out_dir`` receives the artifact).

    Lets a simulation config name ``oracle_ckpt=<pretrain out_dir>`` or pre-train first.
    """
    if checkpoint is None:
        run_pretrain(config)
        checkpoint = Path(str(config["out_dir"]))
    path = Path(str(checkpoint))
    return load_oracle(path / "oracle.pt" if path.is_dir() else path)
