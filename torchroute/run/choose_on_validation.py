"""Options that exist for a changing world, chosen on the validation split with the
run's scenario replayed on it.

A learner class names its change options in
:attr:`~torchroute.learners.Learner.chosen_on_validation` (a discount ``gamma``, a
``window``, ``new_arm_bonus``, a residual learner's ``base``, the forgetting learners'
``warm_weight``). Given as a list in a run's learner config::

    learners:
      discounted_linucb: {gamma: [0.98, 0.99, 0.995, 1.0], warm_start: train}

the run chooses one value per trial before the test stream is read:

1. **Candidates.** The product of the lists (the last key fastest), each a learner config
   with one value per key.
2. **Validation stream.** The env of the run, built again on the table's ``val`` rows
   (``split: val``; the first ``min(T, n_val)`` of each trial's own order, ``T`` the test
   stream's rounds; ``T`` rounds in passes over the rows with the run option
   ``choose_on_validation: {rounds: test}``), with the same trials (``rho``, ``seed``),
   feedback and **scenario**:
   each event starts at the same fraction ``at`` of the validation stream
   (``floor(at T_val)``), ``arm: best`` is the arm the test run changes (it is chosen on
   the train split, or with ``best_at: validation`` on the validation split, never on the
   replayed rows), and a new model is unavailable on the validation stream until its
   event. The test split is never read.
3. **One simulation.** The ``C`` candidates x ``R`` trials run as one learner of
   ``C R`` trials (:class:`~torchroute.learners.trial_groups.TrialGroups`), one
   :func:`~torchroute.loop.simulate` call. Each candidate is built as the test run builds
   its learner (warm-started from the train split as its ``warm_*`` keys say) on the
   problem of the validation stream, whose ``validation`` split is the test run's (so a
   base router or a warm weight chosen on validation inside a candidate is the one the
   test run gets; those inner choices see the rows they are then replayed on, alike for
   every candidate).
4. **Choice.** Per ``rho`` (its seeds averaged), the candidate with the highest mean
   utility **over the whole validation stream** (``avg_utility``; ties: the first in list
   order). The run's ``choose_on_validation`` option (:mod:`torchroute.run.choice_rule`)
   can make one choice per cost regime instead, and keep the first-listed value of some
   keys unless another is better by more than one standard error (or its ``margin``). The
   whole stream, not the rounds after the change: the test run is scored on its whole
   stream, with the change at the same fraction, so a value that forgets too eagerly
   (cheap after a change, costly before it) is charged for both, as it will be on test.
5. **Test run.** Each trial runs its chosen values: the plain learner when every trial
   chose the same, else a :class:`~torchroute.learners.trial_groups.TrialGroups` of one
   learner per chosen candidate. ``results.csv`` gains ``chosen_<key>`` per list-valued
   key and ``chosen_val_utility`` (the chosen candidate's mean validation utility of the
   trial's ``rho``); ``runs/<learner>/choice_on_validation.csv`` holds every candidate's
   validation utility per ``rho`` (and after the change, with a scenario); the log says
   what was chosen.

A config without such lists runs as before, through none of this. The scenario code is
imported only for an env with a scenario, as in a plain run.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from torchroute.envs.base import Env
from torchroute.errors import ConfigError
from torchroute.learners.base import Learner
from torchroute.learners.trial_groups import TrialGroups
from torchroute.learners.warm_options import WarmStart
from torchroute.loop import simulate
from torchroute.run.build import Built, instantiate_node, learner_for, trial_grid
from torchroute.run.choice_rule import BLOCKS, ChoiceRule
from torchroute.run.classes import own_learner_class
from torchroute.run.jobs import map_in_processes, worker_threads
from torchroute.run.options import RunOptions

if TYPE_CHECKING:
    from torchroute.run.as_baseline import RouterChoice

log = logging.getLogger(__name__)

#: the split the change options are chosen on
CHOICE_SPLIT = "val"
#: the table of every candidate per ``rho`` a run writes under ``runs/<learner>/``
CHOICE_FILE = "choice_on_validation.csv"


@dataclass(frozen=True)
class Candidates:
    """The candidates of one learner config.

    Attributes:
        name: the learner's name (``learners.<name>``).
        keys: the list-valued change options, in the learner class's order.
        points: ``C`` dicts ``{key: value}``, the product of the lists (last key fastest).
        names: ``(name, config)`` of the run's configured learners, run or not: a value
            that is a config node (``base: ${learners.mlp}``) is labelled by the learner
            whose config it is (see :meth:`label`).
    """

    name: str
    keys: tuple[str, ...]
    points: tuple[dict[str, Any], ...]
    names: tuple[tuple[str, Mapping[str, Any]], ...] = ()

    def node(self, node: Mapping[str, Any], c: int) -> dict[str, Any]:
        """The learner config of candidate ``c``: ``node`` with its values."""
        return {**node, **self.points[c]}

    def label(self, c: int, key: str) -> Any:
        """Candidate ``c``'s value of ``key`` as ``results.csv`` and the log show it: a
        number or name as given; a config node as the name of the run learner with that
        config (``mlp``), else its class's name (``KNNScoreRouter``)."""
        value = self.points[c][key]
        if not isinstance(value, Mapping):
            return value
        for name, node in self.names:
            if dict(node) == dict(value):
                return name
        target = str(value.get("_target_", "config"))
        parts = [p for p in target.split(".") if p[:1].isupper()]
        return parts[-1] if parts else target


