"""Where the configs live, and composing one with Hydra overrides.

The packaged configs (``torchroute.configs``) come first on the search path; extra config
folders (``--config-dir``, as Hydra's flag of that name) follow in the order given. An
extra folder has the layout of the packaged one (``learner/``, ``env/``, ``experiment/``,
...): its files join the options of their group. A file that another folder of the path
also has (``learner/linucb.yaml``) is refused, since only the first would be read.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

from torchroute.errors import OptionError


def config_dir() -> Path:
    """The folder holding ``simulate.yaml`` and the config groups.

    The configs are the package data of ``torchroute.configs`` (the repository's
    ``configs/`` folder), found the same way in an editable and in a regular install.
    """
    return Path(str(importlib.resources.files("torchroute.configs")))


def config_dirs(
    extra: Sequence[str | Path] = (),
    directory: str | Path | None = None,
    flag: str = "--config-dir",
) -> list[Path]:
    """The config search path: ``directory`` (default: the packaged configs), then the
    ``extra`` folders in order, each resolved.

    Raises:
        ValueError: an extra folder that does not exist, or that holds a config file of the
            same relative path as an earlier folder (one line naming ``flag``).
    """
    base = Path(directory or config_dir()).resolve()
    folders = [base]
    if not extra:
        return folders
    seen = {p.relative_to(base): base for p in base.rglob("*.yaml")}
    for item in extra:
        path = Path(item).expanduser().resolve()
        if not path.is_dir():
            raise OptionError(f"{flag} {item}: no such folder (expected a folder of YAML configs)")
        if path in folders:
            continue
        for file in sorted(path.rglob("*.yaml")):
            rel = file.relative_to(path)
            if rel in seen:
                raise OptionError(
                    f"{flag} {item}: {rel} is also in {seen[rel]}; give it another name "
                    "(a config folder adds files, it does not replace them)"
                )
            seen[rel] = path
        folders.append(path)
    return folders


def group_configs(
    group: str, extra: Sequence[str | Path] = (), directory: str | Path | None = None
) -> dict[str, Path]:
    """``{option: file}`` of config group ``group`` over the search path
    (:func:`config_dirs`), sorted by option."""
    found: dict[str, Path] = {}
    for folder in config_dirs(extra, directory):
        for path in sorted((folder / group).glob("*.yaml")):
            found.setdefault(path.stem, path)
    return dict(sorted(found.items()))


def compose_config(
    name: str,
    overrides: Sequence[str],
    directory: str | Path | None = None,
    extra: Sequence[str | Path] = (),
) -> DictConfig:
    """Compose ``<name>.yaml`` with Hydra-style ``key=value`` overrides.

    Args:
        name: the primary config (``simulate`` or ``pretrain``).
        overrides: ``key=value`` and ``group=option`` overrides.
        directory: the base config folder (default: the packaged configs).
        extra: folders searched after ``directory`` (:func:`config_dirs`).
    """
    from hydra import compose, initialize_config_dir

    from torchroute.data_root import register_resolver

    register_resolver()  # the presets' ${data_root:...} paths
    first, *rest = config_dirs(extra, directory)
    overrides = list(overrides)
    if rest:  # Hydra's own search path: the primary folder, then these in order
        paths = ",".join(f"'file://{p}'" for p in rest)
        overrides = [f"hydra.searchpath=[{paths}]", *overrides]
    with initialize_config_dir(config_dir=str(first), version_base="1.3"):
        return compose(config_name=name, overrides=overrides)


__all__ = ["compose_config", "config_dir", "config_dirs", "group_configs"]
