"""Experiment tracking: wandb (offline by default) behind a two-method interface."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Literal, Protocol

import pandas as pd

from torchroute.errors import OptionError

MODES = ("online", "offline", "disabled")
# Modes wandb itself reads from WANDB_MODE; "dryrun" is its old name for "offline".
_ENV_MODES = (*MODES, "dryrun", "run", "shared")
_LOCAL_MODES = ("offline", "disabled", "dryrun")

# Environment variables that keep every wandb process (this one, wandb-core, the system
# monitor, and runs started by other code such as Lightning's WandbLogger) off the network:
# no error reports to wandb's Sentry, no system-stats sampler (it probes cloud metadata
# endpoints), no machine-info probes, no update check or early viewer query.
# ``WANDB__X`` sets wandb's private setting ``x_x``; a name the installed wandb lacks
# (0.31 has no ``x_disable_update_check``) is ignored by it.
_LOCAL_ENV = {
    "WANDB_ERROR_REPORTING": "false",
    "WANDB__DISABLE_STATS": "true",
    "WANDB__DISABLE_MACHINE_INFO": "true",
    "WANDB__DISABLE_UPDATE_CHECK": "true",
    "WANDB__DISABLE_VIEWER": "true",
}
# The same as wandb.Settings fields (each passed only where the installed wandb has it).
_LOCAL_SETTINGS = {
    "x_disable_stats": True,
    "x_disable_machine_info": True,
    "x_disable_update_check": True,
    "x_disable_viewer": True,
    "disable_job_creation": True,
}
_written: dict[str, str] = {}  # the environment variables configure_wandb set, and to what


def configure_wandb(mode: str) -> str:
    """Set up wandb for the whole process so that offline/disabled runs never use the network.

    ``WANDB_MODE`` already in the environment wins over ``mode`` (unless configure_wandb
    wrote it itself). The effective mode is written to ``WANDB_MODE`` so that every later
    ``wandb.init`` in this process and its children (wandb-core, other loggers) agrees. In
    ``"offline"`` or ``"disabled"`` mode it also sets ``WANDB_ERROR_REPORTING=false``,
    ``WANDB__DISABLE_STATS``, ``WANDB__DISABLE_MACHINE_INFO``, ``WANDB__DISABLE_UPDATE_CHECK``
    and ``WANDB__DISABLE_VIEWER`` (to ``true``), and turns off wandb's in-process telemetry
    (its OpenTelemetry exporter would otherwise resolve and contact api.wandb.ai at exit).
    ``"online"`` undoes the variables an earlier offline call wrote.

    Args:
        mode: ``"offline"``, ``"online"`` or ``"disabled"``.

    Returns:
        The effective mode (``WANDB_MODE`` from the environment, else ``mode``).

    Raises:
        ValueError: ``mode`` or ``WANDB_MODE`` is not a mode wandb knows.
    """
    if mode not in MODES:
        raise OptionError(f"configure_wandb: mode must be one of {MODES}, got {mode!r}")
    env_mode = os.environ.get("WANDB_MODE")
    user_set = env_mode is not None and _written.get("WANDB_MODE") != env_mode
    effective = env_mode if user_set else mode
    if effective not in _ENV_MODES:
        raise OptionError(
            f"environment variable WANDB_MODE must be one of {MODES}, got {effective!r}"
        )
    _set_env("WANDB_MODE", effective)
    if effective in _LOCAL_MODES:
        for key, value in _LOCAL_ENV.items():
            if key not in os.environ or _written.get(key) == os.environ[key]:
                _set_env(key, value)
        _disable_wandb_telemetry()
    else:
        for key in _LOCAL_ENV:
            if key in _written and os.environ.get(key) == _written.pop(key):
                del os.environ[key]
    return effective


def wandb_settings(mode: str) -> dict[str, Any]:
    """Keyword arguments for ``wandb.Settings`` matching :func:`configure_wandb` for ``mode``.

    Only the fields the installed wandb version has are included; ``{}`` for online runs.
    """
    if mode not in _LOCAL_MODES:
        return {}
    try:
        import wandb
    except ImportError:
        return {}
    fields = getattr(wandb.Settings, "model_fields", None)
    if fields is None:  # wandb < 0.19 (no pydantic settings): the environment does it
        return {}
    return {k: v for k, v in _LOCAL_SETTINGS.items() if k in fields}


def _quiet(wandb: Any) -> dict[str, Any]:
    """``silent=True`` (no wandb banner, sync hints or run summary on the console) unless
    debug logging is on (the CLI's ``-v``) or the installed wandb lacks the field."""
    if logging.getLogger("torchroute").isEnabledFor(logging.DEBUG):
        return {}
    fields = getattr(wandb.Settings, "model_fields", None) or {}
    return {"silent": True} if "silent" in fields else {}


def _set_env(key: str, value: str) -> None:
    os.environ[key] = value
    _written[key] = value


def _disable_wandb_telemetry() -> None:
    """Turn off wandb's process-wide analytics (wandb >= 0.2x; absent earlier: no-op)."""
    try:
        from wandb.analytics.opentelemetry import opentelemetry_proxy
    except ImportError:
        return
    disable = getattr(opentelemetry_proxy, "disable", None)
    if callable(disable):
        disable()


class Tracker(Protocol):
    """What the loop needs from a tracker."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Log scalar ``metrics`` at round ``step``."""

    def log_table(self, name: str, frame: pd.DataFrame) -> None:
        """Log a table (one row per trial, say) under ``name``."""

    def finish(self) -> None:
        """Close the run."""


class NullTracker:
    """Logs nothing."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Do nothing."""
        pass

    def log_table(self, name: str, frame: pd.DataFrame) -> None:
        """Do nothing."""
        pass

    def finish(self) -> None:
        """Do nothing."""
        pass


class WandbTracker:
    """One wandb run: config, metrics every logging interval, final tables.

    Offline by default: runs land in ``<dir>/wandb/offline-run-*`` and need no account or
    network (nothing in this process contacts wandb's servers: see :func:`configure_wandb`);
    upload them later with ``wandb sync <dir>/wandb/offline-run-*``. Set ``mode="online"``
    (and ``WANDB_API_KEY`` or ``wandb login``) to stream live. ``WANDB_MODE`` in the
    environment wins over ``mode``.

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
        effective = configure_wandb(mode)  # before wandb.init: its settings read the env
        import wandb  # imported lazily: the core does not need wandb to import

        Path(dir).mkdir(parents=True, exist_ok=True)
        self._wandb = wandb
        self.mode = effective
        self.run = wandb.init(
            project=project,
            entity=entity,
            mode=effective,
            dir=str(dir),
            name=name,
            group=group,
            config=config,
            tags=tags,
            reinit="create_new",
            settings=wandb.Settings(**wandb_settings(effective), **_quiet(wandb)),
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Log scalar ``metrics`` at round ``step`` to the wandb run."""
        self.run.log(metrics, step=step)

    def log_table(self, name: str, frame: pd.DataFrame) -> None:
        """Log ``frame`` as a ``wandb.Table`` named ``name``."""
        self.run.log({name: self._wandb.Table(dataframe=frame)})

    def finish(self) -> None:
        """Finish the wandb run."""
        self.run.finish()
