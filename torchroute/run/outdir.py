"""The run folder: its fingerprint, the guard against mixing configurations, and resume.

Layout (``out_dir``)::

    config.yaml              the composed configuration (resolved)
    fingerprint.json         hash of the keys that change the numbers (see ``runtime_keys``)
    features.pt              the fitted feature map (runs on a table; ``feature_oracle.pt``
                             beside it for ``features.source=oracle``)
    problem.pt               the run's Problem (all R trials), what every learner was built for
    results.csv, curves.csv  one row per learner x trial / per learner x trial x logged round
    runs/<learner>/          summary.csv, curve.csv and fingerprint.json of each learner
    checkpoints/<learner>.pt the learner's last checkpoint (resume from it); a run split into
                             pieces has one per piece: <learner>[.rank<r>of<W>][.chunk<c>].pt

Every ``.pt`` file is read with ``weights_only=True``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from torchroute.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from torchroute.errors import ConfigError
from torchroute.features import FeatureMap
from torchroute.io import NotWritableError, check_writable_folder, write_text_atomic
from torchroute.run.options import RunOptions
from torchroute.run.saved import problem_state
from torchroute.types import Problem

log = logging.getLogger(__name__)

PROBLEM_FILE = "problem.pt"


def read_digest(path: Path) -> str | None:
    """The ``config`` digest of a ``fingerprint.json`` (``None`` when unreadable)."""
    try:
        return json.loads(path.read_text())["config"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_out_dir(out_dir: Path, digest: str, overwrite: bool) -> None:
    """Refuse an ``out_dir`` holding the results of another configuration (unless told)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"out_dir={str(out_dir)!r} exists and is not a folder")
    if overwrite or not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    stored = read_digest(out_dir / "fingerprint.json")
    if stored == digest:
        return
    what = "another configuration" if stored else "files that are not a torchroute run"
    raise ConfigError(
        f"out_dir={str(out_dir)!r} holds the results of {what}; choose another out_dir, or "
        "pass overwrite=true to replace them"
    )


def reusable(run_dir: Path, digest: str) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The finished results of ``run_dir`` when the same configuration wrote them."""
    files = [run_dir / "summary.csv", run_dir / "curve.csv"]
    if not all(f.is_file() for f in files):
        return None
    if read_digest(run_dir / "fingerprint.json") != digest:
        log.warning("%s was written by another configuration: running it again", run_dir)
        return None
    return pd.read_csv(files[0]), pd.read_csv(files[1])


def check_resume(opts: RunOptions) -> tuple[str | None, dict | None]:
    """Validate ``resume`` before anything is written; returns the learner it resumes and
    how the run that wrote it split its trials (see :func:`torchroute.run.shards.layout`)."""
    if not opts.resume:
        return None, None
    payload = load_checkpoint(opts.resume)
    stored = dict(payload.get("config", {}))
    name = stored.pop("learner", None)
    split = stored.pop("layout", {"world_size": 1, "trial_chunk": None})
    if stored != opts.fingerprint or name not in opts.run_learners:
        raise CheckpointError(
            f"checkpoint {opts.resume} was written by another configuration (learner {name!r}); "
            "resume with the same experiment and overrides"
        )
    return name, split


def layout_mismatch(path: Any, stored: dict, current: dict) -> str:
    """The message for a resume whose checkpoint was split otherwise than this run."""
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


def write_inputs(
    opts: RunOptions, problem: Problem, feature_map: FeatureMap | None, layout: dict
) -> None:
    """``config.yaml``, ``fingerprint.json``, ``problem.pt`` and ``features.pt``: what the
    run was built from (serving and ``report`` read them back)."""
    out_dir = opts.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    text = OmegaConf.to_yaml(OmegaConf.create(dict(opts.config)))
    write_text_atomic(out_dir / "config.yaml", text)
    write_text_atomic(out_dir / "fingerprint.json", json.dumps({"config": opts.digest()}) + "\n")
    save_checkpoint(out_dir / PROBLEM_FILE, {"problem": problem_state(problem), "layout": layout})
    if feature_map is not None:
        feature_map.save(out_dir)


__all__ = [
    "PROBLEM_FILE",
    "check_out_dir",
    "check_resume",
    "layout_mismatch",
    "read_digest",
    "reusable",
    "write_inputs",
]


#: config keys (at any depth of ``data`` and ``env``) that name files or folders a run reads
_DATA_KEYS = ("path", "pickle_path", "costs_csv", "costs", "prices")


def data_folders(opts: RunOptions) -> list[tuple[str, Path]]:
    """``(key, folder)`` of every existing file or folder the ``data`` / ``env`` nodes read
    (a file's folder, or the folder itself)."""
    found: list[tuple[str, Path]] = []

    def walk(node: Any, key: str) -> None:
        if isinstance(node, dict):
            for sub, value in node.items():
                walk(value, f"{key}.{sub}")
        elif isinstance(node, str) and key.rsplit(".", 1)[-1] in _DATA_KEYS:
            path = Path(node).expanduser()
            if path.exists():
                found.append((key, (path if path.is_dir() else path.parent).resolve()))

    walk(opts.data or {}, "data")
    walk(opts.env or {}, "env")
    return found


def check_run_folders(opts: RunOptions, *, gap_or_sweep: bool = False) -> None:
    """Before anything is built or written: ``out_dir`` and ``cache_dir`` are writable
    folders that lie outside every data folder the run reads (a run never writes into its
    data). ``gap_or_sweep``: also refuse an ``out_dir`` holding a simulate run.

    Raises:
        ConfigError: naming the key, the folder and what was expected.
    """
    folders = [("out_dir", opts.out_dir)]
    if opts.config.get("cache_dir"):
        folders.append(("cache_dir", Path(str(opts.config["cache_dir"])).expanduser()))
    for key, folder in folders:
        try:
            check_writable_folder(folder, key)
        except NotWritableError as exc:
            raise ConfigError(str(exc)) from exc
        resolved = folder.resolve()
        for data_key, data in data_folders(opts):
            if resolved == data or resolved.is_relative_to(data):
                raise ConfigError(
                    f"{key}={str(folder)!r} lies inside the data folder {str(data)!r} "
                    f"({data_key}); a run never writes into its data: choose another {key}"
                )
    if gap_or_sweep and any(
        (opts.out_dir / name).exists() for name in ("results.csv", "fingerprint.json")
    ):
        raise ConfigError(
            f"out_dir={str(opts.out_dir)!r} holds a simulate run; give this command a folder "
            "of its own"
        )


def remove_stale_temp_files(out_dir: Path) -> list[Path]:
    """Delete the temporary files an interrupted atomic write left (``.<name>.*.tmp`` in
    ``out_dir``, ``checkpoints/`` and ``runs/<learner>/``); returns them."""
    if not out_dir.is_dir():
        return []
    folders = [out_dir, out_dir / "checkpoints", *(out_dir / "runs").glob("*")]
    stale = [p for f in folders if f.is_dir() for p in f.glob(".*.tmp") if p.is_file()]
    for path in stale:
        path.unlink(missing_ok=True)
        log.info("removed %s, left by an interrupted write", path)
    return stale
