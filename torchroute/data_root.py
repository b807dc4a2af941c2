"""The data root: the one folder the packaged presets read their real tables from.

A preset names a file under it as ``${data_root:routerbench}`` (an OmegaConf resolver), never
as a path relative to the folder a command runs from. The root is

- ``$TORCHROUTE_DATA`` when set (made absolute once, when the config is composed), else
- the ``shared/data`` folder beside the source checkout that holds ``configs/`` (for an
  installed package: beside the installed package).

The composed config holds the absolute path (``config.yaml`` of a run shows it), and the
first use in a process prints one line to stderr naming the root and where it came from.
"""

from __future__ import annotations

import importlib.resources
import os
import sys
from pathlib import Path

#: the environment variable that names the data root
DATA_ROOT_ENV = "TORCHROUTE_DATA"
#: the resolver name presets use: ``${data_root:<path under the root>}``
RESOLVER = "data_root"

_reported: set[Path] = set()


def data_root() -> tuple[Path, str]:
    """The data root, absolute, and where it came from (``$TORCHROUTE_DATA`` or ``default``)."""
    value = os.environ.get(DATA_ROOT_ENV, "").strip()
    if value:
        return Path(value).expanduser().resolve(), f"${DATA_ROOT_ENV}"
    # the packaged configs' folder (as torchroute.configs_path.config_dir finds it; that
    # module registers this one's resolver, so it is not imported here)
    configs = Path(str(importlib.resources.files("torchroute.configs")))
    checkout = configs.resolve().parent
    return checkout.parent / "shared" / "data", f"default: beside {checkout}; set ${DATA_ROOT_ENV}"


def under_data_root(relative: str) -> str:
    """``relative`` (a path under the data root) as an absolute path string; the root is
    reported once per process on stderr.

    Raises:
        ValueError: ``relative`` is absolute or climbs out of the root with ``..``.
    """
    part = Path(str(relative))
    if part.is_absolute() or ".." in part.parts:
        raise ValueError(
            f"${{{RESOLVER}:{relative}}}: expected a path inside the data root, "
            "without a leading / or .."
        )
    root, source = data_root()
    if root not in _reported:
        _reported.add(root)
        print(f"data root: {root} ({source})", file=sys.stderr, flush=True)
    return str(root / part)


def register_resolver() -> None:
    """Make ``${data_root:...}`` resolvable in OmegaConf configs (idempotent)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, under_data_root)


__all__ = ["DATA_ROOT_ENV", "RESOLVER", "data_root", "register_resolver", "under_data_root"]
