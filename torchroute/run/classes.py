"""The learner class a config node builds: the one step from ``_target_`` to the class.

The report, the leaderboard, the run's option checks, the device check and the tests read
what a learner is (:attr:`~torchroute.learners.Learner.role`,
:attr:`~torchroute.learners.Learner.family`, :attr:`~torchroute.learners.Learner.feedback`,
...) from its class, found here by the object the ``_target_`` names, never by its text:
the name is resolved as :func:`torchroute.run.trust.resolve` resolves it (modules of
torchroute or of a trusted package imported, the rest walked statically, nothing called),
and a plug-in module the process has already imported (the run that built the learner) is
walked the same way. ``<Class>.from_problem`` and ``<Class>`` name the class; whatever else
it names (a function, an object that is not a :class:`~torchroute.learners.Learner`
subclass, a name that does not resolve) gives ``None``.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from torchroute.learners.base import Learner
from torchroute.run.trust import UntrustedTarget, current_target, resolve


def learner_class(node: Any, trusted: Iterable[str] = ()) -> type[Learner] | None:
    """The :class:`Learner` subclass that ``node`` (a config node with a ``_target_``, or
    the ``_target_`` string itself) builds, or ``None``.

    Args:
        node: a learner config node (a mapping) or a dotted ``_target_``.
        trusted: package prefixes whose modules may be imported besides torchroute's.
    """
    target = node.get("_target_") if isinstance(node, Mapping) else node
    if not isinstance(target, str) or not target:
        return None
    obj = _resolved(target, tuple(trusted))
    if isinstance(obj, classmethod):  # <Class>.from_problem, walked statically
        obj = _resolved(target.rsplit(".", 1)[0], tuple(trusted))
    if inspect.ismethod(obj):
        obj = obj.__self__
    return obj if inspect.isclass(obj) and issubclass(obj, Learner) else None


def own_learner_class(node: Any) -> type[Learner] | None:
    """:func:`learner_class` of a config the user gave (a composed run config, a config
    folder named on the command line), not one read from a run folder: the package its
    ``_target_`` names is the user's own and is imported."""
    target = node.get("_target_") if isinstance(node, Mapping) else node
    package = target.split(".")[0] if isinstance(target, str) else ""
    return learner_class(node, trusted=(package,) if package else ())


def _resolved(target: str, trusted: tuple[str, ...]) -> Any:
    """The object ``target`` names (``None`` when it does not resolve)."""
    try:
        return resolve(target, trusted)
    except UntrustedTarget:
        return _in_imported_module(current_target(target))


def _in_imported_module(target: str) -> Any:
    """``target`` walked statically from the longest prefix that is an imported module."""
    parts = target.split(".")
    if any(not p.isidentifier() or p.startswith("_") for p in parts):
        return None
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        obj: Any = module
        for part in parts[cut:]:
            try:
                obj = inspect.getattr_static(obj, part)
            except AttributeError:
                return None
        return obj
    return None


__all__ = ["learner_class", "own_learner_class"]
