"""The ``report_regimes`` option of a run: how the report cuts its trials into cost regimes.

Checked when the run's options are built (:class:`~torchroute.run.options.RunOptions`) and
by ``torchroute report --regimes``; the report applies it
(:func:`torchroute.report.regimes.regime_rule`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torchroute.errors import ConfigError

#: the rules a run may name; ``[low_max, high_min]`` (two rhos) is the fifth form
RULE_NAMES = ("auto", "cabs", "tertiles")

#: a checked rule: one of :data:`RULE_NAMES`, or the cuts ``(low_max, high_min)``
RuleSpec = str | tuple[float, float]


def check_regime_rule(value: object, key: str = "report_regimes") -> RuleSpec:
    """``value`` as a rule: ``auto`` (also for ``None``), ``cabs``, ``tertiles``, or two
    rhos ``[low_max, high_min]`` with ``0 <= low_max < high_min`` (a list, or the text
    ``"100,200"`` of the command line). A bad value is a one-line ``ConfigError`` naming
    ``key``."""
    if value is None:
        return "auto"
    if isinstance(value, str) and "," in value:
        value = value.split(",")
    if isinstance(value, str):
        if value not in RULE_NAMES:
            raise ConfigError(_expected(key, value))
        return value
    if isinstance(value, Sequence) and len(value) == 2:
        try:
            low, high = (float(v) for v in value)
        except (TypeError, ValueError):
            raise ConfigError(_expected(key, value)) from None
        if all(math.isfinite(v) for v in (low, high)) and 0 <= low < high:
            return (low, high)
    raise ConfigError(_expected(key, value))


def _expected(key: str, value: object) -> str:
    return (
        f"{key} must be auto, cabs, tertiles or two rhos [low_max, high_min] with "
        f"0 <= low_max < high_min, got {value!r}"
    )


__all__ = ["RULE_NAMES", "RuleSpec", "check_regime_rule"]
