"""The ``report_regimes`` option of a run: how the report cuts its trials into cost regimes.

Checked when the run's options are built (:class:`~torchroute.run.options.RunOptions`) and
by ``torchroute report --regimes``; :func:`regime_rule` applies it (the report's regimes,
and the run's choices on validation made per cost regime). The rules are described in
:mod:`torchroute.report.regimes`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from torchroute.errors import ConfigError

#: the rules a run may name; ``[low_max, high_min]`` (two rhos) is the fifth form
RULE_NAMES = ("auto", "cabs", "tertiles")

#: the CABS paper's cuts ``(low_max, high_min)``
CABS_CUTS = (300.0, 800.0)
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


@dataclass(frozen=True)
class RegimeRule:
    """The cuts of one run's cost regimes and the rule that chose them.

    Attributes:
        name: ``cabs``, ``tertiles`` or ``cuts`` (the user's).
        low_max: the largest rho of the low regime.
        high_min: the smallest rho of the high regime.
    """

    name: str
    low_max: float
    high_min: float

    def of(self, rho: float) -> str:
        """The regime of one ``rho``."""
        if rho <= self.low_max:
            return "low"
        return "high" if rho >= self.high_min else "medium"

    def describe(self) -> str:
        """One sentence for the report: the rule and its cuts."""
        how = {
            "cabs": "the CABS paper's fixed cuts",
            "tertiles": "tertiles of the run's rhos",
            "cuts": "the cuts report_regimes gave",
        }[self.name]
        low, high = f"{self.low_max:g}", f"{self.high_min:g}"
        return f"Cost regimes by {how}: low: rho <= {low}, medium: between, high: rho >= {high}."


def regime_rule(rhos: Iterable[float], rule: RuleSpec | None = None) -> RegimeRule:
    """The regime cuts of a run whose trials have ``rhos`` under ``rule`` (module docstring;
    ``None``: ``auto``)."""
    spec = check_regime_rule(rule)
    if isinstance(spec, tuple):
        return RegimeRule("cuts", *spec)
    cabs = RegimeRule("cabs", *CABS_CUTS)
    values = np.unique(np.asarray([float(r) for r in rhos], dtype=np.float64))
    if spec == "cabs" or values.size == 0:
        return cabs
    low, _, high = np.array_split(values, 3)
    high_min = float(high[0]) if high.size else float("inf")
    tertiles = RegimeRule("tertiles", float(low[-1]), high_min)
    if spec == "auto" and _count(cabs, values) >= _count(tertiles, values):
        return cabs
    return tertiles


def _count(rule: RegimeRule, rhos: np.ndarray) -> int:
    """How many regimes ``rule`` puts ``rhos`` into."""
    return len({rule.of(float(r)) for r in rhos})


__all__ = ["CABS_CUTS", "RULE_NAMES", "RegimeRule", "RuleSpec", "check_regime_rule", "regime_rule"]
