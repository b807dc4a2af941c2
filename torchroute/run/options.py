"""``RunOptions``: the validated, frozen settings of one run, built once from the config.

Everything below the CLI reads these options, never a ``DictConfig``: the composed config
is resolved to plain containers once (:meth:`RunOptions.from_config`), each key is checked
with a one-line :class:`ConfigError` naming it, and the nodes that describe objects
(``data``, ``encoder``, ``env``, ``learners.<name>``, ``features.oracle``, ``logger``) are
kept as plain dicts for :mod:`torchroute.run.build` to instantiate.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from torchroute.errors import ConfigError, SectionError
from torchroute.run.choice_rule import KEY as CHOICE_KEY
from torchroute.run.choice_rule import ChoiceRule, check_choice_rule
from torchroute.run.report_regimes import RuleSpec, check_regime_rule

_DTYPES = ("float32", "float64")
_RNGS = ("shared", "per_trial")
#: the values ``features.source`` accepts
FEATURE_SOURCES = ("pca", "raw", "oracle")


def fingerprint_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """A resolved run configuration without the keys of its ``runtime_keys`` (they leave
    the numbers alone): what a run's checkpoints store and its digest hashes. ``budgets``
    unset is left out (the fingerprint of before the key); ``report_regimes`` stays in when
    the validation choices are made per cost regime (the regimes then group them)."""
    runtime = set(config.get("runtime_keys") or ()) | {"runtime_keys"}
    if config.get("budgets") is None:
        runtime.add("budgets")
    if check_choice_rule(config.get(CHOICE_KEY)).per == "regime":
        runtime.discard("report_regimes")
    return {k: v for k, v in config.items() if k not in runtime}


def number_list(config: Mapping[str, Any], key: str, kind: type) -> list:
    """``config[key]`` as a non-empty list of ``kind`` values, or a :class:`ConfigError`."""
    values = list(config.get(key) or [])
    if not values:
        raise ConfigError(f"{key} must be a non-empty list, got {values}")
    out = []
    for v in values:
        try:
            number = kind(v)
        except (TypeError, ValueError):
            number = None
        if number is None or isinstance(v, bool) or (kind is int and float(v) != number):
            raise ConfigError(f"{key} must hold {kind.__name__} values, got {v!r} in {values}")
        out.append(number)
    return out


def check_no_repeats(config: Mapping[str, Any]) -> None:
    """Refuse ``rhos`` or ``seeds`` lists that name a value twice (each trial would run twice).

    Checked on what a user gives ``simulate``; ``sweep`` repeats them on purpose (one block of
    trials per grid point).
    """
    for key, kind in (("rhos", float), ("seeds", int)):
        values = number_list(config, key, kind)
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            raise ConfigError(
                f"{key} repeats {repeated} in {values}: each trial would run twice; list each once"
            )


def budget_list(config: Mapping[str, Any]) -> tuple[float, ...] | None:
    """``config["budgets"]``: ``None`` (unset), else a non-empty list of distinct finite
    positive numbers (mean cost per request, in the table's cost unit), or a
    :class:`ConfigError` naming the key."""
    values = config.get("budgets")
    if values is None:
        return None
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence):
        raise ConfigError(
            f"budgets must be a list of mean costs per request (budgets=[0.001,0.002]) or "
            f"null, got {values!r}"
        )
    budgets = number_list({"budgets": list(values)}, "budgets", float)
    bad = [b for b in budgets if not (0 < b < float("inf"))]
    if bad:
        raise ConfigError(
            f"budgets must be finite and > 0 (mean cost per request), got {bad} in {budgets}"
        )
    repeated = sorted({b for b in budgets if budgets.count(b) > 1})
    if repeated:
        raise ConfigError(f"budgets repeats {repeated} in {budgets}: list each once")
    return tuple(budgets)


def _flag(config: Mapping[str, Any], key: str, default: bool, prefix: str = "") -> bool:
    """``config[key]`` as a bool: ``true`` or ``false`` (not ``maybe``, not 1)."""
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{prefix}{key} must be true or false, got {value!r}")
    return value


def _positive_int(config: Mapping[str, Any], key: str, optional: bool) -> int | None:
    value = config.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        what = "an integer >= 1 or null" if optional else "an integer >= 1"
        raise ConfigError(f"{key} must be {what}, got {value!r}")
    return value


def _report_sections(value: Any) -> tuple[str, ...]:
    from torchroute.run.report_sections import check_section_targets

    try:
        return check_section_targets(value)
    except SectionError as exc:
        raise ConfigError(str(exc)) from None


def _plain(cfg: Any) -> dict[str, Any]:
    """The resolved config as plain containers (a ``DictConfig`` or a mapping)."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    return copy.deepcopy(dict(cfg))


@dataclass(frozen=True)
class FeatureOptions:
    """``features.*``: how embeddings become bandit features (:mod:`torchroute.features`)."""

    source: str = "pca"
    pca_dim: int | None = 32
    normalize: bool = True
    bias: bool = True
    oracle: dict[str, Any] | None = None

    @classmethod
    def from_config(cls, node: Mapping[str, Any] | None) -> FeatureOptions:
        """Validate the ``features`` section (``None``: the defaults)."""
        node = dict(node or {})
        source = node.get("source", "pca")
        if source not in FEATURE_SOURCES:
            raise ConfigError(f"features.source must be one of {FEATURE_SOURCES}, got {source!r}")
        pca_dim = node.get("pca_dim")
        if pca_dim is not None and (
            not isinstance(pca_dim, int) or isinstance(pca_dim, bool) or pca_dim < 1
        ):
            raise ConfigError(f"features.pca_dim must be an integer >= 1 or null, got {pca_dim!r}")
        return cls(
            source=source,
            pca_dim=pca_dim,
            normalize=_flag(node, "normalize", True, "features."),
            bias=_flag(node, "bias", True, "features."),
            oracle=node.get("oracle"),
        )


@dataclass(frozen=True)
class RunOptions:
    """One run's settings (the keys of ``configs/simulate.yaml``), validated.

    Attributes:
        config: the whole resolved configuration (``config.yaml``; the fingerprint).
        rhos, seeds: the configured lists; the run's ``R = len(rhos) * len(seeds)`` trials
            are their rho-major product (self-contained envs get ``seeds`` only).
        budgets: ``None``, or spend targets (mean cost per request): the trials are then
            ``len(budgets) * len(seeds)`` (budget-major) and a pacer sets each trial's rho
            every round (:mod:`torchroute.run.budgets`); ``rhos`` do not enter the grid.
        learners: ``{name: config node}``; ``run_learners``: the names this run runs.
        data, encoder, env, logger: config nodes (``None`` when unset).
        device: the configured device name (``cpu``, ``cuda``, ``cuda:N``, ``auto``).
        dtype: ``torch.float32`` or ``torch.float64``.
        jobs: how many learners run at once, each in its own process
            (:mod:`torchroute.run.jobs`; 1: one after the other in this process).
    """

    config: Mapping[str, Any]
    name: str
    out_dir: Path
    rhos: tuple[float, ...]
    seeds: tuple[int, ...]
    split: str
    learners: Mapping[str, dict[str, Any]]
    run_learners: tuple[str, ...]
    reference: str
    data: dict[str, Any] | None
    encoder: dict[str, Any] | None
    env: dict[str, Any] | None
    logger: dict[str, Any] | None
    features: FeatureOptions
    device: str
    dtype: torch.dtype
    loop_seed: int
    rng: str
    trial_chunk: int | None
    jobs: int
    log_every: int
    ckpt_every: int | None
    resume: str | None
    log_decisions: bool
    log_contexts: bool
    progress: bool
    report: bool
    report_sections: tuple[str, ...]
    report_regimes: RuleSpec
    overwrite: bool
    budgets: tuple[float, ...] | None = None
    choice_rule: ChoiceRule = field(default_factory=ChoiceRule)

    @classmethod
    def from_config(cls, cfg: Any, *, need_learners: bool = True) -> RunOptions:
        """Validate the composed config (a ``DictConfig`` or a plain mapping) once.

        Raises:
            ConfigError: a key holds an impossible value (the message names it).
        """
        c = _plain(cfg)
        learners = dict(c.get("learners") or {})
        if need_learners and not learners:
            raise ConfigError("no learners configured: set learners (see configs/learner/)")
        rhos = number_list(c, "rhos", float)
        seeds = number_list(c, "seeds", int)
        bad = [r for r in rhos if not (r >= 0 and r < float("inf"))]
        if bad:
            raise ConfigError(f"rhos must be finite and >= 0 (cost sensitivity), got {bad}")
        negative = [s for s in seeds if s < 0]
        if negative:
            raise ConfigError(f"seeds must be integers >= 0 (as data.seed), got {negative}")
        chosen = c.get("run_learners")
        if chosen is not None and (isinstance(chosen, str) or not isinstance(chosen, Sequence)):
            raise ConfigError(
                f"run_learners must be a list of learner names ([linucb]) or null, got {chosen!r}"
            )
        if chosen is not None and not list(chosen):
            raise ConfigError("run_learners=[] names no learner; null (the default) runs them all")
        run_learners = list(chosen or learners)
        unknown = sorted(set(run_learners) - set(learners))
        if unknown:
            raise ConfigError(
                f"run_learners names unknown learners {unknown}; configured: {sorted(learners)}"
            )
        rounds = c.get("rounds")
        if rounds is not None and (
            not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1
        ):
            raise ConfigError(f"rounds must be an integer >= 1 or null, got {rounds!r}")
        dtype = c.get("dtype", "float32")
        if dtype not in _DTYPES:
            raise ConfigError(f"dtype must be one of {list(_DTYPES)}, got {dtype!r}")
        rng = c.get("rng", "shared")
        if rng not in _RNGS:
            raise ConfigError(f"rng must be one of {list(_RNGS)}, got {rng!r}")
        chunk = _positive_int(c, "trial_chunk", optional=True)
        if chunk is not None and rng != "per_trial":
            raise ConfigError(
                "trial_chunk needs rng=per_trial (with one shared generator a trial's numbers "
                "depend on the trials beside it)"
            )
        jobs = _positive_int({"jobs": c.get("jobs", 1)}, "jobs", optional=False)
        log_every = _positive_int(c, "log_every", optional=False)
        ckpt_every = _positive_int(c, "ckpt_every", optional=True)
        device = str(c.get("device", "cpu"))
        check_device_name(device)
        log_decisions = _flag(c, "log_decisions", False)
        log_contexts = _flag(c, "log_contexts", False)
        loop_seed = c.get("loop_seed", 0)
        if not isinstance(loop_seed, int) or isinstance(loop_seed, bool):
            raise ConfigError(f"loop_seed must be an integer, got {loop_seed!r}")
        _check_scenario(c.get("env"))
        if log_decisions and c.get("resume"):
            raise ConfigError(
                "log_decisions=true cannot go with resume: the rounds before the checkpoint "
                "were not recorded; run from the start"
            )
        return cls(
            config=c,
            name=str(c.get("name", "simulate")),
            out_dir=Path(str(c.get("out_dir", "outputs/simulate"))),
            rhos=tuple(rhos),
            seeds=tuple(seeds),
            split=str(c.get("split", "test")),
            learners=learners,
            run_learners=tuple(run_learners),
            reference=str(c.get("reference", "linucb")),
            data=c.get("data"),
            encoder=c.get("encoder"),
            env=c.get("env"),
            logger=c.get("logger"),
            features=FeatureOptions.from_config(c.get("features")),
            device=device,
            dtype=getattr(torch, dtype),
            loop_seed=loop_seed,
            rng=rng,
            trial_chunk=chunk,
            jobs=jobs,  # type: ignore[arg-type]
            log_every=log_every,  # type: ignore[arg-type]
            ckpt_every=ckpt_every,
            resume=None if not c.get("resume") else str(c["resume"]),
            log_decisions=log_decisions,
            log_contexts=log_contexts,
            progress=_flag(c, "progress", True),
            report=_flag(c, "report", True),
            report_sections=_report_sections(c.get("report_sections")),
            report_regimes=check_regime_rule(c.get("report_regimes")),
            overwrite=_flag(c, "overwrite", False),
            budgets=budget_list(c),
            choice_rule=check_choice_rule(c.get(CHOICE_KEY)),
        )

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The configuration without the keys of ``runtime_keys`` (:func:`fingerprint_of`)."""
        return fingerprint_of(self.config)

    @property
    def grid_size(self) -> int:
        """The run's trials on a table: ``len(budgets or rhos) * len(seeds)``."""
        return len(self.budgets or self.rhos) * len(self.seeds)

    def digest(self, learner: str | None = None) -> str:
        """A 16-hex-digit hash of the fingerprint (of one learner's results when named)."""
        numbers = self.fingerprint
        if learner is not None:
            numbers = {**numbers, "learner": learner}
        return digest(numbers)

    def torch_device(self) -> torch.device:
        """The device the run uses (``auto``: CUDA when available)."""
        return resolve_device(self.device)


def _check_scenario(env: Any) -> None:
    """A scenario's keys checked before any data is loaded (``env.scenario``)."""
    if isinstance(env, Mapping) and env.get("scenario") is not None:
        from torchroute.envs.scenario import parse_scenario

        try:
            parse_scenario(env["scenario"])
        except ValueError as exc:
            raise ConfigError(f"env: {exc}") from exc


def digest(config: Mapping[str, Any]) -> str:
    """A 16-hex-digit sha256 of ``config`` as sorted JSON."""
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_device_name(name: str) -> None:
    """A :class:`ConfigError` unless ``name`` names a device torchroute runs on."""
    if name == "auto":
        return
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(
            f"device={name!r} is not a device; use cpu, cuda, cuda:N or auto"
        ) from exc
    if device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"device={name!r} is not supported; use cpu, cuda, cuda:N or auto")


def resolve_device(name: str) -> torch.device:
    """``name`` as a ``torch.device`` available here (``auto``: CUDA when available)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    check_device_name(name)
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={name!r} but CUDA is not available here; use device=cpu")
    return device


__all__ = [
    "FEATURE_SOURCES",
    "ConfigError",
    "FeatureOptions",
    "RunOptions",
    "check_device_name",
    "digest",
    "fingerprint_of",
    "number_list",
    "resolve_device",
]
