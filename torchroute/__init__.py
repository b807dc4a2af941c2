"""torchroute: online model routing with contextual bandits, batched over trials."""

from pathlib import Path as _Path

from torchroute.types import Context, Decision, Feedback, Outcome


def _checkout_folders() -> None:
    """In a source checkout, ``torchroute.models``, ``.trainers`` and ``.configs`` are that
    checkout's own top-level ``models/``, ``trainers/`` and ``configs/`` folders, not those
    of whichever checkout is installed: the checkout's root is searched after
    ``torchroute/`` itself. An installed wheel holds them inside the package (nothing is
    added)."""
    root = _Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and (root / "models" / "__init__.py").is_file():
        __path__.append(str(root))  # type: ignore[name-defined]


_checkout_folders()

__version__ = "0.1.0"

__all__ = ["Context", "Decision", "Feedback", "Outcome", "__version__"]
