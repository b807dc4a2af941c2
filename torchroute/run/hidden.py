"""A scenario's new models, handed to the oracle factories a run builds.

A model that arrives mid-stream (``{kind: new_model}``) did not exist when anything was
fitted offline. The problem's train split and the static routers already treat it so; an
oracle gets the same as an argument of its factory: a factory that takes ``hide_arms``
(:func:`torchroute.trainers.load_or_pretrain`, or a plug-in's) is given the models new in
any trial of the run, wherever its node sits in a learner's or the feature source's
config. Which factories take it is read from their signatures, not from their names.

The scenario code is imported only when the run's env has a scenario.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

#: the argument of an oracle factory that receives the models to hide
HIDE_ARMS = "hide_arms"


def scenario_new_models(opts: Any, table: Any) -> list[str]:
    """The models the options' ``env.scenario`` adds mid-stream in any trial (``[]``)."""
    env = opts.env
    spec = env.get("scenario") if env is not None and hasattr(env, "get") else None
    if spec is None or table is None:
        return []
    from torchroute.envs.scenario import new_model_names

    if isinstance(spec, DictConfig) or OmegaConf.is_list(spec):
        spec = OmegaConf.to_container(spec, resolve=True)
    return new_model_names(spec, table, list(opts.rhos))


def takes_hidden_arms(target: Any) -> bool:
    """Whether the factory a ``_target_`` names has a ``hide_arms`` parameter (resolved as
    a run folder's targets are, :func:`torchroute.run.trust.resolve`; ``False`` for a
    target that does not resolve: the build reports it)."""
    from torchroute.run.trust import UntrustedTarget, resolve

    try:
        obj = resolve(target)
    except UntrustedTarget:
        return False
    if isinstance(obj, (classmethod, staticmethod)):
        obj = obj.__func__
    try:
        return HIDE_ARMS in inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return False


def hide_from_oracles(node: Any, names: list[str]) -> Any:
    """``node`` (a resolved config: dicts and lists) with ``hide_arms: names`` on every node
    whose factory takes it (:func:`takes_hidden_arms`), nested nodes included; a copy, or
    ``node`` itself when ``names`` is empty."""
    if not names:
        return node
    if isinstance(node, Mapping):
        out = {key: hide_from_oracles(value, names) for key, value in node.items()}
        if "_target_" in out and takes_hidden_arms(out["_target_"]):
            out[HIDE_ARMS] = list(names)
        return out
    if isinstance(node, (list, tuple)):
        return type(node)(hide_from_oracles(value, names) for value in node)
    return node
