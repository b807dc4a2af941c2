"""Serving a learned router: :class:`Router` (route, feedback, add_model) and its HTTP API.

``torchroute.serve.app.create_app`` (FastAPI) is imported from its module so that the
library itself does not need the web framework.
"""

from torchroute.features import FeatureMap
from torchroute.serve.checks import DuplicateModelError, UnknownModelError
from torchroute.serve.from_run import load_router
from torchroute.serve.router import Router

__all__ = ["DuplicateModelError", "FeatureMap", "Router", "UnknownModelError", "load_router"]
