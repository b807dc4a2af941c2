"""The flags Hydra users type first: ``-m/--multirun``, ``--cfg hydra|all`` and ``--info``.

torchroute composes its configs with Hydra's compose API inside one process; it is not a
``@hydra.main`` application, so there is no Hydra launcher (multirun), no ``hydra.*``
runtime config and no output-folder management by Hydra. Each flag is answered here with
what torchroute does instead.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from torchroute.errors import MultirunError

#: what ``--cfg hydra`` prints (to stdout, exit 0)
NO_HYDRA_CONFIG = (
    "# torchroute composes its configs with Hydra's compose API, not as a @hydra.main app: "
    "there is no hydra runtime config (no hydra.run.dir, launcher or job logging); "
    "out_dir and the logger keys of the job config play those parts. "
    "--cfg job prints the job config."
)


def _value_list(value: str) -> list[str] | None:
    """``"a,b"`` -> ``["a", "b"]`` (a Hydra sweep value); ``None`` for a plain value."""
    if value.startswith(("[", "{", "'", '"')) or "," not in value:
        return None
    if value.startswith(("range(", "choice(", "interval(")):
        return None
    return [v.strip() for v in value.split(",")]


def multirun_answer(command: str, overrides: Sequence[str]) -> str:
    """The one-line answer to ``torchroute <command> -m <overrides>``.

    A sweep of learner hyper-parameters (``learners.<name>.<param>=a,b``) becomes the
    ``torchroute sweep`` command that runs it (``+sweep.grid.<name>.<param>=[a,b]``: every
    grid point batched as trials, chosen on the val split, tested once); other swept keys
    are named as not sweepable this way.
    """
    keep: list[str] = []
    grid: list[str] = []
    other: list[str] = []
    for item in overrides:
        key, sep, value = item.partition("=")
        values = _value_list(value) if sep else None
        if values is None:
            keep.append(item)
        elif key.startswith("learners.") and key.count(".") == 2:
            grid.append(f"+sweep.grid.{key.removeprefix('learners.')}=[{','.join(values)}]")
        else:
            other.append(key)
    head = (
        f"torchroute {command} has no -m/--multirun (it is not a @hydra.main app and has no "
        "Hydra launcher)"
    )
    if other:
        return (
            f"{head}; a grid over {other} is not a learner hyper-parameter: run one "
            f"'torchroute {command}' per value, or put several values in one run where the "
            "key is a list (rhos=[...], seeds=[...] are batched as trials)"
        )
    if not grid:
        return (
            f"{head}; a hyper-parameter grid runs with e.g. 'torchroute sweep "
            "experiment=default +sweep.grid.linucb.alpha=[0.5,1.0]'"
        )
    line = shlex.join(["torchroute", "sweep", *keep, *grid])
    return (
        f"{head}; the grid of learner hyper-parameters runs batched (chosen on split=val, "
        f"tested once) with: {line}"
    )


def info_text(command: str, primary: str, folders: Sequence[Path]) -> str:
    """What ``torchroute <command> --info`` prints: the config search path and where the
    groups, presets and keys are listed (Hydra's ``--info`` for a compose-API program)."""
    lines = [
        f"torchroute {command}: configs composed with Hydra's compose API "
        f"(primary config {primary}.yaml)",
        "",
        "Config search path (first match wins):",
        *(f"  {folder}" for folder in folders),
        "",
        f"Groups, presets and keys: torchroute {command} --help; the composed config: "
        f"torchroute {command} <overrides> --cfg job.",
    ]
    return "\n".join(lines) + "\n"


__all__ = ["NO_HYDRA_CONFIG", "MultirunError", "info_text", "multirun_answer"]
