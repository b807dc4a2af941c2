"""Shared parts of the learners built on a fitted static router (the residual and
neural-linear learners, ``static_refit``): the router a ``base:`` option names, the argmax
of their scores, and the quality an update learns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor

from torchroute.functional.random import Source, normal
from torchroute.functional.sampling import argmax_random_ties, one_hot_probs
from torchroute.learners.base import Learner
from torchroute.learners.objective import request_rho
from torchroute.types import Context, Decision, Feedback, Problem


def resolve_base(base: Any, problem: Problem, who: str) -> Any:
    """The router ``base`` names, built for ``problem`` (its type is the caller's check).

    ``base``: the name of a packaged learner config (``"mlp_router"``), a config node (a
    mapping with a ``_target_``, such as the run's own anchor ``${learners.mlp}``), the
    factory Hydra made of one, or a built router (returned as it is). A name is a bare
    identifier of a file in the packaged ``learner`` folder, never a path. Raises
    ``ValueError`` (one line naming ``base``) for a name that is no packaged config.
    """
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from torchroute.configs_path import config_dir

    node = base
    if isinstance(base, str):
        folder = config_dir() / "learner"
        path = folder / f"{base}.yaml"
        packaged = path.is_file() and path.resolve().parent == folder.resolve()
        if not base.isidentifier() or not packaged:  # a bare name, never a path out of it
            raise ValueError(f"{who}: base must name a static router config, got {base!r}")
        node = OmegaConf.to_container(OmegaConf.load(path))
    if isinstance(node, dict) and "_target_" in node:
        node = instantiate({**node, "_partial_": True})
    return node(problem) if callable(node) and not isinstance(node, Learner) else node


def packaged_configs_of(kind: type, exclude: tuple[type, ...] = ()) -> str:
    """The packaged learner configs whose ``_target_`` builds a ``kind`` (and none of
    ``exclude``), comma separated: what an error about a ``base`` lists, taken from the
    classes the configs resolve to, so the list follows the configs."""
    from hydra.utils import get_object
    from omegaconf import OmegaConf

    from torchroute.configs_path import config_dir

    names = []
    for path in sorted((config_dir() / "learner").glob("*.yaml")):
        target = OmegaConf.load(path).get("_target_")
        built = get_object(target) if isinstance(target, str) else None
        cls = getattr(built, "__self__", built)  # a factory classmethod: its class
        if isinstance(cls, type) and issubclass(cls, kind) and not issubclass(cls, exclude):
            names.append(path.stem)
    return ", ".join(names)


def observed_quality(
    feedback: Feedback, context: Context, trial_rho: Tensor, costs: Callable[[], Tensor]
) -> Tensor:
    """The quality ``[R, B, K]`` an update learns: ``Feedback.score``, or without it the
    utility's inverse ``reward + rho c`` (exact where the utility was not clipped), with
    the request's ``rho`` (``Context.rho``, else ``trial_rho [R]``) and the costs
    ``costs() [R, B, K]`` (called only then)."""
    if feedback.score is not None:
        return feedback.score
    cost = costs()
    return feedback.reward + request_rho(context, trial_rho, cost) * cost


def inner_ridge_learner(
    kinds: tuple[type, type, type],
    num_trials: int,
    num_arms: int,
    dim: int,
    lam: float,
    gamma: float,
    window: int | None,
    score_hp: dict[str, Any],
    who: str,
) -> Learner:
    """The ridge learner over ``dim`` features that a residual correction or neural-linear
    heads keep: ``kinds = (plain, discounted, sliding window)``, the second when
    ``gamma < 1``, the third with a ``window``; ``score_hp`` its width (``alpha`` or ``v``).
    Raises ``ValueError`` (one line naming ``who``) for both ``gamma < 1`` and a window,
    or a window that is not an integer >= 1."""
    from torchroute.checks import check_number

    plain, discounted, windowed = kinds
    if window is not None and gamma < 1:
        raise ValueError(f"{who}: give gamma < 1 or a window, not both")
    if window is not None:
        check_number(who, "window", window, ge=1, integer=True)
        return windowed(num_trials, num_arms, dim, window=window, lam=lam, **score_hp)
    if gamma < 1:
        return discounted(num_trials, num_arms, dim, gamma=gamma, lam=lam, **score_hp)
    return plain(num_trials, num_arms, dim, lam=lam, **score_hp)


def ucb_scores(inner: Learner, phi: Tensor, generator: Source) -> Tensor:
    """The optimistic scores ``[R, B, K]`` of ``phi [R, B, p]`` by the inner LinUCB-family
    learner ``inner`` (the correction or the heads; a forgetting learner's ``_scores`` also
    takes the generator, for its new-arm draws)."""
    from torchroute.learners.gram_base import GramRidgeLearner

    if isinstance(inner, GramRidgeLearner):
        return inner._scores(phi, generator)
    return inner._scores(phi)


def posterior_draw(mean: Tensor, width: Tensor, v: float, generator: Source) -> Tensor:
    """One Thompson draw ``mean + v width N(0, 1)`` per cell (``[R, B, K]``); ``mean``
    itself when ``v = 0`` (no normal drawn: the greedy learner)."""
    if v == 0:
        return mean
    noise = normal(generator, mean.shape, dtype=mean.dtype, device=mean.device)
    return mean + v * width * noise


class ScoredArgmax(Learner):
    """A learner that plays the argmax of its ``_scores`` (random tie-break); subclasses
    define ``_scores(context, generator) -> [R, B, K]`` (the unavailable arms masked)."""

    def _scores(self, context: Context, generator: Source) -> Tensor:
        """The masked scores ``[R, B, K]`` of ``context.x [R, B, d]``."""
        raise NotImplementedError

    def act(self, context: Context, generator: Source = None) -> Decision:
        """``argmax_k`` of the scores (random tie-break): ``x [R, B, d]`` -> one-hot
        ``probs [R, B, K]``, ``action [R, B]`` (and the ``scores``)."""
        self._check_context(context)
        scores = self._scores(context, generator)
        action = argmax_random_ties(scores, generator)
        probs = one_hot_probs(action, self.num_arms, context.x.dtype)
        return Decision(probs=probs, action=action, scores=scores)


__all__ = [
    "ScoredArgmax",
    "inner_ridge_learner",
    "observed_quality",
    "packaged_configs_of",
    "posterior_draw",
    "resolve_base",
    "ucb_scores",
]
