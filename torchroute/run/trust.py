"""Which ``_target_``s read from a run folder may be built: judged by the object, not the name.

A run folder (``config.yaml``, the config saved in a checkpoint) is data, and so are the
learner configs ``evaluate`` reads from ``--config-dir``. A ``_target_`` read from one is
resolved to the object it names *without calling anything*: the longest dotted prefix that
is a module of torchroute (or of a ``--trust`` package) is imported, the rest is walked
with :func:`inspect.getattr_static` (no ``__getattr__``, no descriptor, no property runs);
a private or dunder part is refused. The object is then built only when

- it is a class or a plain function (a ``classmethod`` of such a class included),
- its own ``__module__`` is a torchroute module or one of a trusted plug-in package, and
- it is marked buildable (:mod:`torchroute.buildable`): learners, envs and their
  factories, encoders, feature maps, table loaders and the oracle loader.

So ``torchroute.learners.base.torch.hub.load``, ``torchroute.features.np.load`` or
``torchroute.models.encoders.os.system`` (objects a torchroute module merely imports) are
refused with one line naming the key and what it resolved to. Keyword arguments that
load files in their own way (:data:`FILE_LOADING_KEYS`) are never taken from a run folder
(only their safe value, ``weights_only=True`` or ``False`` for the others, passes).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Iterable, Iterator
from typing import Any

from torchroute.buildable import is_marked
from torchroute.errors import UntrustedTarget

#: the package whose marked classes and functions a run folder may name
OWN_PACKAGE = "torchroute."

#: keyword arguments that make a loader run code or unpickle (never read from a run folder)
FILE_LOADING_KEYS: tuple[str, ...] = (
    "weights_only",
    "allow_pickle",
    "trust_remote_code",
    "trust_repo",
    "trust_pickle",
)

#: modules that moved, old dotted prefix -> new one: a saved run (or a user's config) that
#: names the old path still builds (:func:`current_target`)
MOVED_TARGETS: dict[str, str] = {
    "torchroute.envs.subset_opt": "torchroute.envs.subset.opt",
    "torchroute.envs.subset_instances": "torchroute.envs.subset.trec",
    "torchroute.envs.subset_table": "torchroute.envs.subset.table",
}


def current_target(target: str) -> str:
    """``target`` with a moved module prefix (:data:`MOVED_TARGETS`) replaced by its new one.

    Example:
        >>> current_target("torchroute.envs.subset_table.table_subset_env")
        'torchroute.envs.subset.table.table_subset_env'
    """
    for old, new in MOVED_TARGETS.items():
        if target == old or target.startswith(old + "."):
            return new + target[len(old) :]
    return target


def current_targets(node: Any) -> Any:
    """A copy of a plain config node with every ``_target_`` passed through
    :func:`current_target` (nested nodes included); other values are kept as they are."""
    if isinstance(node, dict):
        return {
            k: current_target(v) if k == "_target_" and isinstance(v, str) else current_targets(v)
            for k, v in node.items()
        }
    if isinstance(node, (list, tuple)):
        return type(node)(current_targets(v) for v in node)
    return node


def targets(node: Any, key: str) -> Iterator[tuple[str, Any]]:
    """Every ``(key path, _target_ value)`` in a config node, nested nodes included."""
    if isinstance(node, dict):
        if "_target_" in node:
            yield f"{key}._target_", node["_target_"]
        for k, value in node.items():
            if k != "_target_":
                yield from targets(value, f"{key}.{k}")
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from targets(value, f"{key}[{i}]")


def _keys(node: Any, key: str) -> Iterator[tuple[str, str, Any]]:
    """Every ``(key path, key, value)`` of a config node, nested nodes included."""
    if isinstance(node, dict):
        for k, value in node.items():
            yield f"{key}.{k}", str(k), value
            yield from _keys(value, f"{key}.{k}")
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _keys(value, f"{key}[{i}]")


def _prefixes(extra: Iterable[str]) -> tuple[str, ...]:
    """torchroute's package and the trusted ones, each ending in a dot."""
    return (OWN_PACKAGE, *(p if p.endswith(".") else p + "." for p in extra))


def _under(name: Any, prefixes: tuple[str, ...]) -> bool:
    return isinstance(name, str) and any(name.startswith(p) or name == p[:-1] for p in prefixes)


def describe(obj: Any) -> str:
    """What an object is, for an error: ``function torch.hub.load``, ``module os``, ..."""
    if inspect.ismodule(obj):
        return f"module {obj.__name__}"
    if isinstance(obj, (classmethod, staticmethod)):
        obj = obj.__func__
    module = getattr(obj, "__module__", None) if not isinstance(obj, dict) else None
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    kind = "class" if inspect.isclass(obj) else type(obj).__name__
    if isinstance(module, str) and isinstance(name, str):
        return f"{kind} {module}.{name}"
    return f"a {kind} object"


