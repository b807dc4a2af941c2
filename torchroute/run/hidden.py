"""A scenario's new models, hidden from the oracles a run pre-trains.

A model that arrives mid-stream (``{kind: new_model}``) did not exist when anything was
fitted offline. The problem's train split and the static routers already treat it so; an
oracle that a run pre-trains itself (a ``torchroute.trainers.load_or_pretrain`` node with
no ``checkpoint``, for the ``oracle`` feature source, CABS or the regressor router) gets
the same: its pretrain config gains ``hide_arms`` (the models new in any trial of the run),
so it reads their scores as 0 in every row. An oracle loaded from a given artifact is used
as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from torchroute.envs.scenario import new_model_names

log = logging.getLogger(__name__)

#: the ``_target_`` of an oracle node that may pre-train
PRETRAIN_TARGET = "torchroute.trainers.load_or_pretrain"


def scenario_new_models(opts: Any, table: Any) -> list[str]:
    """The models the options' ``env.scenario`` adds mid-stream in any trial (``[]``)."""
    env = opts.env
    spec = env.get("scenario") if env is not None and hasattr(env, "get") else None
    if spec is None or table is None:
        return []
    if isinstance(spec, DictConfig) or OmegaConf.is_list(spec):
        spec = OmegaConf.to_container(spec, resolve=True)
    return new_model_names(spec, table, list(opts.rhos))


def hide_from_oracles(node: Any, names: list[str]) -> Any:
    """``node`` (a resolved config: dicts and lists) with ``config.hide_arms = names`` on
    every pre-training oracle node in it; a copy, or ``node`` itself when ``names`` is
    empty."""
    if not names:
        return node
    if isinstance(node, Mapping):
        out = {key: hide_from_oracles(value, names) for key, value in node.items()}
        if out.get("_target_") == PRETRAIN_TARGET:
            if out.get("checkpoint") is not None:
                log.warning(
                    "the scenario's new models (%s) are not hidden from the oracle loaded "
                    "from %s: it was pre-trained outside this run",
                    ", ".join(names),
                    out["checkpoint"],
                )
            else:
                out["config"] = {**(out.get("config") or {}), "hide_arms": list(names)}
        return out
    if isinstance(node, (list, tuple)):
        return type(node)(hide_from_oracles(value, names) for value in node)
    return node
