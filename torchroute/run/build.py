"""The one path from options to objects: table -> features -> env -> learner.

``simulate``, ``sweep``, ``gap`` and ``serve`` all build through these functions:

- :func:`load_table`: ``data`` instantiated, then embedded with ``encoder``;
- :func:`fit_feature_map`: the :class:`~torchroute.features.FeatureMap` of ``features.*``
  (PCA fitted on the train split, the raw embeddings, or an oracle's feature head);
- :func:`build_env`: the env of ``env`` for the run's trials, as a :class:`Built` that
  also keeps the table and the fitted feature map (a run saves them);
- :func:`build_learner` / :func:`learner_for`: one learner factory called with the env's
  :class:`~torchroute.types.Problem`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
from dataclasses import dataclass
from typing import Any

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf

from torchroute.data.table import RoutingTable
from torchroute.envs.base import Env
from torchroute.errors import ConfigError
from torchroute.features import FeatureMap
from torchroute.functional.random import TrialRNG, trial_keys
from torchroute.learners.base import Learner
from torchroute.learners.warm_options import WarmStart
from torchroute.run.classes import own_learner_class
from torchroute.run.options import RunOptions
from torchroute.run.trust import current_target, current_targets
from torchroute.types import Problem


def trial_grid(rhos: list[float], seeds: list[int]) -> tuple[list[float], list[int]]:
    """All (rho, seed) pairs as ``R = len(rhos) * len(seeds)`` trials, rho-major."""
    pairs = list(itertools.product(rhos, seeds))
    return [float(r) for r, _ in pairs], [int(s) for _, s in pairs]


def instantiate_node(node: Any, key: str, **kwargs: Any) -> Any:
    """``hydra.utils.instantiate(node, **kwargs)``; failures name the config ``key``.

    A ``_target_`` under a module that moved (:data:`~torchroute.run.trust.MOVED_TARGETS`)
    is built from its new path, so saved runs naming the old one still load.
    """
    if isinstance(node, (dict, list, tuple)):
        node = current_targets(node)
    elif isinstance(node, DictConfig) and _has_moved(node):
        node = OmegaConf.create(current_targets(OmegaConf.to_container(node, resolve=True)))
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as exc:
        cause = exc.__cause__ or exc
        raise ConfigError(f"cannot build {key!r} from its config: {cause}") from exc


def _has_moved(node: Any) -> bool:
    """Whether a config node names a moved ``_target_`` anywhere."""
    if isinstance(node, DictConfig):
        target = node.get("_target_") if "_target_" in node else None
        if isinstance(target, str) and current_target(target) != target:
            return True
        return any(_has_moved(node[k]) for k in node if k != "_target_")
    if isinstance(node, ListConfig):
        return any(_has_moved(v) for v in node)
    return False


def instantiate_table(node: Any, key: str = "data") -> RoutingTable:
    """The :class:`~torchroute.data.table.RoutingTable` of config ``node`` (a ``_target_``
    config; a table is taken as is): the one way ``simulate``, ``sweep``, ``gap`` and
    ``pretrain`` read their ``data``.

    Raises:
        ConfigError: the config does not build, or builds something else (naming ``key``).
    """
    table = node if isinstance(node, RoutingTable) else instantiate_node(node, key)
    if not isinstance(table, RoutingTable):
        raise ConfigError(f"{key} built a {type(table).__name__}, not a RoutingTable")
    return table


def load_table(opts: RunOptions, select: Any = None) -> RoutingTable:
    """The table of ``data``, embedded with ``encoder`` (``select``: a table -> table
    applied before embedding, e.g. a subset of rows)."""
    if opts.data is None:
        raise ConfigError("data is not set: this command needs a routing table (data=...)")
    table = instantiate_table(opts.data)
    if select is not None:
        table = select(table)
    if opts.encoder is not None:
        table = instantiate_node(opts.encoder, "encoder")(table)
    if table.embeddings is None:
        raise ConfigError(
            f"{table.source}: the table has no embeddings; choose an encoder (encoder=minilm)"
        )
    return table


def fit_feature_map(
    opts: RunOptions, table: RoutingTable, fit_split: str | None = None
) -> FeatureMap:
    """The feature map of ``features.*`` for ``table`` (a PCA is fitted on the train
    split, or on ``fit_split``/``split`` when the table has none)."""
    f = opts.features
    if f.source == "oracle":  # the pre-trained feature head (CABS paper): features.oracle node
        if f.oracle is None:
            raise ConfigError(
                "features.source=oracle needs a features.oracle node (e.g. _target_: "
                "torchroute.trainers.load_or_pretrain, see configs/experiment/cabs_table2.yaml)"
            )
        oracle = instantiate_node(
            _hide_new_models(f.oracle, opts, table),
            "features.oracle",
            arm_names=list(table.arm_names),
            embed_dim=int(table.embeddings.shape[1]),
        )
        return FeatureMap(oracle=oracle, bias=f.bias, normalize=f.normalize, source="oracle")
    split = fit_split or ("train" if "train" in table.split else opts.split)
    pca_dim = None if f.source == "raw" else f.pca_dim
    return FeatureMap.fit(table.embeddings, table.rows(split), pca_dim, f.bias, f.normalize)


def load_features(opts: RunOptions) -> tuple[RoutingTable, torch.Tensor]:
    """The embedded table and its bandit features ``[n, d]``."""
    table = load_table(opts)
    return table, fit_feature_map(opts, table)(table.embeddings)


def env_takes_table(node: Any) -> bool:
    """Whether the env of config ``node`` is built on a routing table: its factory (the
    ``_target_``, a class or a function) has a ``table`` parameter.

    The one rule for it: the run builds a table env from ``data`` (and a self-contained env,
    which reads or simulates its own data, with ``seeds`` only), and the device check and
    the env contract tests call env configs the same way.

    Raises:
        ConfigError: ``node`` has no ``_target_``, or it does not name an importable callable.
    """
    from hydra.utils import get_method

    target = node.get("_target_") if hasattr(node, "get") else None
    if not isinstance(target, str):
        raise ConfigError("env has no _target_ (see configs/env/)")
    try:
        factory = get_method(current_target(target))
    except Exception as exc:  # hydra wraps every import error
        raise ConfigError(f"env._target_={target!r} does not name a callable: {exc}") from exc
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature takes no table
        return False
    return "table" in params


@dataclass
class Built:
    """What :func:`build` made from a run's options.

    Attributes:
        options: the options it was built from.
        env: the env (``None`` when built with ``env=False``, e.g. for ``gap``).
        table: the embedded table of ``data`` (``table.embeddings [n, e]``, after
            ``encoder``), ``None`` for a self-contained env.
        feature_map: the fitted :class:`~torchroute.features.FeatureMap` of ``features.*``.
        features: ``[n, d]`` float32 bandit features of the table's rows.
    """

    options: RunOptions
    env: Env | None = None
    table: RoutingTable | None = None
    feature_map: FeatureMap | None = None
    features: torch.Tensor | None = None

    @property
    def problem(self) -> Problem:
        """The env's :class:`~torchroute.types.Problem` (``R`` trials, ``K`` arms, ``d``)."""
        if self.env is None:
            raise ValueError("built without an env: no problem")
        return self.env.problem()

    def learner(self, name: str, env: Env | None = None, node: Any = None) -> Learner:
        """Learner ``name`` of the options (or config ``node``) for the env's trials (or
        ``env``'s, e.g. one piece of them), by :func:`learner_for`."""
        env = self.env if env is None else env
        if env is None:
            raise ValueError("built without an env: no learner")
        return learner_for(self.options, name, env, node)