def candidates_of(node: Mapping[str, Any], name: str) -> Candidates | None:
    """The candidates of learner config ``node``, or ``None`` when none of its class's
    :attr:`~torchroute.learners.Learner.chosen_on_validation` keys holds a list.

    Raises:
        ConfigError: one line naming ``learners.<name>.<key>``: an empty list, a value
            that is itself a list, a number option given a value that is not a number, or
            a candidate whose ``warm_*`` keys or options its class refuses.
    """
    cls = own_learner_class(node)
    if cls is None:
        return None
    keys = tuple(k for k in cls.chosen_on_validation if _is_list(node.get(k)))
    if not keys:
        return None
    numeric = _numeric_options(cls)
    for key in keys:
        values = list(node[key])
        where = f"learners.{name}.{key}"
        if not values:
            raise ConfigError(
                f"{where} is an empty list: give the values to choose among on the "
                f"validation split ({key}: [a, b, ...]) or one value"
            )
        for i, value in enumerate(values):
            if _is_list(value):
                raise ConfigError(f"{where}[{i}] must be one value, got the list {value!r}")
            if key in numeric and not _is_number(value):
                raise ConfigError(f"{where}[{i}] must be a number, got {value!r}")
    points = tuple(
        dict(zip(keys, combo)) for combo in itertools.product(*(list(node[k]) for k in keys))
    )
    found = Candidates(name, keys, points)
    for c in range(len(points)):
        _check_candidate(cls, found.node(node, c), found, c)
    return found


def _check_candidate(cls: type[Learner], node: dict[str, Any], cand: Candidates, c: int) -> None:
    """A candidate's ``warm_*`` keys and :meth:`Learner.check_options` (no problem needed)."""
    who = f"learners.{cand.name}"
    try:
        _, rest = WarmStart.from_node(node, who)
        cls.check_options(**{k: v for k, v in rest.items() if not str(k).startswith("_")})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{who}, candidate {cand.points[c]}: {exc}") from exc


