"""Scenario event kinds, one file each: ``<kind>.py`` binds its :class:`Event` subclass to
``EVENT`` (``new_model``, ``drift``, ``price``, and any file added here).

Only this package's own files are kinds: a config names one by its file name, never by a
module path, so a scenario read from a run folder cannot import anything else.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil

from torchroute.envs.events.base import Event, ScenarioError

#: files of the package that are not kinds
_NOT_KINDS = ("base",)


def kinds() -> list[str]:
    """The names of the event kinds, sorted: the files of this package."""
    found = (m.name for m in pkgutil.iter_modules(__path__))
    return sorted(n for n in found if n not in _NOT_KINDS and not n.startswith("_"))


def event_class(kind: object, where: str) -> type[Event]:
    """The :class:`Event` subclass of ``kind`` (``where``: ``scenario[i]``, for errors).

    Raises:
        ScenarioError: ``kind`` names no file of this package.
    """
    if not isinstance(kind, str) or kind not in kinds():
        raise ScenarioError(f"{where}.kind must be one of {kinds()}, got {kind!r}")
    module = importlib.import_module(f"{__name__}.{kind}")
    cls = getattr(module, "EVENT", None)
    if not (isinstance(cls, type) and issubclass(cls, Event) and cls.kind == kind):
        raise TypeError(f"{module.__name__} must bind EVENT to its Event subclass of kind {kind!r}")
    return cls


__all__ = ["Event", "ScenarioError", "event_class", "kinds"]
