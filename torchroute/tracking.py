"""Experiment tracking: wandb (offline by default) behind a two-method interface."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, Protocol

import pandas as pd


class Tracker(Protocol):
    """What the loop needs from a tracker."""

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def log_table(self, name: str, frame: pd.DataFrame) -> None: ...

    def finish(self) -> None: ...


class NullTracker:
    """Logs nothing."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        pass

    def log_table(self, name: str, frame: pd.DataFrame) -> None:
        pass

    def finish(self) -> None:
        pass


class WandbTracker:
    """One wandb run: config, metrics every logging interval, final tables.

    Offline by default: runs land in ``<dir>/wandb/offline-run-*`` and need no account or
    network; upload them later with ``wandb sync <dir>/wandb/offline-run-*``. Set
    ``mode="online"`` (and ``WANDB_API_KEY`` or ``wandb login``) to stream live.
    ``WANDB_MODE`` in the environment wins over ``mode``.

    Args:
        project: wandb project.
        mode: ``"offline"``, ``"online"`` or ``"disabled"``.
        dir: directory that receives the ``wandb/`` folder.
        name: run name.
        group: run group (one experiment groups the runs of its learners).
        config: the run's configuration (a plain dict).
        tags: run tags.
        entity: wandb entity (team or user) for online runs.
    """

    def __init__(
        self,
        project: str = "torchroute",
        mode: Literal["offline", "online", "disabled"] = "offline",
        dir: str | Path = ".",
        name: str | None = None,
        group: str | None = None,
        config: dict[str, Any] | None = None,
        tags: list[str] | None = None,
        entity: str | None = None,
    ) -> None:
        import wandb  # imported lazily: the core does not need wandb to import

        Path(dir).mkdir(parents=True, exist_ok=True)
        self._wandb = wandb
        self.run = wandb.init(
            project=project,
            entity=entity,
            mode=os.environ.get("WANDB_MODE", mode),
            dir=str(dir),
            name=name,
            group=group,
            config=config,
            tags=tags,
            reinit="create_new",
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def log_table(self, name: str, frame: pd.DataFrame) -> None:
        self.run.log({name: self._wandb.Table(dataframe=frame)})

    def finish(self) -> None:
        self.run.finish()
