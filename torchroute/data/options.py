"""Type checks of a loader's keyword options against its signature, before anything is read.

A loader decorated with :func:`checked_options` refuses ``seed="abc"``, ``drop_missing="maybe"``
or ``trust_pickle="no"`` (a non-empty string is truthy: it would unpickle) with a one-line
:class:`~torchroute.data.table.TableError` naming the option, the expected type and the value,
wherever it is called from (``torchroute data``, ``data.<key>=`` of ``simulate``, Python).
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar, Union

from torchroute.data.table import TableError

F = TypeVar("F", bound=Callable[..., Any])


def matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the (simple) type ``hint``.

    Understood: ``Any``, ``None``, unions, ``Literal``, ``bool``, ``int`` (not ``bool``),
    ``float`` (an ``int`` too, not ``bool``), ``str``, ``os.PathLike`` / ``Path`` (a ``str``
    too), ``Sequence[X]`` (a list or tuple, not a string), ``Mapping[...]`` and plain classes.
    Anything else is accepted (the loader checks it).
    """
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin is Union or isinstance(hint, types.UnionType):
        return any(matches(value, arg) for arg in typing.get_args(hint))
    if origin is Literal:
        return any(type(value) is type(arg) and value == arg for arg in typing.get_args(hint))
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if isinstance(hint, type) and issubclass(hint, os.PathLike):
        return isinstance(value, (str, os.PathLike))
    if origin in (Sequence, list, tuple):
        args = typing.get_args(hint)
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            return False
        return not args or all(matches(v, args[0]) for v in value)
    if origin is not None and isinstance(origin, type) and issubclass(origin, Mapping):
        return isinstance(value, Mapping)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def describe_hint(hint: Any) -> str:
    """A short readable name of a type hint (``int``, ``one of ['auto', 'long']``, ...)."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return f"one of {list(typing.get_args(hint))}"
    if origin is Union or isinstance(hint, types.UnionType):
        return " or ".join(describe_hint(a) for a in typing.get_args(hint))
    if hint is None or hint is type(None):
        return "null"
    if origin in (Sequence, list, tuple):
        args = typing.get_args(hint)
        return f"a list of {describe_hint(args[0]).removeprefix('a ')}s" if args else "a list"
    if origin is not None and isinstance(origin, type) and issubclass(origin, Mapping):
        return "a mapping"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if hint in names:
        return names[hint]
    return getattr(hint, "__name__", str(hint))


def check_options(func: Callable[..., Any], options: Mapping[str, Any]) -> None:
    """Raise :class:`TableError` for an option of ``func`` whose value has the wrong type.

    Also checks the options every loader shares: ``seed`` an integer >= 0 and the split
    fractions finite numbers in ``[0, 1]``.
    """
    hints = typing.get_type_hints(func)
    name = func.__name__
    for key, value in options.items():
        hint = hints.get(key)
        if hint is not None and not matches(value, hint):
            raise TableError(
                f"{name}: option {key} must be {describe_hint(hint)}, "
                f"got {value!r} ({type(value).__name__})"
            )
    seed = options.get("seed")
    if seed is not None and isinstance(seed, int) and seed < 0:
        raise TableError(f"{name}: option seed must be an integer >= 0, got {seed}")
    for key in ("test_fraction", "val_fraction"):
        value = options.get(key)
        if isinstance(value, (int, float)) and not (math.isfinite(value) and 0 <= value <= 1):
            raise TableError(f"{name}: option {key} must be a number in [0, 1], got {value!r}")


def checked_options(func: F) -> F:
    """Decorate a loader so its keyword options are type-checked (:func:`check_options`)."""
    signature = inspect.signature(func)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs)
        check_options(func, {k: v for k, v in bound.arguments.items() if k != "path"})
        return func(*args, **kwargs)

    return typing.cast(F, wrapper)
