"""One pre-training per process for configs that name the same oracle several times.

A CABS preset reads the oracle in several places (the ``oracle`` feature source and each
CABS learner); with ``oracle_ckpt: null`` each ``load_or_pretrain`` node would pre-train
its own copy. :func:`shared_oracle` pre-trains once per distinct pretrain config in this
process and loads the artifact it wrote for the later nodes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from torchroute.models import MultiHeadOracle
from torchroute.trainers.pretrain import load_or_pretrain

_PRETRAINED: dict[str, Path] = {}


def shared_oracle(
    checkpoint: str | Path | None,
    config: Mapping[str, Any] | None = None,
    arm_names: Sequence[str] | None = None,
    embed_dim: int | None = None,
) -> MultiHeadOracle:
    """:func:`~torchroute.trainers.load_or_pretrain`, pre-training at most once per config.

    Args and errors as :func:`~torchroute.trainers.load_or_pretrain`.
    """
    if checkpoint is None and config is not None:
        plain = (
            OmegaConf.to_container(config, resolve=True)
            if isinstance(config, DictConfig)
            else dict(config)
        )
        key = json.dumps(plain, sort_keys=True, default=str)
        if key in _PRETRAINED:
            checkpoint = _PRETRAINED[key]
        else:
            oracle = load_or_pretrain(None, plain, arm_names, embed_dim)
            _PRETRAINED[key] = Path(str(plain["out_dir"])).expanduser()
            return oracle
    return load_or_pretrain(checkpoint, config, arm_names, embed_dim)
