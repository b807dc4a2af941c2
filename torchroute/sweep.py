"""``torchroute sweep``: choose learner hyper-parameters on the validation split, test once.

``torchroute sweep experiment=<preset> sweep=<grid>`` reads ``sweep.grid`` (see
``configs/sweep/``), a map ``<learner>: {<param>: [values]}``; each learner's grid points
are the product of its value lists. Then:

1. **Validation.** Every grid point runs on ``split=val`` over the configured ``rhos`` and
   ``seeds``. A learner whose class lists every swept parameter in
   ``per_trial_hparams`` (LinUCB ``alpha``/``lam``, LinTS ``v``/``lam``, epsilon-greedy
   ``eps0``/``lam``, SquareCB ``lam``: ``torchroute.learners.linear``) runs all its ``G``
   grid points as one batched run: each ``(rho, seed)`` trial is repeated once per grid
   point and the learner gets ``R * G`` per-trial values. Any other learner (e.g.
   NeuralUCB ``lr``) gets one run per grid point.
2. **Selection.** Per learner and cost regime (:func:`torchroute.report.cost_regime`: low
   ``rho <= 300``, medium, high ``rho >= 800``) the grid point with the highest mean
   ``avg_utility`` over the regime's validation trials is chosen (ties: the first grid
   point). Only validation results are read.
3. **Test.** The chosen point of each regime is then evaluated once on ``split=test`` on
   that regime's rhos (a batched learner in one run, with per-trial values by regime).

Every run of the sweep uses ``rng=per_trial``: a trial draws its tie-breaks, exploration
and initial weights from its own stream, keyed by its labels (``rho, seed``) and
``loop_seed``. The repeated trials of a batched grid point have the labels of the plain
trials, so the slice of a grid point is exactly ``torchroute simulate rng=per_trial`` with
the point's values on the ``R`` plain trials, as is each per-point run and each test run.
``configs/sweep/wandb_sweep.yaml`` drives the same grid as wandb agents, one ``torchroute
simulate`` per grid point.

Output folder (``out_dir``)::

    sweep_results.csv   learner, batched, point (grid index), the swept parameters, regime,
                        val_utility, chosen, test_utility (chosen rows only)
    chosen.md           the chosen values per learner and regime, with both scores
    val/<learner>[/point-<g>], test/<learner>[/point-<g>]   the simulate runs behind them
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from hydra.utils import get_object
from omegaconf import DictConfig, open_dict

from torchroute.data.table import RoutingTable
from torchroute.features import FeatureMap
from torchroute.io import write_csv_atomic, write_text_atomic
from torchroute.report import REGIMES, cost_regime
from torchroute.run import Built, ConfigError, RunOptions, build, build_learner, run
from torchroute.run.outdir import check_run_folders

log = logging.getLogger(__name__)

VAL, TEST = "val", "test"


@dataclass
class _Sweep:
    """The options, those of each split's runs (the config resolved once per split:
    ``env.split: ${split}``), the table and feature map, the envs by split and trial grid."""

    opts: RunOptions
    bases: dict[str, RunOptions] = field(default_factory=dict)
    table: RoutingTable | None = None
    feature_map: FeatureMap | None = None
    envs: dict[tuple, Built] = field(default_factory=dict)


def grid_points(grid: dict[str, dict[str, list]]) -> dict[str, list[dict[str, Any]]]:
    """``{learner: {param: [values]}}`` -> ``{learner: [{param: value}, ...]}`` (the product,
    last parameter fastest)."""
    out = {}
    for name, params in grid.items():
        keys = list(params)
        out[name] = [dict(zip(keys, combo)) for combo in itertools.product(*params.values())]
    return out


def per_trial_params(node: Mapping[str, Any]) -> tuple[str, ...]:
    """The hyper-parameters the learner of config ``node`` accepts per trial (``[R]``)."""
    if "_target_" not in node:
        return ()  # reported when the learner is built
    try:
        target = get_object(str(node["_target_"]))
    except (ImportError, AttributeError, ValueError):  # likewise
        return ()
    return tuple(getattr(getattr(target, "__self__", target), "per_trial_hparams", ()))


def select(val: pd.DataFrame) -> pd.DataFrame:
    """Mean ``avg_utility`` per learner, grid point and regime on validation, and the choice.

    Args:
        val: one row per validation trial with ``learner``, ``point`` (grid index), ``rho``
            and ``avg_utility``.

    Returns:
        one row per ``(learner, regime, point)`` with ``val_utility`` and ``chosen`` (the
        first grid point with the highest ``val_utility`` of its learner and regime).
    """
    frame = val.assign(regime=val["rho"].map(cost_regime))
    score = frame.groupby(["learner", "regime", "point"])["avg_utility"].mean()
    table = score.rename("val_utility").reset_index()  # sorted by learner, regime, point
    best = table.groupby(["learner", "regime"])["val_utility"].transform("max")
    is_best = table["val_utility"] == best
    first = is_best & (is_best.groupby([table["learner"], table["regime"]]).cumsum() == 1)
    return table.assign(chosen=first)


def run_sweep(cfg: DictConfig) -> pd.DataFrame:
    """Validation runs, selection per regime, one test run of the choices; see the module.

    Writes ``sweep_results.csv`` and ``chosen.md`` in ``out_dir`` and returns the results
    frame. Each run's options are derived with ``dataclasses.replace`` from its split's, so
    a learner value interpolating ``${out_dir}`` (an in-run oracle) names the sweep's folder.
    """
    opts = RunOptions.from_config(cfg)
    if opts.budgets is not None:
        raise ConfigError(
            "budgets: torchroute sweep chooses hyper-parameters per rho regime; run simulate "
            "with budgets (each pacer's start and step are chosen on validation there)"
        )
    check_run_folders(opts, gap_or_sweep=True)
    sw = _Sweep(opts)
    grid = _grid(sw)
    sw.bases = {split: _split_options(cfg, split) for split in (VAL, TEST)}
    shared = build(sw.bases[VAL], env=False)  # the table and feature map of every run
    sw.table, sw.feature_map = shared.table, shared.feature_map
    for split in (VAL, TEST):
        if not (np.asarray(sw.table.split) == split).any():
            raise ConfigError(
                f"{sw.table.source}: split [{split!r}] is empty (the sweep runs split={split}: "
                f"give the table a {split} split, e.g. data.val_fraction=0.1)"
            )
    out_dir = opts.out_dir
    rhos, seeds = list(opts.rhos), list(opts.seeds)
    points = grid_points(grid)
    _check_points(sw, points)  # every grid point builds before the first run writes a file
    batched = {name: _batchable(sw, name, grid[name]) for name in grid}
    for name in grid:
        how = "as more trials of one run" if batched[name] else "one run each"
        log.info("sweep %s: %d grid points, %s", name, len(points[name]), how)
    val = pd.concat(
        [
            frame
            for name in grid
            for frame in _validate_learner(sw, name, points[name], batched[name], rhos, seeds)
        ],
        ignore_index=True,
    )
    if "avg_utility" not in val or "rho" not in val:
        raise ConfigError(
            f"env {sw.opts.env['_target_']}: the sweep needs rho and avg_utility results, "
            f"got {list(val)}"
        )
    table = select(val)  # the choice reads validation results only
    tests = []
    for name in grid:
        chosen = table[(table["learner"] == name) & table["chosen"]]
        by_regime = {r: points[name][int(p)] for r, p in zip(chosen["regime"], chosen["point"])}
        tests.append(_test_learner(sw, name, by_regime, batched[name], rhos, seeds))
    result = _results_frame(table, tests, points, batched)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv_atomic(out_dir / "sweep_results.csv", result)
    write_text_atomic(out_dir / "chosen.md", chosen_markdown(result))
    return result


def chosen_markdown(result: pd.DataFrame) -> str:
    """The chosen rows of ``sweep_results.csv`` as a markdown table, one per learner x regime."""
    rows = result[result["chosen"]]
    fixed = ["learner", "batched", "point", "regime", "val_utility", "chosen", "test_utility"]
    params = [c for c in result.columns if c not in fixed]
    values = [
        ", ".join(f"{p}={row[p]}" for p in params if _present(row[p])) for _, row in rows.iterrows()
    ]
    shown = rows[["learner", "regime"]].assign(chosen=values)
    shown = shown.assign(val_utility=rows["val_utility"], test_utility=rows["test_utility"])
    lines = [
        "# Sweep: chosen hyper-parameters",
        "",
        "Chosen per cost regime by the mean avg_utility on the val split; each choice was then "
        "evaluated once on the test split, on that regime's rhos.",
        "",
        shown.to_markdown(index=False, floatfmt=".4f"),
        "",
    ]
    return "\n".join(lines)


def _grid(sw: _Sweep) -> dict[str, dict[str, list]]:
    sweep = sw.opts.config.get("sweep")
    if sweep is None or sweep.get("grid") is None:
        raise ConfigError(
            "sweep.grid is not set: choose a grid (sweep=linucb_alpha, see configs/sweep/); "
            "wandb_sweep.yaml is a wandb sweep config (wandb sweep configs/sweep/wandb_sweep.yaml)"
        )
    if sw.opts.data is None:
        raise ConfigError("sweep chooses on a table's val split: data must be set")
    grid: dict[str, dict[str, list]] = {}
    for name, params in sweep["grid"].items():
        if name not in sw.opts.learners:
            raise ConfigError(
                f"sweep.grid.{name}: no learner {name!r} configured; "
                f"have {sorted(sw.opts.learners)}"
            )
        if not params:
            raise ConfigError(f"sweep.grid.{name} must map parameters to value lists")
        grid[name] = {}
        for param, values in params.items():
            if param not in sw.opts.learners[name]:
                raise ConfigError(
                    f"sweep.grid.{name}.{param}: learners.{name} has no key {param!r}; "
                    f"keys: {sorted(k for k in sw.opts.learners[name] if not k.startswith('_'))}"
                )
            if not isinstance(values, list) or not values:
                raise ConfigError(
                    f"sweep.grid.{name}.{param} must be a non-empty list, got {values!r}"
                )
            grid[name][param] = values
    return grid


def _batchable(sw: _Sweep, name: str, params: dict[str, list]) -> bool:
    """All of the learner's swept parameters can be given per trial, and are numbers."""
    allowed = per_trial_params(sw.opts.learners[name])
    numbers = all(_is_number(v) for values in params.values() for v in values)
    return numbers and set(params) <= set(allowed)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _present(value: Any) -> bool:
    return not (isinstance(value, float) and math.isnan(value))