def resolve(target: Any, extra: Iterable[str] = ()) -> Any:
    """The object ``target`` names, or :class:`UntrustedTarget` (its message says why, after
    the name).

    Only modules under torchroute or a trusted prefix are imported; every other step is
    :func:`inspect.getattr_static`, so nothing is called.
    """
    prefixes = _prefixes(extra)
    if not isinstance(target, str) or not target:
        raise UntrustedTarget("is not a dotted name")
    target = current_target(target)
    parts = target.split(".")
    if not all(p.isidentifier() for p in parts):
        raise UntrustedTarget("is not a dotted name")
    private = [p for p in parts if p.startswith("_")]
    if private:
        raise UntrustedTarget(f"names a private attribute ({private[0]})")
    if not _under(target, prefixes):
        raise UntrustedTarget(f"is not under {', '.join(p[:-1] for p in prefixes)}")
    try:
        obj: Any = importlib.import_module(parts[0])
    except ImportError as exc:
        raise UntrustedTarget(f"cannot be imported ({exc})") from None
    path = parts[0]
    trusted_so_far = True  # every module walked so far is one of the trusted packages
    for part in parts[1:]:
        path = f"{path}.{part}"
        try:  # an attribute first, as Hydra's _locate does when it builds the target
            obj = inspect.getattr_static(obj, part)
        except AttributeError:
            if not (
                trusted_so_far and inspect.ismodule(obj) and _is_submodule(obj, path, prefixes)
            ):
                raise UntrustedTarget(f"does not exist ({path} is missing)") from None
            obj = importlib.import_module(path)
        if inspect.ismodule(obj) and not _under(obj.__name__, prefixes):
            trusted_so_far = False  # a foreign module: walked statically, never imported
    return obj


def _is_submodule(module: Any, path: str, prefixes: tuple[str, ...]) -> bool:
    """Whether ``path`` is a real submodule of the package ``module`` (found, not run)."""
    if not hasattr(module, "__path__") or not _under(path, prefixes):
        return False
    try:
        return importlib.util.find_spec(path) is not None
    except (ImportError, ValueError):
        return False


def check_target(target: Any, extra: Iterable[str] = ()) -> Any:
    """The buildable object ``target`` names, or :class:`UntrustedTarget` saying what it
    resolved to (see the module docstring for the rules)."""
    prefixes = _prefixes(extra)
    obj = resolve(target, extra)
    owner = None
    if isinstance(obj, classmethod):
        parent = resolve(target.rsplit(".", 1)[0], extra)
        owner, obj = parent, obj.__func__
    ok = inspect.isclass(obj) or inspect.isfunction(obj)
    module = getattr(obj, "__module__", None) if ok else None
    if owner is not None:
        ok = inspect.isclass(owner) and _under(owner.__module__, prefixes) and is_marked(owner)
        ok = ok and _under(module, prefixes)
    else:
        ok = ok and _under(module, prefixes) and is_marked(obj)
    if not ok:
        raise UntrustedTarget(
            f"resolves to {describe(obj)}, which is not one of the buildable "
            "classes and functions (learners, envs, encoders, feature maps, loaders) of "
            "torchroute or a --trust package"
        )
    return obj


def explain(target: Any, extra: Iterable[str] = ()) -> str | None:
    """Why ``target`` is refused (``"'os.system' is not under torchroute"``), or ``None``."""
    try:
        check_target(target, extra)
    except UntrustedTarget as exc:
        return f"{target!r} {exc}"
    return None


def is_allowed(target: Any, extra: Iterable[str] = ()) -> bool:
    """Whether ``target`` resolves to a buildable object (:func:`check_target`)."""
    try:
        check_target(target, extra)
    except UntrustedTarget:
        return False
    return True


def check_trusted(node: Any, key: str, source: str, extra: Iterable[str] = ()) -> None:
    """Refuse ``node`` (read from ``source``) unless all its ``_target_``s are buildable and
    it sets none of :data:`FILE_LOADING_KEYS` to another value than its safe one.

    Args:
        node: a plain config node (dict) read from a run folder.
        key: its key in the config (named in the error), e.g. ``learners.linucb``.
        source: the file it came from (named in the error).
        extra: trusted plug-in packages (``my_routing`` or ``my_routing.``).

    Raises:
        UntrustedTarget: ``<source>: <key>._target_='<value>' resolves to <object>, which is
            not one of the buildable classes ...; a run folder is data, so it is not built``.
    """
    extra = tuple(extra)
    for path, name, value in _keys(node, key):
        safe = (None, name == "weights_only")  # the value that loads nothing but data
        if name in FILE_LOADING_KEYS and value not in safe:
            raise UntrustedTarget(
                f"{source}: {path} is set to {value!r}; {name} is never taken from a run folder "
                "(a run folder is data, and it lets a loader run code from a file), so the node "
                "is not built"
            )
    for path, target in targets(node, key):
        try:
            check_target(target, extra)
        except UntrustedTarget as exc:
            raise UntrustedTarget(
                f"{source}: {path}={target!r} {exc}; a run folder is data, so it is not built"
            ) from None


__all__ = [
    "FILE_LOADING_KEYS",
    "MOVED_TARGETS",
    "UntrustedTarget",
    "check_target",
    "check_trusted",
    "current_target",
    "current_targets",
    "describe",
    "explain",
    "is_allowed",
    "resolve",
    "targets",
]
