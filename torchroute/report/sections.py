"""Report sections: the built-in ones by name, and those a run's config declares.

A section is a function ``(results, curves, out_dir) -> markdown lines`` (see
:data:`Section`). A preset declares its sections in the ``report_sections`` key of its
config (dotted ``module.function`` paths, or built-in names), so a new family of results
adds its section module and names it in its config, and nothing in :mod:`torchroute.report`
is edited. Without the key a report has the default sections
(:data:`torchroute.run.report_sections.DEFAULT_SECTIONS`, where the key is checked).

``torchroute report DIR --section NAME`` chooses sections *by name* (:func:`choose_sections`)
among the built-in ones (:data:`torchroute.run.report_sections.BUILTIN_SECTIONS`) and those
the run's ``config.yaml`` declares; nothing is imported from a dotted path given on the
command line, and a section a run folder declares is resolved as its ``_target_``s are
(:mod:`torchroute.run.trust`): a function of torchroute or of a ``--trust`` package, found
without calling anything.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pandas as pd

from torchroute.errors import SectionError
from torchroute.run.report_sections import (
    BUILTIN_SECTIONS,
    check_section_targets,
)

#: ``(results, curves, out_dir) -> markdown lines``
Section = Callable[[pd.DataFrame, pd.DataFrame, Path], list[str]]


def load_section(target: str | Section) -> Section:
    """Import ``target`` (``package.module.function`` of a config) and return the function
    (a function given as such is returned as it is)."""
    if not isinstance(target, str):
        return target
    module_name, _, attr = target.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SectionError(f"report_sections: cannot import {module_name!r} ({exc})") from exc
    section = getattr(module, attr, None)
    if not callable(section):
        raise SectionError(f"report_sections: {target!r} is not a function in {module_name}")
    return section


def load_sections(targets: Sequence[str | Section] | None = None) -> list[Section]:
    """The section functions of ``targets`` (the default sections when ``None``)."""
    if targets is not None and all(callable(t) for t in targets):
        return list(targets)
    return [load_section(t) for t in check_section_targets(targets)]


def declared_sections(dirs: Iterable[str | Path]) -> dict[str, str]:
    """Section name -> dotted path: the built-in ones, then those the ``report_sections``
    of each run's ``config.yaml`` declares (named by their function, e.g. ``graph_section``;
    a file that cannot be read declares none)."""
    names = dict(BUILTIN_SECTIONS)
    for folder in dirs:
        for path in _declared_list(folder):
            if "." in path:
                names.setdefault(path.rpartition(".")[2], path)
    return names


def run_sections(
    dirs: Sequence[str | Path], trusted: Iterable[str] = ()
) -> tuple[list[Section] | None, list[str]]:
    """The sections a re-rendered report of ``dirs`` takes without ``--section``: those the
    runs' ``report_sections`` declare (each run's ``config.yaml``, in order, once each), as
    the run's own report had them, resolved as :func:`choose_sections` resolves a name.

    Returns ``(sections, skipped)``: ``sections`` is ``None`` when no run declares any (the
    default sections then); ``skipped`` has one line per declared section left out because
    it is neither torchroute's nor of a ``trusted`` package (nothing of it was imported).
    """
    names: list[str] = []
    for folder in dirs:
        for path in _declared_list(folder):
            name = BUILTIN_SECTIONS.get(path, path)
            if name not in names:
                names.append(name)
    if not names:
        return None, []
    known = declared_sections(dirs)
    by_path = {path: name for name, path in known.items()}
    chosen: list[Section] = []
    skipped: list[str] = []
    for path in names:
        name = by_path.get(path)
        if name is None:  # a hand-edited config: no built-in name, no dotted path
            skipped.append(f"{path!r}: not a section name or a dotted module.function path")
            continue
        try:
            chosen.append(_trusted_section(name, path, trusted))
        except SectionError as exc:
            skipped.append(f"{name}: {exc}")
    return chosen, skipped


def _declared_list(folder: str | Path) -> list[str]:
    """The ``report_sections`` strings of ``folder/config.yaml`` (``[]`` when it has none or
    cannot be read)."""
    import yaml

    try:
        config = yaml.safe_load((Path(folder) / "config.yaml").read_text())
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return []
    declared = config.get("report_sections") if isinstance(config, dict) else None
    if not isinstance(declared, list):
        return []
    return [t for t in declared if isinstance(t, str)]


def choose_sections(
    names: Sequence[str], dirs: Iterable[str | Path], trusted: Iterable[str] = ()
) -> list[Section]:
    """The section functions ``--section NAME`` chose, by name (a known dotted path is
    taken as its name); a section the run folder declares is resolved without being
    called and kept only when it is a function of torchroute or a ``trusted`` package.

    Raises:
        SectionError: a name no section has, or a declared section that is not trusted.
    """
    known = declared_sections(dirs)
    by_path = {path: name for name, path in known.items()}
    chosen: list[Section] = []
    for name in names:
        name = by_path.get(name, name)
        if name not in known:
            raise SectionError(
                f"--section {name!r}: expected a section name, one of {sorted(known)}; "
                "sections are chosen by name, never imported from the command line"
            )
        try:
            chosen.append(_trusted_section(name, known[name], trusted))
        except SectionError as exc:
            raise SectionError(f"--section {name}: {exc}") from None
    return chosen


def _trusted_section(name: str, path: str, trusted: Iterable[str]) -> Section:
    """The section ``name`` at ``path``: a built-in one imported, a declared one resolved
    without being called and kept only when it is a function of torchroute or of a
    ``trusted`` package (:class:`~torchroute.errors.SectionError` otherwise)."""
    from torchroute.run.trust import UntrustedTarget, describe, resolve

    if name in BUILTIN_SECTIONS:
        return load_section(path)
    prefixes = ("torchroute.", *(t if t.endswith(".") else t + "." for t in trusted))
    try:
        section = resolve(path, trusted)
    except UntrustedTarget as exc:
        raise SectionError(
            f"the run declares {path!r}, which {exc}; a plug-in's section is used only with "
            "--trust <its package>"
        ) from None
    module = getattr(section, "__module__", "") or ""
    if not inspect.isfunction(section) or not module.startswith(prefixes):
        raise SectionError(
            f"the run declares {path!r}, {describe(section)}; a section of a plug-in is used "
            "only with --trust <its package>"
        )
    return section
