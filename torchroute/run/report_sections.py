"""The ``report_sections`` option of a run: built-in section names or dotted paths.

Checked when the run's options are built (:class:`~torchroute.run.options.RunOptions`),
before anything runs; the report imports the sections
(:mod:`torchroute.report.sections`).
"""

from __future__ import annotations

from collections.abc import Sequence

from torchroute.errors import SectionError

#: torchroute's own sections, by the name ``--section`` takes
BUILTIN_SECTIONS: dict[str, str] = {
    "subset": "torchroute.report.subset.subset_section",
    "cabs": "torchroute.report.cabs.cabs_section",
    "hpg": "torchroute.report.hpg.hpg_section",
    "routing": "torchroute.report.routing.routing_section",
    "budgets": "torchroute.report.budgets.budget_section",
}

#: the sections of a report whose config names none
DEFAULT_SECTIONS: tuple[str, ...] = tuple(BUILTIN_SECTIONS.values())


def check_section_targets(targets: object) -> tuple[str, ...]:
    """Validate a ``report_sections`` value: a list of built-in names or dotted
    ``module.function`` strings (a name becomes its dotted path)."""
    if targets is None:
        return DEFAULT_SECTIONS
    if isinstance(targets, str) or not isinstance(targets, Sequence):
        raise SectionError(
            f"report_sections must be a list of dotted module.function paths, got {targets!r}"
        )
    bad = [
        t for t in targets if not isinstance(t, str) or ("." not in t and t not in BUILTIN_SECTIONS)
    ]
    if bad:
        raise SectionError(
            f"report_sections entries must be dotted module.function paths or one of "
            f"{list(BUILTIN_SECTIONS)}: {bad}"
        )
    return tuple(BUILTIN_SECTIONS.get(t, t) for t in targets)


__all__ = ["BUILTIN_SECTIONS", "DEFAULT_SECTIONS", "check_section_targets"]
