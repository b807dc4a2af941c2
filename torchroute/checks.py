"""Argument checks shared by learners and environments: one-line errors naming the argument."""

from __future__ import annotations

import math
import re

from torchroute.errors import OptionError

#: characters of a model (arm) name: letters, digits and ``. _ - : / @ +``, starting
#: alphanumeric; at most :data:`MAX_MODEL_NAME` of them (the names ``serve`` accepts)
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+\-]*")
MAX_MODEL_NAME = 128


def check_number(
    owner: str,
    name: str,
    value: float,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    integer: bool = False,
) -> None:
    """Raise :class:`~torchroute.errors.OptionError` (a ``ValueError``) unless ``value`` is a
    finite number within the given bounds.

    Args:
        owner: who takes the argument (``"LinUCB"``), named in the message.
        name: the argument's name.
        value: the value to check.
        gt: lower bound, exclusive (``value > gt``); None for none.
        ge: lower bound, inclusive (``value >= ge``); None for none.
        le: upper bound, inclusive (``value <= le``); None for none.
        integer: also require an integer.

    Example:
        >>> check_number("LinUCB", "alpha", float("nan"), ge=0)
        Traceback (most recent call last):
        ...
        torchroute.errors.OptionError: LinUCB: alpha must be a finite number >= 0, got nan
    """
    bounds = [f"> {gt}" if gt is not None else "", f">= {ge}" if ge is not None else ""]
    bounds.append(f"<= {le}" if le is not None else "")
    expected = ("an integer" if integer else "a finite number") + "".join(
        f" {b}" for b in bounds if b
    )
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = ok and math.isfinite(value) and (not integer or float(value).is_integer())
    ok = ok and (gt is None or value > gt) and (ge is None or value >= ge)
    ok = ok and (le is None or value <= le)
    if not ok:
        raise OptionError(f"{owner}: {name} must be {expected}, got {value!r}")


def check_igw(owner: str, num_arms: int, gamma: float, mu: float | None, eps_floor: float) -> None:
    """The hyper-parameters of SquareCB's inverse gap weighting plus the probability floor:
    ``gamma > 0``, ``mu >= K`` (when given), ``0 <= eps_floor <= 1 / K``."""
    check_number(owner, "gamma", gamma, gt=0)
    if mu is not None:
        check_number(owner, "mu", mu, ge=num_arms)
    check_number(owner, "eps_floor", eps_floor, ge=0, le=1.0 / num_arms)
