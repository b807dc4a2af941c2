"""``torchroute data inspect|convert``: what a loader sees in a table, and the generic format.

::

    torchroute data inspect results.csv score_pattern={arm} cost_pattern={arm}_cost id_column=null
    torchroute data inspect scores/ --loader json_scores costs=prices.csv
    torchroute data convert results.csv table.parquet score_pattern={arm} cost_pattern={arm}_cost

Loader options are ``key=value`` pairs, the same keys as ``data.<key>=...`` of
``torchroute simulate`` (values are read as YAML: ``null``, ``true``, ``100``,
``{gpt-4o: {input_per_mtok: 2.5, output_per_mtok: 10}}``).
"""

from __future__ import annotations

import argparse
import inspect as pyinspect
import logging
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from torchroute.data.generic import save_table
from torchroute.data.json_scores import load_json_scores
from torchroute.data.loader import load_table
from torchroute.data.routerbench import load_routerbench
from torchroute.data.table import SPLITS, RoutingTable, TableError
from torchroute.io import NotWritableError, check_writable_folder

LOADERS: dict[str, Callable[..., RoutingTable]] = {
    "table": load_table,
    "json_scores": load_json_scores,
    "routerbench": load_routerbench,
}


def pick_loader(path: str | Path, loader: str = "auto") -> str:
    """``loader``, or for ``"auto"``: ``json_scores`` for a folder or ``.json``, else ``table``."""
    if loader != "auto":
        if loader not in LOADERS:
            raise TableError(f"loader must be auto or one of {sorted(LOADERS)}, got {loader!r}")
        return loader
    path = Path(path)
    return "json_scores" if path.is_dir() or path.suffix.lower() == ".json" else "table"


def parse_options(pairs: Sequence[str]) -> dict[str, Any]:
    """``["key=value", ...]`` -> ``{key: yaml value}`` (``data.`` prefixes are dropped)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise TableError(f"loader options are key=value, got {pair!r}")
        key = key.removeprefix("data.")
        if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"":
            out[key] = value[1:-1]  # quoted as for Hydra: data.score_pattern='{arm}'
        elif "{arm}" in value or key.endswith("_pattern"):
            out[key] = value  # a column pattern, never YAML ({arm} would read as a mapping)
        else:
            try:
                out[key] = yaml.safe_load(value) if value != "" else ""
            except yaml.YAMLError:
                out[key] = value
    return out


def options_used(loader: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Every option of ``loader`` with the value it gets (given, else its default)."""
    params = pyinspect.signature(LOADERS[loader]).parameters
    unknown = sorted(set(options) - set(params) - {"path"})
    if unknown:
        known = [p for p in params if p != "path"]
        raise TableError(f"{loader} loader has no options {unknown}; it takes {known}")
    return {name: options.get(name, p.default) for name, p in params.items() if name != "path"}


class _Notes(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname.lower()}: {record.getMessage()}")


def load_with_notes(
    path: str | Path, loader: str = "auto", **options: Any
) -> tuple[RoutingTable, str, list[str]]:
    """Load ``path`` and collect what the loader logged and warned (arms, splits, drops)."""
    name = pick_loader(path, loader)
    options_used(name, options)
    notes = _Notes()
    logger = logging.getLogger("torchroute.data")
    level, propagate = logger.level, logger.propagate
    logger.addHandler(notes)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # printed once, in the notes
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            table = LOADERS[name](path, **options)
    finally:
        logger.removeHandler(notes)
        logger.setLevel(level)
        logger.propagate = propagate
    return table, name, notes.lines + [f"warning: {w.message}" for w in caught]


def _range(values: np.ndarray) -> str:
    return f"[{values.min():.4g}, {values.max():.4g}]"


def describe(table: RoutingTable, loader: str, options: Mapping[str, Any], notes: list[str]) -> str:
    """The text ``torchroute data inspect`` prints."""
    scores, costs = table.scores.numpy(), table.costs.numpy()
    splits = {s: table.split.count(s) for s in SPLITS}
    lines = [
        f"source: {table.source}",
        f"loader: {loader}",
        f"queries: {table.num_queries}   arms: {table.num_arms}   "
        + "   ".join(f"{s}: {n}" for s, n in splits.items()),
        f"scores: {_range(scores)}   costs: {_range(costs)}",
        f"text: {'yes' if table.text is not None else 'no'}",
    ]
    dropped = [n for n in notes if "queries with missing" in n]
    lines.append(f"missing cells: {'; '.join(dropped) if dropped else 'none'}")
    if table.groups is not None:
        counts = Counter(table.groups).most_common()
        shown = ", ".join(f"{g} ({n})" for g, n in counts[:12])
        more = f", ... ({len(counts) - 12} more)" if len(counts) > 12 else ""
        lines.append(f"groups: {len(counts)}: {shown}{more}")
    else:
        lines.append("groups: none")
    lines += ["", "arm | mean score | score range | mean cost | cost range"]
    for k, arm in enumerate(table.arm_names):
        lines.append(
            f"{arm} | {scores[:, k].mean():.4g} | {_range(scores[:, k])} | "
            f"{costs[:, k].mean():.4g} | {_range(costs[:, k])}"
        )
    lines += ["", "loader options used:"]
    lines += [f"  {k}: {v!r}" for k, v in options_used(loader, options).items()]
    if notes:
        lines += ["", "loader notes:", *[f"  {n}" for n in notes]]
    return "\n".join(lines)


