"""``torchroute gap``: the policy-class gap table on a routing table.

:mod:`~torchroute.gap.fit` fits the best policy of each class and measures its gap;
:mod:`~torchroute.gap.options` reads a config's ``gap`` section.
"""

from torchroute.gap.fit import fit_policies, gap, relative_improvements, run_gap
from torchroute.gap.options import GapConfigError, GapOptions, gap_presets

__all__ = [
    "GapConfigError",
    "GapOptions",
    "fit_policies",
    "gap",
    "gap_presets",
    "relative_improvements",
    "run_gap",
]
