"""torchroute: online model routing with contextual bandits, batched over trials."""

import importlib.abc as _abc
import importlib.util as _util
import sys as _sys
from pathlib import Path as _Path

from torchroute.types import Context, Decision, Feedback, Outcome


class _CheckoutFolders(_abc.MetaPathFinder):
    """In a source checkout, ``torchroute.models``, ``.trainers`` and ``.configs`` are that
    checkout's own top-level ``models/``, ``trainers/`` and ``configs/`` folders, not those
    of whichever checkout is installed (an editable install maps them by absolute path).
    An installed wheel holds them inside the package: the finder is then not installed."""

    def __init__(self, root: _Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        prefix, _, name = fullname.rpartition(".")
        if prefix != "torchroute" or name not in ("models", "trainers", "configs"):
            return None
        init = self.root / name / "__init__.py"
        return _util.spec_from_file_location(
            fullname, init, submodule_search_locations=[str(init.parent)]
        )


def _checkout_folders() -> None:
    root = _Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and (root / "models" / "__init__.py").is_file():
        _sys.meta_path.insert(0, _CheckoutFolders(root))


_checkout_folders()

__version__ = "0.1.0"

__all__ = ["Context", "Decision", "Feedback", "Outcome", "__version__"]