def build(
    opts: RunOptions,
    device: torch.device | None = None,
    table: RoutingTable | None = None,
    feature_map: FeatureMap | None = None,
    *,
    env: bool = True,
    select: Any = None,
    fit_split: str | None = None,
) -> Built:
    """The one build path: ``data`` + ``encoder`` -> table, ``features`` -> feature map and
    bandit features, ``env`` -> the env (on ``device``, default the options' device).

    A table env (:func:`env_takes_table`; ``data`` must be set) is called with ``table``,
    the ``rho`` x ``seed`` grid as ``rho`` and ``seeds`` (with ``budgets``: the
    ``budget`` x ``seed`` grid's seeds and ``rho`` 0 until a learner's plan sets it), the
    bandit ``features``,
    ``device`` and ``dtype``. A self-contained env (``data: null``: a simulator, a dataset
    the env reads itself) is called with ``seeds``, ``device`` and ``dtype`` only; its
    config holds the rest, and its ``trials()`` say what each trial varies.

    Args:
        opts: the validated options.
        device: where the env lives (default ``opts.torch_device()``).
        table: the embedded table of these options when already built (``sweep`` builds
            it once for all its runs).
        feature_map: likewise, the fitted feature map of these options.
        env: build the env (``False``: the table and features only, as ``gap`` needs).
        select: a table -> table applied before embedding (:func:`load_table`).
        fit_split: the split a PCA is fitted on (:func:`fit_feature_map`).
    """
    with_env = env
    if with_env and opts.env is None:
        raise ConfigError("env is not set: choose an env (env=single_choice, configs/env/)")
    takes_table = (not with_env) or env_takes_table(opts.env)
    if with_env and not takes_table:
        if opts.data is not None:
            raise ConfigError(
                f"env {opts.env['_target_']} reads or simulates its own data (its factory "
                "takes no table): set data=null"
            )
        factory = instantiate_node(opts.env, "env", _partial_=True)
        built = Built(opts, _make_env(factory, opts, device, {"seeds": list(opts.seeds)}))
        return built
    if opts.data is None and with_env:
        raise ConfigError(
            f"env {opts.env['_target_']} runs on a routing table: set data (configs/data/)"
        )
    table = load_table(opts, select) if table is None else table
    if feature_map is None:
        feature_map = fit_feature_map(opts, table, fit_split)
    features = feature_map(table.embeddings)
    built = Built(opts, None, table, feature_map, features)
    if with_env:
        # Objects are passed to the partial, not to instantiate (which would merge them
        # into the config and convert dataclasses such as the table).
        factory = instantiate_node(opts.env, "env", _partial_=True)
        rhos, seeds = trial_grid(list(opts.rhos), list(opts.seeds))
        if opts.budgets is not None:  # budget-major; each learner's pacer sets the rho
            rhos = [0.0] * (len(opts.budgets) * len(opts.seeds))
            seeds = trial_grid(list(opts.budgets), list(opts.seeds))[1]
        kwargs = {"table": table, "rho": rhos, "seeds": seeds, "features": features}
        built.env = _make_env(factory, opts, device, kwargs)
    return built