def _check_points(sw: _Sweep, points: dict[str, list[dict[str, Any]]]) -> None:
    """Build each grid point's learner on the validation problem (one trial), so a bad value
    is refused by name (``sweep.grid.<learner>``, the point) before anything runs."""
    sub = _options(sw, next(iter(points)), VAL, sw.opts.out_dir, sw.opts.rhos[:1],
                   sw.opts.seeds[:1], {})  # fmt: skip
    problem = build(sub, table=sw.table, feature_map=sw.feature_map).problem
    for name, values in points.items():
        for g, point in enumerate(values):
            node = {**sw.opts.learners[name], **point}
            try:
                build_learner(node, problem, name)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"sweep.grid.{name}, point {g} {point}: {exc}") from exc


def _split_options(cfg: DictConfig, split: str) -> RunOptions:
    """The options every run on ``split`` derives from (``sweep`` removed, per-trial rng)."""
    sub = copy.deepcopy(cfg)
    with open_dict(sub):
        sub.pop("sweep", None)
        sub.split, sub.rng = split, "per_trial"
    return RunOptions.from_config(sub)


def _options(
    sw: _Sweep,
    name: str,
    split: str,
    out_dir: Path,
    rhos: Sequence[float],
    seeds: Sequence[int],
    params: dict[str, Any],
) -> RunOptions:
    """The split's options with these fields replaced (``config`` saying the same)."""
    base = sw.bases[split]
    node = {**base.learners[name], **params}
    config = {**base.config, "out_dir": str(out_dir), "rhos": list(rhos), "seeds": list(seeds)}
    config.update(learners={name: node}, run_learners=None)
    return dataclasses.replace(
        base,
        config=config,
        out_dir=Path(out_dir),
        rhos=tuple(float(r) for r in rhos),
        seeds=tuple(int(s) for s in seeds),
        learners={name: node},
        run_learners=(name,),
    )


