"""Offline pre-training with Lightning (the only package that imports Lightning)."""

from torchroute.trainers.datamodule import RoutingDataModule
from torchroute.trainers.oracle_module import OracleModule, unfreeze_top_layers
from torchroute.trainers.pretrain import load_or_pretrain, oracle_metrics, run_pretrain

__all__ = [
    "OracleModule",
    "RoutingDataModule",
    "load_or_pretrain",
    "oracle_metrics",
    "run_pretrain",
    "unfreeze_top_layers",
]