def _make_env(
    factory: Any, opts: RunOptions, device: torch.device | None, kwargs: dict[str, Any]
) -> Env:
    try:
        env = factory(**kwargs, device=device or opts.torch_device(), dtype=opts.dtype)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"env: {exc}") from exc
    if not isinstance(env, Env):
        raise ConfigError(f"env built a {type(env).__name__}, not a torchroute.envs.Env")
    return env


def build_env(
    opts: RunOptions, device: torch.device | None = None, table: RoutingTable | None = None
) -> Built:
    """:func:`build` with its env (the name kept for callers of the earlier API)."""
    return build(opts, device, table)


def build_learner(
    node: Any,
    problem: Problem,
    name: str,
    init_seed: int = 0,
    init_keys: torch.Tensor | None = None,
    warm: bool = False,
    after_change: Any = None,
    **kwargs: Any,
) -> Learner:
    """Instantiate one learner config: a factory (``_partial_: true``) called with ``problem``.

    The one learner factory: simulate, sweep, serve, evaluate's targets and the device check
    build learners here. ``kwargs`` are passed to the config's ``_target_`` with its own
    values (the device check passes a small fixed ``oracle``).

    Hyper-parameters are validated here, before anything of the run is written. The factory
    runs with torch's default generator seeded by ``init_seed`` (and restored afterwards), so
    the initial weights of a neural learner are the same in every run of a configuration.
    With ``init_keys`` (``[R]`` trial keys, :func:`~torchroute.functional.random.trial_keys`)
    the problem carries fresh per-trial streams (``Problem.init_rng``) instead, so each
    trial's initial weights do not depend on the trials built with it.

    The node's ``warm_*`` keys are read (and checked) by
    :meth:`~torchroute.learners.warm_options.WarmStart.from_node` and never reach the
    factory; with ``warm=True`` the built learner is warm-started as they say
    (:func:`torchroute.run.warm.apply_warm_start`: a run's learners are; a learner about to
    load a checkpoint, an evaluation target or a device-check case is not).

    ``after_change``: a callable returning the env's problems after its scenario's change
    (:meth:`~torchroute.envs.single_choice.SingleChoiceEnv.after_change`); it is called and
    its result passed as the factory's ``after_change`` argument only when the factory has
    that parameter (a reference that refits on the changed world, ``static_refit``).
    """
    if "_target_" not in node:
        raise ConfigError(f"learners.{name} has no _target_ (see configs/learner/)")
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node, resolve=True)
    warm_start, node = warm_options(node, f"learners.{name}")
    cls = own_learner_class(node)
    if cls is not None and node.get("_partial_") is not True:
        raise ConfigError(_factory_hint(name, cls, str(node["_target_"])))
    listed = [
        k
        for k in getattr(cls, "chosen_on_validation", ())
        if isinstance(node.get(k), (list, tuple))
    ]
    if listed:  # a run chooses among them (torchroute.run.choose_on_validation)
        raise ConfigError(
            f"learners.{name}.{listed[0]} is a list of values that a simulate run chooses "
            "among on the validation split; building one learner needs one value"
        )
    factory = instantiate_node(node, f"learners.{name}", **kwargs)
    if not callable(factory) or isinstance(factory, Learner):
        raise ConfigError(
            f"learners.{name} must be a factory called with the Problem (a "
            "'<Learner>.from_problem' _target_ with _partial_: true)"
        )
    if after_change is not None and _takes(factory, "after_change"):
        factory = functools.partial(factory, after_change=after_change())
    if init_keys is not None:
        problem = dataclasses.replace(problem, init_rng=TrialRNG(init_keys))
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            learner = factory(problem)
    except (TypeError, ValueError) as exc:
        if (
            isinstance(exc, TypeError)
            and cls is not None
            and str(node["_target_"]).endswith("." + cls.__name__)
        ):  # the class itself, called with the Problem alone
            raise ConfigError(_factory_hint(name, cls, node["_target_"])) from exc
        raise ConfigError(f"learners.{name}: {exc}") from exc
    if not isinstance(learner, Learner):
        raise ConfigError(f"learners.{name} built a {type(learner).__name__}, not a Learner")
    learner = learner.to(problem.device)
    if warm and warm_start.source is not None:
        from torchroute.run.warm import apply_warm_start

        try:
            apply_warm_start(learner, problem, warm_start, f"learners.{name}")
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
    return learner