def _run(
    sw: _Sweep,
    name: str,
    split: str,
    out_dir: Path,
    rhos: list[float],
    seeds: list[int],
    params: dict[str, Any],
) -> pd.DataFrame:
    """One run of learner ``name`` with ``params`` set on its config node (per-trial
    random streams, see the module docstring); its env is built on the sweep's table and
    feature map once per split and trial grid (a run resets the env it is given)."""
    opts = _options(sw, name, split, out_dir, rhos, seeds, params)
    key = (opts.split, opts.rhos, opts.seeds)
    if key not in sw.envs:
        sw.envs[key] = build(opts, table=sw.table, feature_map=sw.feature_map)
    return run(opts, sw.envs[key])


def _validate_learner(
    sw: _Sweep,
    name: str,
    points: list[dict[str, Any]],
    batched: bool,
    rhos: list[float],
    seeds: list[int],
) -> Iterator[pd.DataFrame]:
    """Validation results of every grid point of ``name``, with their ``point`` index."""
    root = sw.opts.out_dir / VAL / name
    if not batched:
        for g, point in enumerate(points):
            frame = _run(sw, name, VAL, root / f"point-{g}", rhos, seeds, point)
            yield frame.assign(point=g)
        return
    # trial_grid(rhos, seeds * G) is rho-major: trial (rho i, point g, seed s) sits at
    # (i * G + g) * S + s; each trial gets the values of its grid point.
    g_count = len(points)
    layout = [g for _ in rhos for g in range(g_count) for _ in seeds]
    params = {p: [points[g][p] for g in layout] for p in points[0]}
    frame = _run(sw, name, VAL, root, rhos, seeds * g_count, params)
    expected = [(r, s) for r in rhos for _ in range(g_count) for s in seeds]
    if list(zip(frame["rho"], frame["seed"])) != expected:
        target = sw.opts.env["_target_"]
        raise ConfigError(f"env {target} does not keep the (rho, seed) trial order")
    yield frame.assign(point=layout)


