"""Where the packaged configs live, and composing one with Hydra overrides."""

from __future__ import annotations

import importlib.resources
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig


def config_dir() -> Path:
    """The folder holding ``simulate.yaml`` and the config groups.

    The configs are the package data of ``torchroute.configs`` (the repository's
    ``configs/`` folder), found the same way in an editable and in a regular install.
    """
    return Path(str(importlib.resources.files("torchroute.configs")))


def compose_config(
    name: str, overrides: Sequence[str], directory: str | Path | None = None
) -> DictConfig:
    """Compose ``<name>.yaml`` with Hydra-style ``key=value`` overrides."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(
        config_dir=str(Path(directory or config_dir()).resolve()), version_base="1.3"
    ):
        return compose(config_name=name, overrides=list(overrides))


__all__ = ["compose_config", "config_dir"]