def _takes(factory: Any, name: str) -> bool:
    """Whether the callable ``factory`` has a parameter ``name``."""
    try:
        return name in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


def _factory_hint(name: str, cls: type[Learner], target: str) -> str:
    """How a learner node is built, for a node of learner ``cls`` that is not its factory
    (the class itself, or no ``_partial_: true``)."""
    factory = target if not target.endswith("." + cls.__name__) else f"{target}.from_problem"
    return (
        f"learners.{name}: _target_={target!r} does not build a learner that way: a learner "
        "node names a factory the run calls with its Problem, with _partial_: true "
        f"({{_target_: {factory}, _partial_: true, <hyper-parameters>}}, as configs/learner/)"
    )


def warm_options(node: Any, key: str) -> tuple[WarmStart, dict[str, Any]]:
    """``(the WarmStart of node's warm_* keys, the node without them)``; a bad key is a
    one-line :class:`ConfigError` naming it."""
    try:
        return WarmStart.from_node(node, key)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def check_learner_options(opts: RunOptions) -> None:
    """Each run learner's :meth:`Learner.check_options` on the values of its config node,
    before the env is built or an oracle pre-trained (nothing is written yet); with
    ``env.request_rhos``, a learner that cannot decide per request
    (:meth:`Learner.decides_per_request`) is refused by name."""
    for name in opts.run_learners:
        node = opts.learners[name]
        warm, node = warm_options(node, f"learners.{name}")
        cls = own_learner_class(node)
        if cls is None:
            continue
        if warm.source is not None and not cls.learns_online:
            raise ConfigError(
                f"learners.{name}.warm_start applies to online learners; {cls.__name__} does "
                "not learn online (a static router is fitted on the train split already)"
            )
        values = {k: v for k, v in node.items() if not str(k).startswith("_")}
        try:
            cls.check_options(**values)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"learners.{name}: {exc}") from exc
        request_rhos = (opts.env or {}).get("request_rhos")
        if request_rhos is not None and not cls.decides_per_request(**values):
            raise ConfigError(
                f"learners.{name}: {cls.__name__} decides for each trial's own rho and cannot "
                f"serve requests that carry their own (env.request_rhos={list(request_rhos)}); "
                "use objective: quality_cost (LinUCB, LinTS, SquareCB and their forgetting "
                "forms), a static score router or a residual learner"
            )


def learner_for(
    opts: RunOptions, name: str, env: Env, node: Any = None, problem: Problem | None = None
) -> Learner:
    """Learner ``name`` (its config node, or ``node``) for ``env``'s trials (per-trial
    initial streams with ``rng=per_trial``), warm-started as its ``warm_*`` keys say;
    built for ``problem`` when given (default ``env.problem()``)."""
    keys = None
    if opts.rng == "per_trial":
        keys = trial_keys(env.trials(), opts.loop_seed, stream="init")
    node = opts.learners[name] if node is None else node
    node = _hide_new_models(node, opts, getattr(env, "table", None))
    problem = env.problem() if problem is None else problem
    changed = getattr(env, "after_change", None)  # an env with scenarios (single choice)
    return build_learner(node, problem, name, opts.loop_seed, keys, warm=True, after_change=changed)


def _hide_new_models(node: Any, opts: RunOptions, table: Any) -> Any:
    """``node`` with the scenario's new models handed to its oracle factories
    (:mod:`torchroute.run.hidden`); ``node`` itself for an env without a scenario, whose
    run imports no scenario code."""
    env = opts.env
    if env is None or not hasattr(env, "get") or env.get("scenario") is None:
        return node
    from torchroute.run.hidden import hide_from_oracles, scenario_new_models

    return hide_from_oracles(node, scenario_new_models(opts, table))


__all__ = [
    "Built",
    "build",
    "build_env",
    "build_learner",
    "env_takes_table",
    "fit_feature_map",
    "instantiate_node",
    "instantiate_table",
    "learner_for",
    "load_features",
    "load_table",
    "trial_grid",
]
