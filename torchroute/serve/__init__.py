"""Serving a learned router: :class:`Router` (route, feedback, add_model) and its HTTP API.

``torchroute.serve.app.create_app`` (FastAPI) is imported from its module so that the
library itself does not need the web framework. The names below load on first use, so that
the command line's parser (:mod:`torchroute.serve.flags`) imports no router.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

#: public name -> the module that defines it
_EXPORTS = {
    "DuplicateModelError": "torchroute.serve.checks",
    "FeatureMap": "torchroute.features",
    "Router": "torchroute.serve.router",
    "UnknownModelError": "torchroute.serve.checks",
    "load_router": "torchroute.serve.from_run",
}


def __getattr__(name: str) -> Any:
    """The public name ``name`` from its module (imported on first use)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'torchroute.serve' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)


__all__ = ["DuplicateModelError", "FeatureMap", "Router", "UnknownModelError", "load_router"]
