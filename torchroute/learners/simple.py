"""Learners that do not learn from features: uniform random and the best single arm."""

from __future__ import annotations

import torch
from torch import Tensor

from torchroute.functional.random import Source
from torchroute.functional.sampling import one_hot_probs, sample_categorical
from torchroute.functional.utility import utility
from torchroute.learners.base import FixedPolicy
from torchroute.learners.objective import refuse_request_rho
from torchroute.types import Context, Decision, Problem


class RandomRouter(FixedPolicy):
    """Uniform random routing: ``p_k = 1 / K`` every round.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
    """

    role = "reference"  # the uniform yardstick every learner is compared with

    samples_from_probs = True

    def act(self, context: Context, generator: Source = None) -> Decision:
        """A uniformly random arm per context: ``probs [R, B, K]``, ``action [R, B]``."""
        self._check_context(context)
        r, b = context.x.shape[:2]
        probs = context.x.new_full((r, b, self.num_arms), 1.0 / self.num_arms)
        return Decision(probs=probs, action=sample_categorical(probs, generator))


class BestSingleArm(FixedPolicy):
    """Always routes to one fixed arm per trial, chosen offline on the train split.

    The arm is the one with the largest mean utility ``clip(Y - rho C, 0, 1)`` on the
    train split for the trial's ``rho`` (the "best single model" baseline). The arm bakes
    that ``rho`` in: a request that carries another trade-off (``Context.rho``) is refused
    with a one-line error (:attr:`per_request_rho` is ``False``).

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        train_mean_utility: ``[R, K]`` mean train-split utility of each arm per trial.
        val_mean_utility: ``[R, K]`` the same on the validation split, or ``None``: then
            ``val_utility [R]`` (each trial's arm's mean validation utility, a result
            column) is NaN.
        rho: ``[R]`` the trials' trade-offs the arms were chosen for (``None``: unknown;
            then any ``Context.rho`` is refused).
    """

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        train_mean_utility: Tensor,
        val_mean_utility: Tensor | None = None,
        rho: Tensor | None = None,
    ) -> None:
        super().__init__(num_trials, num_arms)
        trial_rho = None if rho is None else torch.as_tensor(rho).float().reshape(num_trials)
        self.register_buffer("trial_rho", trial_rho, persistent=False)  # [R] or None
        if tuple(train_mean_utility.shape) != (num_trials, num_arms):
            raise ValueError(
                f"train_mean_utility must be [R={num_trials}, K={num_arms}], "
                f"got {tuple(train_mean_utility.shape)}"
            )
        if not torch.isfinite(train_mean_utility).all():
            raise ValueError("train_mean_utility must be finite")
        self.register_buffer("arm", train_mean_utility.argmax(-1))  # [R]
        if val_mean_utility is None:
            val = torch.full((num_trials,), float("nan"))
        elif tuple(val_mean_utility.shape) != (num_trials, num_arms):
            raise ValueError(
                f"val_mean_utility must be [R={num_trials}, K={num_arms}], "
                f"got {tuple(val_mean_utility.shape)}"
            )
        else:
            val = val_mean_utility.float().gather(1, self.arm[:, None])[:, 0]
        self.register_buffer("val_utility", val, persistent=False)  # [R], rebuilt when built

    @classmethod
    def from_problem(cls, problem: Problem) -> BestSingleArm:
        """The best arm of each trial on ``problem``'s train split (required).

        An arm of ``problem.hidden_arms`` (a new model, unknown offline) is never chosen.
        With ``problem.validation``, ``val_utility`` is the arm's mean utility there.
        """
        mean = problem.train_mean_utility(cls.__name__)  # [R, K]
        if problem.hidden_arms is not None:
            mean = mean.masked_fill(problem.hidden_arms.to(mean.device), -1.0)
        val = problem.validation
        val_mean = None
        if val is not None:
            rho = problem.rho.to(val.scores.dtype)[:, None, None]  # [R, 1, 1]
            val_mean = utility(val.scores[None], val.costs[None], rho).mean(1)  # [R, K]
        return cls(problem.num_trials, problem.num_arms, mean, val_mean, rho=problem.rho)

    def result_columns(self) -> dict[str, Tensor]:
        """``{"val_utility": [R]}``: each trial's arm's mean validation utility (or NaN)."""
        return {"val_utility": self.val_utility}

    def act(self, context: Context, generator: Source = None) -> Decision:
        """Each trial's fixed arm: one-hot ``probs [R, B, K]``, ``action [R, B]``."""
        self._check_context(context)
        refuse_request_rho(type(self).__name__, context, self.trial_rho)
        action = self.arm[:, None].expand(context.x.shape[:2])  # [R, B]
        probs = one_hot_probs(action, self.num_arms, context.x.dtype)
        return Decision(probs=probs, action=action.clone())

    def routing_probs(
        self,
        context: Context,
        decision: Decision,
        generator: Source = None,
        draws: int | None = None,
    ) -> Tensor:
        """Exact: each trial's arm with probability 1, ``[R, B, K]`` float64."""
        self._check_context(context)
        action = self.arm[:, None].expand(context.x.shape[:2])  # [R, B]
        return one_hot_probs(action, self.num_arms, torch.float64)
