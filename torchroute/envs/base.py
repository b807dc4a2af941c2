"""The environment contract every protocol implements (single choice, subsets, simulators).

An :class:`Env` owns the data and the randomness of the world for ``R`` batched trials: the
stream order, per-trial labels (rho, seed, constraint level, ...), noise, regime switches,
budgets. The loop (:func:`torchroute.loop.simulate`), the metrics, checkpoints, results
writing and the report depend on this interface only.

Noise is drawn in :meth:`Env.step` from its ``generator`` argument only, through the entry
points of :mod:`torchroute.functional.random` (a ``torch.Generator`` shared by the trials,
or per-trial streams whose keys come from :meth:`Env.trials`); an env with step noise draws
it from :func:`torchroute.envs.streams.trial_source` of that argument, so that each trial's
noise is its own whichever the run passes (permuting the trials permutes the noise, and a
trial alone draws what it draws among others). :meth:`Env.select_trials`
returns the env of a subset of the trials, each seeing exactly what it sees in the whole
env; the runner uses it for trial chunks and ``torchrun`` shards.

A minimal environment::

    class CoinFlips(Env):
        num_trials, num_arms, horizon = 2, 2, 10
        device = torch.device("cpu")

        def trials(self):
            return pd.DataFrame({"seed": [0, 1]})

        def problem(self):
            return Problem(2, 2, 1, rho=torch.zeros(2), arm_names=("a", "b"))

        def context(self, t):
            return Context(x=torch.ones(2, 1, 1))

        def step(self, context, decision, generator=None):
            streams = trial_source(generator, env_noise_keys(self.trials()))
            reward = uniform(streams, (2, 1, 2))
            observed = F.one_hot(decision.action, 2).bool()
            chosen = reward.gather(-1, decision.action[..., None])[..., 0]
            feedback = Feedback(torch.where(observed, reward, 0.0), observed, only_played=True)
            return feedback, {"reward": chosen, "regret": reward.amax(-1) - chosen}

        def summarize(self, sums, rounds):
            return {"avg_reward": sums["reward"] / rounds, "avg_regret": sums["regret"] / rounds}
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from torchroute.buildable import buildable
from torchroute.functional.random import Source
from torchroute.types import Context, Decision, Feedback, Outcome, Problem


@buildable
class Env(ABC):
    """``R`` batched trials of one routing protocol.

    Attributes:
        num_trials: ``R``.
        num_arms: ``K``.
        horizon: ``T``, rounds per trial.
        device: where every tensor lives.
        curve_keys: outcome names whose running sums the loop records at every logging
            interval (``curves.csv`` holds them as ``cum_<name>``).
        single_choice: ``True`` when every decision routes to one arm (``Decision.action``)
            and the feedback holds that arm's reward (and score and cost, when the env has
            them): the env's rounds can then be written as a decision log (one row per
            decision: context, arm, propensity, and :meth:`logged_feedback`'s score and
            cost). Subset envs keep ``False``.
        feedback_delay: rounds between a decision and the round the loop hands its
            feedback to ``learner.update`` (0: the same round).
        feedback_arrives: ``[R, T]`` bool on the CPU, whether the feedback of round ``t``
            ever reaches the learner (``None``: every round's does); the loop reads it
            without a device sync. The feedback ``step`` returns for a round that is never
            rated observes nothing (``observed`` all ``False``).
        request_rhos: the trade-offs its requests carry (``Context.rho``, one per request,
            computed into their utility), or ``None``: every request of a trial has the
            trial's ``rho``. A run refuses a learner that cannot decide per request
            (:attr:`~torchroute.learners.Learner.per_request_rho`) on such an env.
    """

    num_trials: int
    num_arms: int
    horizon: int
    curve_keys: tuple[str, ...] = ("regret",)
    single_choice: bool = False
    feedback_delay: int = 0
    feedback_arrives: Tensor | None = None
    request_rhos: tuple[float, ...] | None = None

    def logged_feedback(
        self, context: Context, decision: Decision, feedback: Feedback
    ) -> tuple[Tensor, Tensor]:
        """The score (in ``[0, 1]``) and cost of the chosen arms, ``[R, B]`` each, as a
        decision log records them (for envs with :attr:`single_choice`).

        Default: ``feedback.score`` (the reward when the env has no separate score) and
        ``feedback.cost`` (zero when it has none) at ``decision.action``; NaN (no feedback,
        as a decision log marks a request never rated) where the chosen arm is not
        observed.
        """
        action = decision.action[..., None]  # [R, B, 1]
        score = feedback.reward if feedback.score is None else feedback.score
        cost = torch.zeros_like(score) if feedback.cost is None else feedback.cost
        seen = feedback.observed.gather(-1, action)[..., 0]
        score, cost = score.gather(-1, action)[..., 0], cost.gather(-1, action)[..., 0]
        return score.masked_fill(~seen, torch.nan), cost.masked_fill(~seen, torch.nan)

    @property
    @abstractmethod
    def device(self) -> torch.device:
        """The device of the environment's tensors."""

    @abstractmethod
    def trials(self) -> pd.DataFrame:
        """One row per trial with its labels (rho, seed, and what else the env varies)."""

    @abstractmethod
    def problem(self) -> Problem:
        """What a learner may know up front (learner factories are called with it)."""

    @abstractmethod
    def context(self, t: int) -> Context:
        """The contexts of round ``t`` (0-based), ``x [R, B, d]``."""

    @abstractmethod
    def step(
        self, context: Context, decision: Decision, generator: Source = None
    ) -> tuple[Feedback, Outcome]:
        """Reveal the feedback of ``decision`` and the round's per-trial quantities.

        ``generator`` is the run's source of randomness (a ``torch.Generator``, ``None`` or a
        ``TrialRNG``; draws through :mod:`torchroute.functional.random`, shapes ``[R, ...]``).
        The feedback covers ``decision.action`` and the arms of ``decision.observe``
        (every arm when the env gives full information). The outcome maps names to
        ``[R, B]`` or ``[R, B, c]`` tensors; the loop sums them over rounds.
        """

    @abstractmethod
    def summarize(self, sums: dict[str, Tensor], rounds: int) -> dict[str, Tensor]:
        """Per-trial result columns ``{name: [R]}`` from the outcome sums over ``rounds``.

        ``sums[name]`` is the sum over rounds and contexts of outcome ``name``, ``[R]`` or
        ``[R, c]`` (float64). Most columns are averages; some are not (a constraint regret
        is the distance of the average cost vector to a box).
        """

    def select_trials(self, index: Sequence[int] | Tensor) -> Env:
        """The env of trials ``index`` (positions ``[n]``, in that order), a new env.

        Each selected trial keeps its labels, data, stream and state, so that it plays the
        same rounds as here; tensors the trials share may be shared with this env.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not implement select_trials, so its trials cannot "
            "run in chunks or torchrun shards"
        )

    def state_dict(self) -> dict[str, Any]:
        """The env's restorable state (regime switches, budgets, ...); stateless by default."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; stateless envs accept only an empty dict."""
        if state:
            raise ValueError(f"{type(self).__name__} has no state to restore, got {sorted(state)}")

    def fingerprint(self) -> dict[str, Any]:
        """What identifies the world (data, stream, labels); resume compares it."""
        return {"env": type(self).__name__, "trials": self.trials().to_dict("list")}

    def trial_index(self, index: Sequence[int] | Tensor) -> Tensor:
        """``index`` as a non-empty ``[n]`` long CPU tensor of trials in ``0..R-1``."""
        idx = torch.as_tensor(index, dtype=torch.long).reshape(-1).cpu()
        if idx.numel() == 0 or bool(((idx < 0) | (idx >= self.num_trials)).any()):
            raise ValueError(
                f"{type(self).__name__}.select_trials: index must name trials in "
                f"0..{self.num_trials - 1}, got {idx.tolist()}"
            )
        return idx

    def check_decision(self, decision: Decision) -> None:
        """A one-line error when ``decision`` does not fit this env's protocol.

        Shapes are always checked; the range of ``action`` only on the CPU, where reading
        it costs no device sync (elsewhere an out-of-range arm fails in the gather).
        """
        shape = tuple(decision.probs.shape)
        if shape[0] != self.num_trials or shape[-1] != self.num_arms:
            raise ValueError(
                f"{type(self).__name__} has R={self.num_trials} trials and K={self.num_arms} "
                f"arms, but the decision's probs are {shape} ([R, B, K])"
            )
        action = decision.action
        if action.device.type == "cpu":
            if action.dtype != torch.long:
                raise TypeError(f"Decision.action must be long (arm indices), got {action.dtype}")
            if bool(((action < 0) | (action >= self.num_arms)).any()):
                raise ValueError(
                    f"Decision.action holds arms outside 0..{self.num_arms - 1} "
                    f"({type(self).__name__} has K={self.num_arms} arms)"
                )
