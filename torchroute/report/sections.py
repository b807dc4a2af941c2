"""Report sections named by ``_target_``: the ``report_sections`` key of a simulate config.

A section is a function ``(results, curves, out_dir) -> markdown lines`` (see
:data:`torchroute.report.Section`); a preset lists the dotted paths of its sections, so a
new family of results adds its section module and names it in its config, and nothing in
:mod:`torchroute.report` is edited. Without the key a report has :data:`DEFAULT_SECTIONS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from torchroute.errors import UserError

#: ``(results, curves, out_dir) -> markdown lines``
Section = Callable[[pd.DataFrame, pd.DataFrame, Path], list[str]]

#: the sections of a report whose config names none
DEFAULT_SECTIONS: tuple[str, ...] = (
    "torchroute.report.subset.subset_section",
    "torchroute.report.cabs.cabs_section",
    "torchroute.report.hpg.hpg_section",
    "torchroute.report.routing.routing_section",
)


class SectionError(UserError, ValueError):
    """A ``report_sections`` entry that does not name an importable callable."""


def check_section_targets(targets: object) -> tuple[str, ...]:
    """Validate a ``report_sections`` value: a list of dotted ``module.function`` strings."""
    if targets is None:
        return DEFAULT_SECTIONS
    if isinstance(targets, str) or not isinstance(targets, Sequence):
        raise SectionError(
            f"report_sections must be a list of dotted module.function paths, got {targets!r}"
        )
    bad = [t for t in targets if not isinstance(t, str) or "." not in t]
    if bad:
        raise SectionError(f"report_sections entries must be dotted module.function paths: {bad}")
    return tuple(targets)


def load_section(target: str) -> Section:
    """Import ``target`` (``package.module.function``) and return the section function."""
    module_name, _, attr = target.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SectionError(f"report_sections: cannot import {module_name!r} ({exc})") from exc
    section = getattr(module, attr, None)
    if not callable(section):
        raise SectionError(f"report_sections: {target!r} is not a function in {module_name}")
    return section


def load_sections(targets: Sequence[str] | None = None) -> list[Section]:
    """The section functions of ``targets`` (:data:`DEFAULT_SECTIONS` when ``None``)."""
    return [load_section(t) for t in check_section_targets(targets)]
