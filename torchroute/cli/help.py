"""What ``torchroute <command> --help`` says about the configs, and "did you mean" hints.

Everything is read from the YAML files of the config folder (``configs/``): the groups are
its sub-folders, a group's options are the ``.yaml`` files in it, an option's one-line
description is the first comment of its file (after a ``# @package`` line), and the
top-level keys with their defaults and comments are the lines of the primary config
(``simulate.yaml`` or ``pretrain.yaml``).
"""

from __future__ import annotations

import difflib
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

#: Width of the description column of the help text.
WIDTH = 100

_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w]*):(?P<value>[^#]*)(#(?P<note>.*))?$")


def description(path: Path) -> str:
    """The one-line description of a config file: the first sentence of its first comment.

    Args:
        path: a YAML config file.

    Returns:
        The text of the leading comment block up to its first full stop (at most 150
        characters), or ``""`` when the file does not start with a comment.
    """
    lines: list[str] = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("# @package"):
            continue
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    text = " ".join(lines)
    for match in re.finditer(r"(?<=[a-z0-9)\]])\.(\s|$)", text):
        if not text[: match.start()].endswith(ABBREVIATIONS):  # "e.g." ends no sentence
            text = text[: match.start()]
            break
    return shorten(text.rstrip(" .,:;"))


#: words whose full stop ends no sentence
ABBREVIATIONS = ("e.g", "i.e", "etc", "vs", "cf", "approx")


def shorten(text: str, limit: int = 150) -> str:
    """``text`` cut to at most ``limit`` characters at the end of a phrase (a ``;``, ``:``
    or ``,`` or before a parenthesis, never inside one), else of a word, marked ``...``."""
    if len(text) <= limit:
        return text
    head = text[: limit - 4]
    cuts = [
        m.start()
        for m in re.finditer(r"[;:,](?=\s)|\s(?=\()|\s(?=-\s)", head)
        if head[: m.start()].count("(") == head[: m.start()].count(")")
    ]
    cut = cuts[-1] if cuts and cuts[-1] > limit // 3 else head.rfind(" ")
    return text[:cut].rstrip(" ,;:") + " ..."


def groups(directory: Path | Sequence[Path]) -> dict[str, list[str]]:
    """The config groups of a config folder (or of the folders of a search path) and their
    options.

    Args:
        directory: the config folder, or several (their options are pooled).

    Returns:
        ``{group: [option, ...]}``, both sorted by name.
    """
    folders = [directory] if isinstance(directory, Path) else list(directory)
    found: dict[str, set[str]] = {}
    for folder in folders:
        for sub in folder.iterdir():
            if sub.is_dir() and any(sub.glob("*.yaml")):
                found.setdefault(sub.name, set()).update(p.stem for p in sub.glob("*.yaml"))
    return {name: sorted(found[name]) for name in sorted(found)}


def top_level_keys(path: Path) -> list[tuple[str, str, str]]:
    """The keys of a primary config with their defaults and comments, in file order.

    A nested block (``features:``) contributes its keys as dotted names
    (``features.pca_dim``); ``defaults`` and ``_target_``/``_partial_`` lines are left out.

    Args:
        path: ``simulate.yaml`` or ``pretrain.yaml``.

    Returns:
        ``[(dotted key, default as written, comment), ...]``.
    """
    rows: list[tuple[str, str, str]] = []
    parent = ""
    in_defaults = False
    for raw in path.read_text().splitlines():
        match = _KEY_LINE.match(raw)
        if not match:
            continue
        indent, key = len(match["indent"]), match["key"]
        value, note = match["value"].strip(), (match["note"] or "").strip()
        if indent == 0:
            in_defaults = key == "defaults"
            parent = key if not value else ""
            if in_defaults:
                continue
            rows.append((key, value, note))
        elif parent and not in_defaults and indent == 2 and not key.startswith("_"):
            rows.append((f"{parent}.{key}", value, note))
    return rows


def default_groups(path: Path) -> dict[str, str]:
    """The groups a primary config's defaults list selects, with the option it selects."""
    node = OmegaConf.load(path)
    chosen: dict[str, str] = {}
    for entry in node.get("defaults", []):
        if isinstance(entry, DictConfig | dict):
            for group, option in dict(entry).items():
                chosen[str(group).removeprefix("override ").lstrip("/")] = str(option)
    return chosen


def _rows(rows: Sequence[tuple[str, str]], indent: int = 2) -> list[str]:
    """Two aligned columns, the second wrapped to :data:`WIDTH`."""
    if not rows:
        return []
    width = min(max(len(a) for a, _ in rows) + 2, 34)
    out = []
    for left, right in rows:
        pad = " " * (indent + width)
        head = " " * indent + left.ljust(width)
        if len(head) > indent + width:  # a long name: the text starts on the next line
            out.append(head.rstrip())
            head = pad
        body = textwrap.wrap(right, WIDTH - len(pad)) or [""]
        out.append(head + body[0])
        out.extend(pad + line for line in body[1:])
    return out


_OVERRIDES = """\
how overrides work (Hydra syntax, any number, in any order):
  key=value                    set a key: rounds=200 rhos=[0,500] features.pca_dim=16
  group=option                 pick a group's option: data=table env=table_subset
  experiment=<preset>          a preset: its groups, keys and learners (listed below)
  +learner@learners.<name>=<option>
                               add a learner under a name: +learner@learners.ucb=linucb
  learners.<name>.<arg>=value  set a learner's argument: learners.linucb.alpha=0.5
  run_learners=[a,b]           run only these learners of the preset
  +key=value / ~key            add a key the config lacks / remove one: ~logger (no wandb)
  --cfg                        print the composed config and exit (nothing runs)"""

_PRETRAIN_OVERRIDES = """\
how overrides work (Hydra syntax, any number, in any order):
  key=value                    set a key: module.lr=3e-4 trainer.max_epochs=20 seed=1
  group=option                 pick a group's option: data=routerbench encoder=hf
  experiment=<preset>          a preset (routerbench_oracles)
  +module.<arg>=value          pass a constructor argument the config does not list
  logger.mode=disabled         no wandb run (offline by default)
  --cfg                        print the composed config and exit (nothing runs)"""


def config_help(command: str, directory: Path, extra: Sequence[Path] = ()) -> str:
    """The config part of ``torchroute <command> --help``.

    Args:
        command: ``simulate``, ``sweep``, ``gap`` or ``pretrain``.
        directory: the config folder.
        extra: folders added after it (``--config-dir``): their options, presets and
            learners are listed with the packaged ones.

    Returns:
        The text: how overrides work, the groups and their options (the default marked
        ``*``), the experiment presets with their descriptions, and the top-level keys
        with their defaults.
    """
    folders = [directory, *extra]
    primary = directory / f"{primary_config(command)}.yaml"
    chosen = default_groups(primary)
    all_groups = groups(folders)
    shown = [g for g in all_groups if g in chosen or (g == "learner" and command != "pretrain")]
    overrides = _PRETRAIN_OVERRIDES if command == "pretrain" else _OVERRIDES
    source = ", ".join(str(folder) for folder in folders)
    lines = [overrides, "", f"config groups (from {source}; * = the default):"]
    for group in shown:
        if group == "experiment":
            continue
        options = []
        for option in all_groups[group]:
            if group == "sweep" and option == "wandb_sweep":
                continue  # a `wandb sweep` file, not a Hydra option
            options.append(option + ("*" if chosen.get(group) == option else ""))
        head = f"  {group}="
        lines.extend(
            textwrap.wrap(
                " ".join(options),
                WIDTH,
                initial_indent=head.ljust(16),
                subsequent_indent=" " * 16,
            )
        )
    if "learner" in shown:
        lines.append("  (learner options are added with +learner@learners.<name>=<option>)")
    lines += ["", "experiment presets (experiment=<name>):"]
    lines += _rows(
        [
            (p.stem + ("*" if chosen.get("experiment") == p.stem else ""), description(p))
            for p in _files(folders, "experiment")
        ]
    )
    if "learner" in shown:
        lines += ["", "learners (+learner@learners.<name>=<option>):"]
        lines += _rows([(p.stem, description(p)) for p in _files(folders, "learner")])
    lines += ["", f"keys of {primary.name} (key = default):"]
    lines += _rows(
        [
            (f"{key} = {value}" if value else f"{key}:", note)
            for key, value, note in top_level_keys(primary)
        ]
    )
    return "\n".join(lines)


def _files(folders: Sequence[Path], group: str) -> list[Path]:
    """The YAML files of ``group`` in every folder, sorted by name."""
    return sorted((p for f in folders for p in (f / group).glob("*.yaml")), key=lambda p: p.stem)


def primary_config(command: str) -> str:
    """The primary config a command composes: ``pretrain`` or ``simulate``."""
    return "pretrain" if command == "pretrain" else "simulate"


def closest(name: str, candidates: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest candidate to ``name``, or ``""``."""
    match = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.5)
    return f"; did you mean '{match[0]}'?" if match else ""


def diagnose(
    command: str, overrides: Sequence[str], directory: Path | Sequence[Path], compose
) -> str | None:
    """A one-line explanation of why ``overrides`` do not compose, with the closest name.

    Checks, in order, each ``group=option`` override against the group's files, then each
    ``key=value`` override against the keys of the config composed from the groups alone.

    Args:
        command: the subcommand (picks the primary config).
        overrides: the command line's overrides.
        directory: the config folder, or the folders of the search path.
        compose: ``compose(name, overrides) -> DictConfig``.

    Returns:
        The message, or ``None`` when no override is at fault.
    """
    all_groups = groups(directory)
    group_overrides: list[str] = []
    key_overrides: list[tuple[str, str]] = []
    for override in overrides:
        if "=" not in override or override[0] in "+~":
            continue
        key, value = override.split("=", 1)
        key = key.removeprefix("override ").lstrip("/")
        if "@" in key:
            continue
        if key in all_groups:
            if value in ("null", "") or (key == "sweep" and value == "wandb_sweep"):
                group_overrides.append(override)
                continue
            if value not in all_groups[key]:
                return (
                    f"unknown option '{value}' of config group '{key}' (no "
                    f"{key}/{value}.yaml){closest(value, all_groups[key])} "
                    f"(options: {', '.join(all_groups[key])})"
                )
            group_overrides.append(override)
        else:
            key_overrides.append((key, override))
    try:
        base = compose(primary_config(command), group_overrides)
    except Exception:  # the groups alone fail: a group set to null, or nothing to say
        for override in group_overrides:
            key, value = override.split("=", 1)
            if value in ("null", ""):
                return (
                    f"{override}: the config group '{key.removeprefix('override ')}' cannot be "
                    f"null in this command; leave it out with ~{key.removeprefix('override ')}"
                )
        return None
    for key, _ in key_overrides:
        node = base
        parts = key.split(".")
        for depth, part in enumerate(parts):
            if not isinstance(node, DictConfig):
                break
            keys = list(node.keys())  # with ``???`` (missing) values, which ``in`` skips
            if part not in keys:
                static = _warm_start_on_a_static_learner(parts, depth, node)
                if static:
                    return static
                where = ".".join(parts[:depth]) or f"{primary_config(command)}.yaml"
                known = [str(k) for k in keys]
                if not depth:
                    known += list(all_groups)
                return (
                    f"unknown key '{key}' (no '{part}' in {where}){closest(part, known)} "
                    f"(use +{key}=... to add a key the config does not have)"
                )
            if OmegaConf.is_missing(node, part):
                break
            node = node.get(part)
    return None


def _warm_start_on_a_static_learner(parts: list[str], depth: int, node: Any) -> str | None:
    """The message for a ``learners.<name>.warm_*`` key given to a learner that does not
    learn online (its config has no such key), else ``None``."""
    from torchroute.learners.warm_options import WARM_KEYS
    from torchroute.run.classes import own_learner_class

    if depth != 2 or parts[0] != "learners" or parts[2] not in WARM_KEYS:
        return None
    cls = own_learner_class(OmegaConf.to_container(node, resolve=False))
    if cls is None or cls.learns_online:
        return None
    return (
        f"{'.'.join(parts)}: a warm start applies to online learners; {cls.__name__} does "
        "not learn online (a static router is fitted on the train split already)"
    )
