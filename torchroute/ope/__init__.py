"""Off-policy evaluation of routers on logged decisions (estimator math is in
:mod:`torchroute.functional.ope`, :mod:`torchroute.functional.ope_model` and
:mod:`torchroute.ope.replay`).

The logged-decisions table (:class:`DecisionLog`), its reader, cell checks and writer are
data (:mod:`torchroute.data.decisions`, :mod:`~torchroute.data.decision_cells`,
:mod:`~torchroute.data.decision_io`); a simulation's learner is logged as a behaviour policy
by the run (:mod:`torchroute.run.decision_logger`). Here:

- :mod:`~torchroute.ope.evaluate`: ``torchroute evaluate``, with its keys
  (:mod:`~torchroute.ope.keys`), target policies (:mod:`~torchroute.ope.targets`), the log's
  limits (:mod:`~torchroute.ope.limits`) and report (:mod:`~torchroute.ope.report`).

The table's names are importable from here (``torchroute.ope.load_decisions``); they load on
first use, so that ``torchroute.ope.keys`` stays free of torch for ``--help``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

#: public name -> the module that defines it
_EXPORTS = {
    "DecisionLog": "torchroute.data.decisions",
    "load_decisions": "torchroute.data.decisions",
    "DecisionLogError": "torchroute.data.decision_cells",
    "save_decisions": "torchroute.data.decision_io",
}


def __getattr__(name: str) -> Any:
    """The public name ``name`` from its module (imported on first use)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'torchroute.ope' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)


__all__ = ["DecisionLog", "DecisionLogError", "load_decisions", "save_decisions"]
