"""A request body read as standard JSON, each refusal one line with the reason.

Python's ``json`` (and the backends' parsers, some of them) accept what the JSON standard
does not: the literals ``NaN``, ``Infinity`` and ``-Infinity``, and strings holding a lone
UTF-16 surrogate (``"\\ud800"``), which no UTF-8 text can carry; it reads a number too
large for a double (``1e999``) as infinity, which no JSON text can carry on. The gateway
passes the fields it does not read to a backend, so it refuses them here, before anything
is routed or logged, naming the field (``temperature``, ``messages.0.content``).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from torchroute.errors import BodyError as BodyError

#: a ``\\u`` escape of a UTF-16 surrogate (the only way JSON text can carry a lone one)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class _Constant:
    """Where the parser met ``NaN``, ``Infinity`` or ``-Infinity`` (``name``), or a number
    too large for a double (``overflow``)."""

    def __init__(self, name: str, overflow: bool = False) -> None:
        self.name, self.overflow = name, overflow


def read_json(raw: bytes) -> Any:
    """The JSON value of ``raw``; :class:`BodyError` when it is not standard JSON text.

    Refused: bytes that are not UTF-8, malformed JSON (the parser's reason and position),
    nesting deeper than Python's parser can follow, a non-standard number literal, a number
    too large for a double and a string with a lone surrogate (each named by its path).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(f"body: not UTF-8 text (byte {exc.start} cannot be decoded)") from None
    constants: list[_Constant] = []

    def constant(name: str) -> _Constant:
        constants.append(_Constant(name))
        return constants[-1]

    def number(literal: str) -> float | _Constant:
        parsed = float(literal)
        if math.isfinite(parsed):
            return parsed
        constants.append(_Constant(literal[:40], overflow=True))  # 1e999: inf in Python
        return constants[-1]

    try:
        value = json.loads(text, parse_constant=constant, parse_float=number)
    except json.JSONDecodeError as exc:
        raise BodyError(
            f"malformed JSON body: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise BodyError("body: JSON nested too deeply to be read") from None
    if constants or _SURROGATE_ESCAPE.search(text):
        _refuse_nonstandard(value)
    return value


def _refuse_nonstandard(value: Any) -> None:
    """Raise :class:`BodyError` for the first non-standard number or lone surrogate of
    ``value`` (depth first, in document order), naming its path."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        where = path or "body"
        if isinstance(item, _Constant):
            what = "is too large for a double" if item.overflow else "is not a JSON number"
            raise BodyError(f"{where}: {item.name} {what} (expected a finite number)")
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise BodyError(
                    f"{where}: not valid Unicode text (a lone UTF-16 surrogate escape)"
                ) from None
        elif isinstance(item, dict):
            children = [(k, f"{where} (a key)") for k in item]
            children += [(v, _join(path, _shown(k))) for k, v in item.items()]
            stack.extend(reversed(children))
        elif isinstance(item, list):
            stack.extend(reversed([(v, _join(path, str(i))) for i, v in enumerate(item)]))


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _shown(key: str) -> str:
    """A key as a message can show it: at most 40 characters, escapes for what UTF-8
    cannot carry."""
    return key[:40].encode("utf-8", "backslashreplace").decode("utf-8")