def inspect_table(path: str | Path, loader: str = "auto", **options: Any) -> str:
    """What the loader sees in ``path``: arms, queries, splits, ranges, groups, options."""
    table, name, notes = load_with_notes(path, loader, **options)
    return describe(table, name, options, notes)


def convert_table(
    path: str | Path,
    out: str | Path,
    loader: str = "auto",
    layout: str = "wide",
    *,
    overwrite: bool = False,
    **options: Any,
) -> tuple[RoutingTable, Path]:
    """Load ``path`` with ``options`` and write it in the generic format (Parquet or CSV).

    Refuses, before reading anything, an output that is the input, lies inside an input
    folder, already exists (unless ``overwrite``), or has another suffix than ``.csv`` /
    ``.parquet``; the output is written atomically.
    """
    check_convert_output(path, out, overwrite=overwrite)
    table, _, _ = load_with_notes(path, loader, **options)
    return table, save_table(table, out, format=layout)


def check_convert_output(path: str | Path, out: str | Path, *, overwrite: bool = False) -> None:
    """Raise :class:`TableError` unless ``out`` is a safe new output for converting ``path``."""
    src, dst = Path(path).resolve(), Path(out).resolve()
    if dst.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise TableError(f"{out}: the output must end in .csv or .parquet")
    if dst == src or (dst.exists() and src.exists() and dst.samefile(src)):
        raise TableError(f"{out}: the output is the input file; write the table elsewhere")
    if src.is_dir() and dst.is_relative_to(src):
        raise TableError(f"{out}: the output lies inside the input folder {path}; write elsewhere")
    if dst.is_dir():
        raise TableError(f"{out}: is a folder; expected a .csv or .parquet file name")
    for root, preset in shipped_data_roots().items():
        if dst.is_relative_to(root):
            raise TableError(
                f"{out}: the output lies inside {root}, a data folder the packaged preset "
                f"data={preset} reads; runs would read what convert writes there: write elsewhere"
            )
    if dst.exists() and not overwrite:
        raise TableError(f"{out}: already exists; pass --overwrite to replace it")
    try:
        check_writable_folder(dst.parent, "the output's folder")
    except NotWritableError as err:
        raise TableError(f"{out}: {err}") from err


def shipped_data_roots() -> dict[Path, str]:
    """The folders the packaged data presets (``configs/data/*.yaml``) read from, resolved
    as runs resolve them (``${data_root:...}`` under :func:`~torchroute.data_root.data_root`),
    with the preset reading each: the folder holding each file or folder a preset names."""
    from omegaconf import OmegaConf

    from torchroute.configs_path import config_dir
    from torchroute.data_root import data_root

    roots: dict[Path, str] = {}
    for preset in sorted((config_dir() / "data").glob("*.yaml")):
        try:
            node = OmegaConf.to_container(OmegaConf.load(preset), resolve=False)
        except Exception:  # a preset that does not parse names no folder
            continue
        for key, value in (node or {}).items():
            if not isinstance(value, str) or not str(key).endswith(("path", "csv", "root")):
                continue
            if value.startswith("${data_root:") and value.endswith("}"):
                value = str(data_root()[0] / value[len("${data_root:") : -1])
            if value in ("???", "") or "${" in value:
                continue
            roots.setdefault(Path(value).expanduser().resolve().parent, preset.stem)
    return roots


def loader_keys_help() -> str:
    """The loader options (``key=value``) with their defaults and notes, from
    ``configs/data/table.yaml``: the ``keys`` section of ``torchroute data --help``."""
    from torchroute.configs_path import config_dir

    lines = ["loader options (key=value after the path, as data.<key> of data=table):"]
    for line in (config_dir() / "data" / "table.yaml").read_text().splitlines():
        if line and not line.startswith(("#", " ", "_target_", "path:")):
            lines.append(f"  {line}")
    return "\n".join(lines)


def data_command(argv: Sequence[str]) -> None:
    """``torchroute data inspect|convert ...`` (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="torchroute data",
        description=__doc__.splitlines()[0],
        epilog=loader_keys_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="action", required=True)
    for action, help_ in [
        ("inspect", "print what the loader sees in a table"),
        ("convert", "write a table in the generic format (.parquet or .csv)"),
    ]:
        p = sub.add_parser(action, help=help_)
        p.add_argument("path", help="table file or folder")
        if action == "convert":
            p.add_argument("out", help="output .parquet or .csv file")
            p.add_argument("--layout", choices=["wide", "long"], default="wide")
            p.add_argument("--overwrite", action="store_true", help="replace an existing output")
        p.add_argument("options", nargs="*", help="loader options key=value (as data.<key>)")
        p.add_argument("--loader", default="auto", choices=["auto", *LOADERS])
    args = parser.parse_args(list(argv))
    if args.action == "convert" and "=" in args.out and not Path(args.out).suffix:
        raise TableError(
            f"convert needs the output file after the input (convert <table> <out.parquet> "
            f"[key=value ...]); got the option {args.out!r} in its place"
        )
    options = parse_options(args.options)
    if args.action == "inspect":
        print(inspect_table(args.path, args.loader, **options))
    else:
        table, out = convert_table(
            args.path, args.out, args.loader, args.layout, overwrite=args.overwrite, **options
        )
        print(f"wrote {out} ({table.num_queries} queries x {table.num_arms} arms, {args.layout})")
