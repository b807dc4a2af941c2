"""Which ``_target_``s read from a run folder may be built: torchroute's own classes only.

A run folder (``config.yaml``) is data: serving, ``report`` and resuming instantiate a node
read from one only when every ``_target_`` in it (nested ones included) names one of
torchroute's learners, envs, encoders or feature maps. Anything else (``torch.hub.load``,
``os.system``, ``torchroute.io.write_text_atomic``, a module planted beside the run) is
refused with a one-line :class:`~torchroute.run.options.ConfigError` naming the key,
before anything is imported or run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from torchroute.run.options import ConfigError

#: module prefixes whose classes and factories a run folder may name
ALLOWED_TARGETS: tuple[str, ...] = (
    "torchroute.learners.",  # learners (``<Learner>.from_problem``)
    "torchroute.envs.",  # envs and their factories
    "torchroute.models.",  # encoders, the embedding cache, oracle heads
    "torchroute.features.",  # feature maps
    "torchroute.trainers.load_or_pretrain",  # a pre-trained oracle artifact
)

#: modules that moved, old dotted prefix -> new one: a saved run (or a user's config) that
#: names the old path still builds (:func:`current_target`)
MOVED_TARGETS: dict[str, str] = {
    "torchroute.envs.subset_opt": "torchroute.envs.subset.opt",
    "torchroute.envs.subset_instances": "torchroute.envs.subset.trec",
    "torchroute.envs.subset_table": "torchroute.envs.subset.table",
}


def current_target(target: str) -> str:
    """``target`` with a moved module prefix (:data:`MOVED_TARGETS`) replaced by its new one.

    Example:
        >>> current_target("torchroute.envs.subset_table.table_subset_env")
        'torchroute.envs.subset.table.table_subset_env'
    """
    for old, new in MOVED_TARGETS.items():
        if target == old or target.startswith(old + "."):
            return new + target[len(old) :]
    return target


def current_targets(node: Any) -> Any:
    """A copy of a plain config node with every ``_target_`` passed through
    :func:`current_target` (nested nodes included); other values are kept as they are."""
    if isinstance(node, dict):
        return {
            k: current_target(v) if k == "_target_" and isinstance(v, str) else current_targets(v)
            for k, v in node.items()
        }
    if isinstance(node, (list, tuple)):
        return type(node)(current_targets(v) for v in node)
    return node


def targets(node: Any, key: str) -> Iterator[tuple[str, Any]]:
    """Every ``(key path, _target_ value)`` in a config node, nested nodes included."""
    if isinstance(node, dict):
        if "_target_" in node:
            yield f"{key}._target_", node["_target_"]
        for k, value in node.items():
            if k != "_target_":
                yield from targets(value, f"{key}.{k}")
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from targets(value, f"{key}[{i}]")


def is_allowed(target: Any, extra: Iterable[str] = ()) -> bool:
    """Whether ``target`` (a dotted name) lies under :data:`ALLOWED_TARGETS` or ``extra``."""
    if not isinstance(target, str) or not target or ".." in target:
        return False
    for prefix in (*ALLOWED_TARGETS, *extra):
        if target == prefix.rstrip(".") or (prefix.endswith(".") and target.startswith(prefix)):
            return True
        if not prefix.endswith(".") and target.startswith(prefix + "."):
            return True
    return False


def check_trusted(node: Any, key: str, source: str, extra: Iterable[str] = ()) -> None:
    """Refuse ``node`` (read from ``source``) unless all its ``_target_``s are allowed.

    Args:
        node: a plain config node (dict) read from a run folder.
        key: its key in the config (named in the error), e.g. ``learners.linucb``.
        source: the file it came from (named in the error).
        extra: more allowed prefixes (a plug-in package the caller trusts).

    Raises:
        ConfigError: ``<source>: <key>._target_=<value> is not one of torchroute's own
            classes ...``.
    """
    extra = tuple(extra)
    for path, target in targets(node, key):
        if not is_allowed(target, extra):
            raise ConfigError(
                f"{source}: {path}={target!r} is not one of torchroute's own classes "
                "(learners, envs, encoders, feature maps); a run folder is data, so it is "
                "not built"
            )


__all__ = [
    "ALLOWED_TARGETS",
    "MOVED_TARGETS",
    "check_trusted",
    "current_target",
    "current_targets",
    "is_allowed",
    "targets",
]