def _is_list(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _numeric_options(cls: type[Learner]) -> set[str]:
    """The options whose default, in the class's constructor, is a number (and
    ``warm_weight``): a candidate of theirs must be a number."""
    out = {"warm_weight"}
    for fn in (cls.__init__, getattr(cls, "from_problem", None)):
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            continue
        out |= {p.name for p in params if _is_number(p.default)}
    return out


@dataclass(frozen=True)
class Choice:
    """What was chosen for one learner.

    Attributes:
        candidates: the :class:`Candidates`.
        chosen: ``[R]`` the candidate of each trial of the test run.
        val_utility: ``[R]`` the chosen candidate's mean validation utility (its ``rho``).
        table: one row per candidate and ``rho``: the candidate's values, ``val_utility``
            (and ``val_utility_after`` with a scenario), ``chosen``.
    """

    candidates: Candidates
    chosen: tuple[int, ...]
    val_utility: tuple[float, ...]
    table: pd.DataFrame

    def columns(self, trials: Sequence[int]) -> dict[str, list[Any]]:
        """The ``results.csv`` columns of the trials ``trials`` (positions):
        ``chosen_<key>`` for each list-valued key, ``chosen_val_utility``."""
        cand = self.candidates
        out = {f"chosen_{k}": [cand.label(self.chosen[t], k) for t in trials] for k in cand.keys}
        out["chosen_val_utility"] = [self.val_utility[t] for t in trials]
        return out

    def describe(self) -> str:
        """One line: the values chosen per ``rho``."""
        rows = self.table[self.table["chosen"]]
        parts = [
            f"rho={row['rho']:g}: "
            + ", ".join(f"{k}={row[k]}" for k in self.candidates.keys)
            + f" (val utility {row['val_utility']:.4f})"
            for _, row in rows.iterrows()
        ]
        return "; ".join(parts)


def all_candidates(opts: RunOptions) -> dict[str, Candidates]:
    """The :class:`Candidates` of every run learner whose config gives list-valued change
    options (checked: :func:`candidates_of`); ``{}`` when none does."""
    found = {name: candidates_of(opts.learners[name], name) for name in opts.run_learners}
    names = tuple((name, dict(node)) for name, node in opts.learners.items())
    return {
        name: dataclasses.replace(cand, names=names)
        for name, cand in found.items()
        if cand is not None
    }


def choose_all(
    opts: RunOptions, built: Built, env: Env, candidates: Mapping[str, Candidates]
) -> dict[str, Choice]:
    """The :class:`Choice` of each learner of ``candidates`` (:func:`choose`), made with the
    intra-op threads its learner runs with (a worker's under ``jobs > 1``:
    :func:`~torchroute.run.jobs.worker_threads`), so that a router fitted for the choice is
    the one the test run fits (a fit's numbers can depend on the threads). With ``jobs >
    1`` and several such learners, their choices are made in ``jobs`` worker processes of
    those threads at once (:func:`~torchroute.run.jobs.map_in_processes`): the same choices,
    each learner's replay being its own."""
    if opts.jobs > 1 and len(candidates) > 1 and len(opts.run_learners) > 1:
        payload = (opts, dataclasses.replace(built, feature_map=None), env, dict(candidates))
        return map_in_processes(_choose_in_worker, payload, list(candidates), opts.jobs)
    with worker_threads(opts.jobs, len(opts.run_learners)):
        return {name: choose(opts, built, env, cand) for name, cand in candidates.items()}


def _choose_in_worker(payload: tuple[Any, ...], name: str) -> Choice:
    """:func:`choose` of learner ``name`` in a worker; ``payload`` is ``(opts, built, env,
    candidates)``."""
    opts, built, env, candidates = payload
    return choose(opts, built, env, candidates[name])


def choose(opts: RunOptions, built: Built, env: Env, cand: Candidates) -> Choice:
    """Run the candidates on the validation stream (module docstring, steps 2 to 4).

    ``env`` is the test run's env: only its trial count and its problem's ``validation``
    split are read, never its stream. Keys of the run's ``choose_on_validation.as_baseline``
    are chosen first by their routers' own validation utility
    (:mod:`torchroute.run.as_baseline`); only the candidates holding a trial's chosen values
    are replayed for that trial, and none when every list key is such a key.
    """
    name = cand.name
    r, c_count = env.num_trials, len(cand.points)
    rule = opts.choice_rule
    rhos, seeds = trial_grid(list(opts.rhos), list(opts.seeds))  # each trial's, [R]
    group_of = None
    if rule.per == "regime":
        from torchroute.run.report_regimes import regime_rule

        cuts = regime_rule(opts.rhos, opts.report_regimes)
        group_of = {float(rho): cuts.of(float(rho)) for rho in opts.rhos}
    fixed = [k for k in cand.keys if k in rule.as_baseline or f"{name}.{k}" in rule.as_baseline]
    routers = None
    if fixed:
        from torchroute.run.as_baseline import choose_routers

        group = [group_of[rho] for rho in rhos] if group_of is not None else rhos
        routers = choose_routers(env, name, cand.points, fixed, group)
        if len(fixed) == len(cand.keys):  # nothing left to replay
            choice = _choice_of_routers(cand, routers, rhos, group_of)
            log.info("%s: chosen by the routers' own validation utility: %s", name,
                     choice.describe())  # fmt: skip
            return choice
    eligible = routers.eligible if routers is not None else np.ones((c_count, r), dtype=bool)
    if rule.seeds is not None:  # the run's first seeds only
        kept = set(list(dict.fromkeys(opts.seeds))[: rule.seeds])
        eligible = eligible & np.array([int(s) in kept for s in seeds])[None, :]
    positions = [c * r + t for c in range(c_count) for t in range(r) if eligible[c, t]]
    val_env = validation_env(opts, built, env, c_count, name)
    if len(positions) < c_count * r:
        val_env = val_env.select_trials(torch.tensor(positions))
    validation = env.problem().validation
    node = opts.learners[name]
    groups, index, offset = [], [], 0
    for c in range(c_count):
        count = int(eligible[c].sum())
        if count == 0:
            continue
        block = torch.arange(offset, offset + count)
        offset += count
        sub = val_env.select_trials(block)
        problem = dataclasses.replace(sub.problem(), validation=validation)
        try:
            groups.append(learner_for(opts, name, sub, cand.node(node, c), problem=problem))
        except ConfigError as exc:
            raise ConfigError(f"learners.{name}, candidate {cand.points[c]}: {exc}") from exc
        index.append(block)
    check_partial_feedback(groups[0], val_env, name)
    learner = TrialGroups(groups, index)
    parts = BLOCKS if rule.needs_blocks else 5
    result = simulate(
        learner,
        val_env,
        seed=opts.loop_seed,
        rng=opts.rng,
        log_every=max(1, val_env.horizon // parts),
        progress=opts.progress,
        desc=f"{name} (choice on {CHOICE_SPLIT})",
    )
    blocks = block_utilities(result.curve, len(positions)) if rule.needs_blocks else None
    summary = result.summary
    if len(positions) < c_count * r:  # the candidates not replayed for a trial: NaN
        summary, blocks = _spread(summary, blocks, positions, c_count * r, rhos)
    choice = pick(cand, summary, r, rule, group_of, blocks)
    log.info("%s: chosen on the %s split: %s", name, CHOICE_SPLIT, choice.describe())
    return choice


def _spread(
    summary: pd.DataFrame,
    blocks: np.ndarray | None,
    positions: list[int],
    size: int,
    rhos: Sequence[float],
) -> tuple[pd.DataFrame, np.ndarray | None]:
    """The replayed trials' ``summary`` rows (and ``blocks [n, J]``) at their ``positions``
    of the ``size = C R`` layout :func:`pick` reads; the other rows NaN, their ``rho`` that
    of their trial (``rhos [R]``)."""
    rho_of = np.asarray(rhos, dtype=np.float64)
    r = len(rho_of)
    columns = [c for c in ("avg_utility", "avg_utility_after") if c in summary]
    full = pd.DataFrame({"rho": rho_of[np.arange(size) % r]})
    for column in columns:
        values = np.full(size, np.nan)
        values[positions] = summary[column].to_numpy(dtype=np.float64)
        full[column] = values
    if blocks is not None:
        spread = np.full((size, blocks.shape[1]), np.nan)
        spread[positions] = blocks
        blocks = spread
    return full, blocks


def _choice_of_routers(
    cand: Candidates,
    routers: RouterChoice,
    rhos: list[float],
    group_of: Mapping[float, str] | None,
) -> Choice:
    """The :class:`Choice` when every list key is an ``as_baseline`` key: each trial's one
    eligible candidate; the table's ``val_utility`` is the routers' own (mean per ``rho``)."""
    chosen = tuple(int(np.argmax(routers.eligible[:, t])) for t in range(len(rhos)))
    frame = pd.DataFrame(
        {
            "candidate": np.repeat(np.arange(len(cand.points)), len(rhos)),
            "rho": np.tile(rhos, len(cand.points)),
            "val_utility": routers.val_utility.reshape(-1),
            "chosen": routers.eligible.reshape(-1),
        }
    )
    table = frame.groupby(["candidate", "rho"], sort=True).agg(
        val_utility=("val_utility", "mean"), chosen=("chosen", "all")
    )
    table = table.reset_index()
    if group_of is not None:
        table.insert(1, "regime", [group_of[float(rho)] for rho in table["rho"]])
    for key in cand.keys:
        table.insert(
            1 + cand.keys.index(key), key, [cand.label(c, key) for c in table["candidate"]]
        )
    per_rho = table.set_index(["candidate", "rho"])["val_utility"]
    value = tuple(float(per_rho.loc[(chosen[t], rhos[t])]) for t in range(len(rhos)))
    return Choice(cand, chosen, value, table)


def pick(
    cand: Candidates,
    summary: pd.DataFrame,
    num_trials: int,
    rule: ChoiceRule | None = None,
    group_of: Mapping[float, str] | None = None,
    blocks: np.ndarray | None = None,
) -> Choice:
    """The :class:`Choice` from the validation run's ``summary`` (``C R`` rows, candidate
    ``c``'s trial ``t`` at ``c R + t``, with ``rho`` and ``avg_utility``).

    Per group of trials (each ``rho``, or ``group_of[rho]``: its cost regime) the candidate
    of the highest mean ``avg_utility`` over the group's trials (the first on a tie); with
    ``rule.prefer_first`` and ``blocks [C R, J]`` (each trial's mean utility in ``J``
    blocks of the stream, :func:`block_utilities`), the ``rule.margin``-standard-error
    rule of :mod:`torchroute.run.choice_rule` (the table gains ``val_se``, each
    candidate's standard error against its group's best).
    """
    rule = rule or ChoiceRule()
    frame = summary.reset_index(drop=True)
    frame = frame.assign(candidate=[i // num_trials for i in range(len(frame))])
    rhos = frame["rho"].iloc[:num_trials].tolist()
    group = [group_of[float(rho)] for rho in rhos] if group_of is not None else rhos
    frame = frame.assign(group=[group[i % num_trials] for i in range(len(frame))])
    means = ["avg_utility"] + (["avg_utility_after"] if "avg_utility_after" in frame else [])
    table = frame.groupby(["candidate", "rho"], sort=True)[means].mean().reset_index()
    table = table.rename(columns={m: m.replace("avg_", "val_") for m in means})
    pooled = frame.groupby(["group", "candidate"], sort=False)["avg_utility"].mean()
    winner: dict[Any, int] = {}
    se_of: dict[tuple[Any, int], float] = {}
    for g in dict.fromkeys(group):
        values = pooled.loc[g].sort_index().to_numpy(dtype=np.float64)
        values = np.where(np.isnan(values), -np.inf, values)  # not replayed for the group
        best = int(np.argmax(values))  # the first of the highest
        winner[g] = best
        if rule.prefer_first and blocks is not None:
            trials = [t for t in range(num_trials) if group[t] == g]
            winner[g], se = _one_se_choice(cand, values, best, blocks, trials, rule)
            se_of.update({(g, c): float(se[c]) for c in range(len(values))})
    table = table.assign(
        chosen=[
            winner[_group(group_of, rho)] == c for c, rho in zip(table["candidate"], table["rho"])
        ]
    )
    if se_of:
        table = table.assign(
            val_se=[
                se_of[(_group(group_of, rho), c)]
                for c, rho in zip(table["candidate"], table["rho"])
            ]
        )
    if group_of is not None:
        table.insert(1, "regime", [group_of[float(rho)] for rho in table["rho"]])
    for key in cand.keys:
        table.insert(
            1 + cand.keys.index(key), key, [cand.label(c, key) for c in table["candidate"]]
        )
    winners = table[table["chosen"]].set_index("rho")
    chosen = tuple(int(winners.loc[rho, "candidate"]) for rho in rhos)
    value = tuple(float(winners.loc[rho, "val_utility"]) for rho in rhos)
    return Choice(cand, chosen, value, table)


def _group(group_of: Mapping[float, str] | None, rho: float) -> Any:
    return rho if group_of is None else group_of[float(rho)]


def _one_se_choice(
    cand: Candidates,
    values: np.ndarray,
    best: int,
    blocks: np.ndarray,
    trials: list[int],
    rule: ChoiceRule,
) -> tuple[int, np.ndarray]:
    """``(chosen candidate, standard errors [C])`` of one group: the candidates within
    ``rule.margin`` standard errors of ``best`` (:func:`paired_block_se` over the group's
    ``trials``), the earliest values of the ``prefer_first`` keys first, then the highest
    utility."""
    count = len(values)
    r = blocks.shape[0] // count
    per_block = np.stack([_mean_rows(blocks[c * r + np.asarray(trials)]) for c in range(count)])
    se = paired_block_se(per_block[best] - per_block)
    eligible = [c for c in range(count) if values[c] >= values[best] - rule.margin * se[c]]
    keys = [k for k in rule.prefer_first if k in cand.keys]

    def rank(c: int) -> tuple[Any, ...]:
        order = tuple(_position(cand, k, cand.points[c][k]) for k in keys)
        return (*order, -values[c], c)

    return min(eligible, key=rank), se


def paired_block_se(diff: np.ndarray) -> np.ndarray:
    """The standard error ``[C]`` of the mean of each row of ``diff [C, J]`` (a paired
    difference per block of the stream): ``s / sqrt(J)`` with ``s^2 = sum_j (d_{j+1} -
    d_j)^2 / (2 (J - 1))``, the blocks' variance from their successive differences, which a
    change in the stream (a step or a trend in the difference) barely moves
    (:mod:`torchroute.run.choice_rule`); 0 with fewer than 2 blocks."""
    j = diff.shape[1]
    if j < 2:
        return np.zeros(diff.shape[0])
    variance = np.square(np.diff(diff, axis=1)).sum(axis=1) / (2 * (j - 1))
    return np.sqrt(variance / j)


def _mean_rows(rows: np.ndarray) -> np.ndarray:
    """``[J]``: the mean over the replayed rows of ``rows [n, J]`` (NaN rows: trials not
    replayed for this candidate); NaN when none was."""
    kept = rows[~np.isnan(rows).all(axis=1)]
    return kept.mean(axis=0) if len(kept) else np.full(rows.shape[1], np.nan)


def _position(cand: Candidates, key: str, value: Any) -> int:
    """The position of ``value`` in ``key``'s list (first appearance in the candidates)."""
    from torchroute.run.as_baseline import distinct_values

    return next(i for i, v in enumerate(distinct_values(cand.points, key)) if v == value)


def block_utilities(curve: pd.DataFrame, num_trials: int) -> np.ndarray:
    """``[n, J]``: each of the ``n = num_trials`` trials' mean utility per round in the
    ``J`` blocks between its logged rounds, up to a constant per block and trial's stream
    (minus the regret: the oracle's utility is the same for every candidate of a trial
    position, so differences between candidates are exact). ``curve`` holds ``trial``,
    ``round`` and ``cum_regret`` (:class:`~torchroute.loop.SimulationResult`)."""
    if "cum_regret" not in curve:
        raise ConfigError(
            "choose_on_validation.prefer_first needs the env's cumulative regret per logged "
            "round (cum_regret); this env does not record it"
        )
    wide = curve.pivot_table(index="trial", columns="round", values="cum_regret", aggfunc="last")
    wide = wide.reindex(range(num_trials)).sort_index(axis=1)
    rounds = np.asarray(wide.columns, dtype=np.float64)
    cum = np.concatenate([np.zeros((num_trials, 1)), wide.to_numpy(dtype=np.float64)], axis=1)
    lengths = np.diff(np.concatenate([[0.0], rounds]))
    return -np.diff(cum, axis=1) / lengths


def validation_env(opts: RunOptions, built: Built, env: Env, copies: int, name: str) -> Env:
    """The run's env on the validation rows: its trials repeated ``copies`` times
    (candidate-major), the same feedback and scenario, ``min(T, n_val)`` rounds (``T``
    with ``choose_on_validation.rounds: test``, the rows replayed in passes)."""
    key = f"learners.{name}"
    table = built.table
    if table is None or built.features is None or opts.env is None:
        raise ConfigError(
            f"{key}: list-valued change options are chosen on a table's {CHOICE_SPLIT} split; "
            "this env reads or simulates its own data"
        )
    replayed = opts.env.get("split", opts.split)
    replayed = {replayed} if isinstance(replayed, str) else set(replayed)
    if CHOICE_SPLIT in replayed:
        raise ConfigError(
            f"{key}: list-valued change options are chosen on the {CHOICE_SPLIT} split, which "
            f"this run replays (split={opts.split}); replay another split or give one value"
        )
    n_val = len(table.rows(CHOICE_SPLIT)) if CHOICE_SPLIT in table.split else 0
    if n_val < 2:
        raise ConfigError(
            f"{key}: list-valued change options are chosen on the {CHOICE_SPLIT} split, but "
            f"{table.source} has {n_val} {CHOICE_SPLIT} row(s) (e.g. data.val_fraction=0.1)"
        )
    rhos, seeds = trial_grid(list(opts.rhos), list(opts.seeds))
    if len(rhos) != env.num_trials:
        raise ConfigError(f"{key}: the env's trials are not the rho x seed grid of the run")
    horizon = min(env.horizon, n_val)
    node = {**opts.env, "split": CHOICE_SPLIT, "horizon": horizon}
    if opts.choice_rule.rounds == "test" and env.horizon > n_val:  # passes over the rows
        node = {**node, "horizon": env.horizon, "repeat": True}
    factory = instantiate_node(node, "env", _partial_=True)
    kwargs = {"table": table, "rho": rhos * copies, "seeds": seeds * copies}
    try:
        return factory(**kwargs, features=built.features, device=env.device, dtype=opts.dtype)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{key}: the {CHOICE_SPLIT} stream of the choice: {exc}") from exc


def check_partial_feedback(learner: Learner, env: Env, name: str) -> None:
    """Refuse feedback for some requests only with a learner that does not learn only
    from the observed cells: its groups' state cannot be put back per trial."""
    option = getattr(env, "feedback_option", None)
    partial = option is not None and getattr(option, "rate", 1.0) < 1.0
    if partial and not learner.learns_only_observed:
        raise ConfigError(
            f"learners.{name}: list-valued change options with feedback for some requests "
            f"only (feedback.rate < 1) need a learner that learns only from the observed "
            f"cells; {type(learner).__name__} does not: give one value per option"
        )


def chosen_learner(
    opts: RunOptions, name: str, env: Env, choice: Choice, trials: Sequence[int]
) -> Learner:
    """The test run's learner for ``env``, whose trials are the run's trials ``trials``
    (positions): each trial with its chosen values (see the module docstring, step 5)."""
    node = opts.learners[name]
    picked = torch.tensor([choice.chosen[t] for t in trials], dtype=torch.long)
    values = picked.unique().tolist()
    if len(values) == 1:
        return learner_for(opts, name, env, choice.candidates.node(node, values[0]))
    groups, index = [], []
    for c in values:
        local = (picked == c).nonzero()[:, 0]
        groups.append(
            learner_for(opts, name, env.select_trials(local), choice.candidates.node(node, c))
        )
        index.append(local)
    check_partial_feedback(groups[0], env, name)
    return TrialGroups(groups, index).to(env.device)


__all__ = [
    "CHOICE_FILE",
    "CHOICE_SPLIT",
    "Candidates",
    "Choice",
    "all_candidates",
    "block_utilities",
    "candidates_of",
    "choose",
    "choose_all",
    "chosen_learner",
    "paired_block_se",
    "pick",
    "validation_env",
]
