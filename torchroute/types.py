"""Typed containers passed between environments, learners and the loop.

Dimension letters (see the README): ``R`` trials, ``B`` contexts per round, ``K`` arms,
``d`` features, ``e`` encoder embedding size, ``m`` subset size, ``n`` queries of a split.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from torchroute.errors import InputError

if TYPE_CHECKING:
    from torchroute.functional.random import TrialRNG


def _check(name: str, tensor: Tensor, ndim: int, what: str) -> None:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {what}, got {type(tensor).__name__}")
    if tensor.ndim != ndim:
        raise InputError(f"{name} must have shape {what}, got {tuple(tensor.shape)}")


def _check_lead(name: str, tensor: Tensor | None, lead: tuple[int, ...], what: str) -> None:
    if tensor is not None and tuple(tensor.shape[: len(lead)]) != lead:
        raise InputError(
            f"{name} has shape {tuple(tensor.shape)}, expected {what} with leading {lead}"
        )


class _TensorContainer:
    """Moves every tensor field with ``.to()``; ``None`` fields stay ``None``."""

    def to(self, *args, **kwargs):
        changes = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                changes[f.name] = value.to(*args, **kwargs)
        return replace(self, **changes)  # type: ignore[type-var]


@dataclass(frozen=True)
class Context(_TensorContainer):
    """What a learner sees before it decides.

    Attributes:
        x: bandit features, ``[R, B, d]``.
        index: row of each context in the routing table, ``[R, B]`` (long), or ``None``
            when the contexts come from outside a table (serving, simulators).
        embedding: the encoder output of each query, ``[R, B, e]``, for learners whose
            oracles read embeddings while their bandit features stay in ``x``.
        available: ``[R, B, K]`` bool, the arms that exist this round (a scenario's new
            model before it arrives is ``False``), or ``None`` when every arm does. Every
            learner gives an unavailable arm probability exactly 0 and never plays it.
        prices: ``[R, B, K]``, each model's known price this round (its mean cost per
            query in the table's cost unit, after any price change), or ``None`` when the
            environment knows no prices or they never change (then ``Problem.prices``).
        rho: ``[R, B]``, the trade-off of each request (utility per unit of cost), or
            ``None``: each trial's own ``Problem.rho``.

    Example:
        >>> Context(x=torch.zeros(4, 1, 8)).num_trials
        4
    """

    x: Tensor
    index: Tensor | None = None
    embedding: Tensor | None = None
    available: Tensor | None = None
    prices: Tensor | None = None
    rho: Tensor | None = None

    def __post_init__(self) -> None:
        _check("Context.x", self.x, 3, "[R, B, d]")
        lead = tuple(self.x.shape[:2])
        if self.index is not None:
            _check("Context.index", self.index, 2, "[R, B]")
            _check_lead("Context.index", self.index, lead, "[R, B] matching Context.x")
        if self.embedding is not None:
            _check("Context.embedding", self.embedding, 3, "[R, B, e]")
            _check_lead("Context.embedding", self.embedding, lead, "[R, B, e] matching x")
        if self.available is not None:
            _check("Context.available", self.available, 3, "[R, B, K]")
            _check_lead("Context.available", self.available, lead, "[R, B, K] matching x")
            if self.available.dtype != torch.bool:
                raise TypeError(f"Context.available must be bool, got {self.available.dtype}")
        if self.prices is not None:
            _check("Context.prices", self.prices, 3, "[R, B, K]")
            _check_lead("Context.prices", self.prices, lead, "[R, B, K] matching x")
        if self.rho is not None:
            _check("Context.rho", self.rho, 2, "[R, B]")
            _check_lead("Context.rho", self.rho, lead, "[R, B] matching x")

    @property
    def num_trials(self) -> int:
        """``R``, the leading dimension of ``x``."""
        return self.x.shape[0]

    @property
    def batch_size(self) -> int:
        """``B``, the contexts per round (the second dimension of ``x``)."""
        return self.x.shape[1]


@dataclass(frozen=True)
class Decision(_TensorContainer):
    """A learner's decision for one round.

    Attributes:
        probs: sampling distribution over arms, ``[R, B, K]`` (one-hot for deterministic
            rules); rows sum to one.
        action: the drawn arm ``[R, B]`` (long), or the drawn multiset ``[R, B, m]`` for
            subset routing.
        observe: optional ``[R, B, K]`` bool, the arms whose true feedback the learner asks
            for besides ``action`` (a feedback graph's out-neighbours; all ``True`` for a
            full-information learner). The environment reveals ``action | observe``.
        scores: optional ``[R, B, K]``, the values an argmax rule chose ``action`` by (the
            unavailable arms masked), where ``act`` computed them as ``routing_probs``
            would: it then reads them instead of computing them again.
    """

    probs: Tensor
    action: Tensor
    observe: Tensor | None = None
    scores: Tensor | None = None

    def __post_init__(self) -> None:
        _check("Decision.probs", self.probs, 3, "[R, B, K]")
        if self.action.ndim not in (2, 3) or self.action.shape[:2] != self.probs.shape[:2]:
            raise InputError(
                f"Decision.action must have shape [R, B] or [R, B, m] matching probs "
                f"{tuple(self.probs.shape)}, got {tuple(self.action.shape)}"
            )
        if self.observe is not None:
            if self.observe.shape != self.probs.shape:
                raise InputError(
                    f"Decision.observe must be [R, B, K] = {tuple(self.probs.shape)} like "
                    f"Decision.probs, got {tuple(self.observe.shape)}"
                )
            if self.observe.dtype != torch.bool:
                raise TypeError(f"Decision.observe must be bool, got {self.observe.dtype}")
        if self.scores is not None and self.scores.shape != self.probs.shape:
            raise InputError(
                f"Decision.scores must be [R, B, K] = {tuple(self.probs.shape)} like "
                f"Decision.probs, got {tuple(self.scores.shape)}"
            )

    @property
    def is_subset(self) -> bool:
        """Whether ``action`` is a multiset ``[R, B, m]`` (subset routing)."""
        return self.action.ndim == 3


@dataclass(frozen=True)
class Feedback(_TensorContainer):
    """What the world reveals after a decision.

    Attributes:
        reward: utilities ``u(t, k) = clip(y - rho * c, 0, 1)``, ``[R, B, K]``; entries
            that are not observed are zero.
        observed: which entries of ``reward`` were revealed, ``[R, B, K]`` bool (one-hot
            rows for bandit feedback, all ``True`` for full information, graph rows for
            side observations). Learners use it as given.
        score: quality ``y`` of the observed arms, ``[R, B, K]`` (zero where unobserved).
        cost: cost ``c`` of the observed arms, ``[R, B, K]`` (zero where unobserved).
        set_reward: the reward of the whole routed set, ``[R, B]`` (subset routing, where
            only the set's reward is observed).
        only_played: ``True`` when ``observed`` is known, without looking at it, to be the
            one-hot of ``Decision.action`` (plain bandit feedback); a hint that lets a
            learner take a cheaper update path. ``False`` promises nothing.
    """

    reward: Tensor
    observed: Tensor
    score: Tensor | None = None
    cost: Tensor | None = None
    set_reward: Tensor | None = None
    only_played: bool = False

    def __post_init__(self) -> None:
        _check("Feedback.reward", self.reward, 3, "[R, B, K]")
        _check("Feedback.observed", self.observed, 3, "[R, B, K]")
        if self.observed.dtype != torch.bool:
            raise TypeError(f"Feedback.observed must be bool, got {self.observed.dtype}")
        for name in ("observed", "score", "cost"):
            value = getattr(self, name)
            if value is not None and value.shape != self.reward.shape:
                raise InputError(
                    f"Feedback.{name} has shape {tuple(value.shape)}, expected "
                    f"{tuple(self.reward.shape)} (the shape of Feedback.reward)"
                )
        if self.set_reward is not None:
            _check("Feedback.set_reward", self.set_reward, 2, "[R, B]")
            _check_lead(
                "Feedback.set_reward", self.set_reward, tuple(self.reward.shape[:2]), "[R, B]"
            )


#: Per-round quantities an environment emits for the metrics (never shown to the learner):
#: a mapping of names to ``[R, B]`` or ``[R, B, c]`` tensors, e.g. ``utility``, ``regret``,
#: ``score``, ``cost`` for single-choice routing, a cost vector for budgeted subsets.
Outcome = Mapping[str, Tensor]


@dataclass(frozen=True)
class TrainSplit(_TensorContainer):
    """The offline data a learner may fit before the online run.

    Attributes:
        features: bandit features of the train queries, ``[n, d]``.
        scores: ``[n, K]`` quality.
        costs: ``[n, K]`` cost.
        embeddings: encoder embeddings ``[n, e]`` when the env has them.
    """

    features: Tensor
    scores: Tensor
    costs: Tensor
    embeddings: Tensor | None = None


@dataclass(frozen=True)
class Problem:
    """What a learner may know before the first round; learner factories are called with it.

    Attributes:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d``, the size of ``Context.x``.
        rho: cost sensitivity of each trial, ``[R]``.
        arm_names: the ``K`` arm names.
        prices: mean cost of each arm per query, ``[K]`` (on the train split when there is
            one), or ``None`` when unknown.
        embed_dim: ``e``, the size of ``Context.embedding``, or ``None`` when the env gives
            no embeddings.
        train: the train split, or ``None`` when the env has none.
        horizon: ``T``, the number of rounds.
        device: where the env's tensors live (learners are moved there).
        dtype: the floating dtype of contexts and rewards.
        labels: other numeric per-trial settings the env varies, ``{name: [R]}`` (e.g. the
            dimension or the constraint level of each trial), for learners whose
            hyper-parameters depend on them.
        init_rng: per-trial streams for a learner's random initial state (NeuralUCB's
            weights), so that a trial starts the same whatever trials it runs with; ``None``
            (the default): torch's global generator, seeded per run by the runner.
        hidden_arms: ``[R, K]`` bool, the arms that do not exist when the run starts (a
            scenario's new models), or ``None``. Their train-split scores are not known:
            anything fitted offline (a warm start, a static router) must not read
            ``train.scores`` of a hidden arm; their prices (``prices``, ``train.costs``)
            are known, as a deployed router knows them from its configuration.
        validation: the validation split (full feedback, like ``train``), or ``None`` when
            the env has none; learners choose hyper-parameters on it, never on the replayed
            split.
        budget: each trial's spend target ``[R]`` (mean cost per request, in the table's
            cost unit) when a pacer sets its ``rho`` (``simulate``'s ``budgets``), or
            ``None``; a learner may choose its hyper-parameters for that cost rather than
            for the starting ``rho`` (the static score routers do).

    Example:
        >>> problem = env.problem()                              # doctest: +SKIP
        >>> learner = LinUCB.from_problem(problem, alpha=1.0)    # doctest: +SKIP
    """

    num_trials: int
    num_arms: int
    dim: int
    rho: Tensor
    arm_names: tuple[str, ...]
    prices: Tensor | None = None
    embed_dim: int | None = None
    train: TrainSplit | None = None
    horizon: int | None = None
    device: torch.device | str = "cpu"
    dtype: torch.dtype = torch.float32
    labels: Mapping[str, Tensor] = field(default_factory=dict)
    init_rng: TrialRNG | None = None
    hidden_arms: Tensor | None = None
    validation: TrainSplit | None = None
    budget: Tensor | None = None

    def __post_init__(self) -> None:
        if tuple(self.rho.shape) != (self.num_trials,):
            raise InputError(
                f"Problem.rho must be [R={self.num_trials}], got {tuple(self.rho.shape)}"
            )
        for name, value in self.labels.items():
            if tuple(value.shape) != (self.num_trials,):
                raise InputError(
                    f"Problem.labels[{name!r}] must be [R={self.num_trials}], "
                    f"got {tuple(value.shape)}"
                )
        if self.budget is not None and (
            tuple(self.budget.shape) != (self.num_trials,) or not bool((self.budget > 0).all())
        ):
            raise InputError(
                f"Problem.budget must be [R={self.num_trials}] values > 0, got shape "
                f"{tuple(self.budget.shape)}"
            )
        if self.init_rng is not None and self.init_rng.num_trials != self.num_trials:
            raise InputError(
                f"Problem.init_rng holds {self.init_rng.num_trials} trials, expected "
                f"R={self.num_trials}"
            )
        if self.hidden_arms is not None and tuple(self.hidden_arms.shape) != (
            self.num_trials,
            self.num_arms,
        ):
            raise ValueError(
                f"Problem.hidden_arms must be [R={self.num_trials}, K={self.num_arms}], "
                f"got {tuple(self.hidden_arms.shape)}"
            )
        if len(self.arm_names) != self.num_arms:
            raise InputError(
                f"Problem.arm_names has {len(self.arm_names)} names for K={self.num_arms}"
            )

    def require_train(self, who: str) -> TrainSplit:
        """The train split, or a one-line error saying that ``who`` needs one."""
        if self.train is None:
            raise InputError(
                f"{who} needs a train split (Problem.train), but the environment has none; "
                "use a table with a train split or another learner"
            )
        return self.train

    def require_validation(self, who: str) -> TrainSplit:
        """The validation split, or a one-line error saying that ``who`` needs one."""
        if self.validation is None:
            raise ValueError(
                f"{who} chooses its hyper-parameters on a validation split "
                "(Problem.validation), but the environment has none; give the table a 'val' "
                "split (e.g. data.val_fraction=0.1) or fix the hyper-parameters"
            )
        return self.validation

    def train_mean_utility(self, who: str = "this learner") -> Tensor:
        """Mean utility of each arm on the train split for each trial's rho, ``[R, K]``."""
        from torchroute.functional.utility import utility

        train = self.require_train(who)
        rho = self.rho.to(train.scores.dtype)[:, None, None]  # [R, 1, 1]
        return utility(train.scores[None], train.costs[None], rho).mean(1)