def _test_learner(
    sw: _Sweep,
    name: str,
    by_regime: dict[str, dict[str, Any]],
    batched: bool,
    rhos: list[float],
    seeds: list[int],
) -> pd.DataFrame:
    """Mean test ``avg_utility`` per regime of the chosen values: ``learner, regime,
    test_utility``."""
    root = sw.opts.out_dir / TEST / name
    frames = []
    if batched:
        values = [by_regime[cost_regime(r)] for r in rhos for _ in seeds]
        params = {p: [v[p] for v in values] for p in values[0]}
        frames.append(_run(sw, name, TEST, root, rhos, seeds, params))
    else:
        # One run per distinct choice, on the rhos of the regimes that chose it.
        for g, point in enumerate(_distinct(by_regime.values())):
            regime_rhos = [r for r in rhos if by_regime[cost_regime(r)] == point]
            frames.append(_run(sw, name, TEST, root / f"point-{g}", regime_rhos, seeds, point))
    test = pd.concat(frames, ignore_index=True)
    test = test.assign(regime=test["rho"].map(cost_regime))
    score = test.groupby("regime")["avg_utility"].mean().rename("test_utility").reset_index()
    return score.assign(learner=name)


def _distinct(items: Any) -> list:
    out: list = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def _results_frame(
    table: pd.DataFrame,
    tests: list[pd.DataFrame],
    points: dict[str, list[dict[str, Any]]],
    batched: dict[str, bool],
) -> pd.DataFrame:
    """One row per learner x grid point x regime: the columns of ``sweep_results.csv``."""
    params = _distinct(p for pts in points.values() for p in pts[0])
    rows = []
    for row in table.itertuples(index=False):
        point = points[row.learner][int(row.point)]
        rows.append(
            {
                "learner": row.learner,
                "batched": batched[row.learner],
                "point": int(row.point),
                **{p: point.get(p, float("nan")) for p in params},
                "regime": row.regime,
                "val_utility": row.val_utility,
                "chosen": bool(row.chosen),
            }
        )
    frame = pd.DataFrame(rows).merge(pd.concat(tests), on=["learner", "regime"], how="left")
    frame.loc[~frame["chosen"], "test_utility"] = float("nan")
    order = {r: i for i, r in enumerate(REGIMES)}
    frame["order"] = frame["regime"].map(order)
    frame = frame.sort_values(["learner", "order", "point"], kind="stable")
    return frame.drop(columns="order").reset_index(drop=True)
