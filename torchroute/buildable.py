"""The mark of what a config's ``_target_`` may build when it is read from a run folder.

A run folder (``config.yaml``, a checkpoint's saved config) is data: its ``_target_``s are
built only when they resolve to a class or function marked here (see
:mod:`torchroute.run.trust`). The package marks its learners and envs (the base classes:
every subclass inherits the mark), encoders, feature maps, table loaders and the oracle
loader; a plug-in package marks its own factory functions the same way::

    from torchroute.buildable import buildable

    @buildable
    def tiny_table(...) -> RoutingTable: ...
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")

#: the attribute set on a marked class or function
MARK = "__torchroute_buildable__"


def buildable(obj: T) -> T:
    """Mark ``obj`` (a class or a function) as buildable from a run folder's config."""
    setattr(obj, MARK, True)
    return obj


def is_marked(obj: Any) -> bool:
    """Whether ``obj`` carries the mark itself (a function) or through its classes (a class).

    Only ``__dict__`` entries are looked at: nothing of ``obj`` is called.
    """
    if isinstance(obj, type):
        return any(vars(cls).get(MARK) is True for cls in obj.__mro__)
    try:
        return vars(obj).get(MARK) is True
    except TypeError:  # no __dict__ (a builtin)
        return False


__all__ = ["MARK", "buildable", "is_marked"]
