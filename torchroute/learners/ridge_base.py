"""Shared state and update of the learners built on a per-arm ridge regression solver."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.functional.random import Source
from torchroute.functional.ridge import ridge_init, sherman_morrison_, woodbury
from torchroute.learners.base import Learner
from torchroute.types import Context, Decision, Feedback, Problem

if TYPE_CHECKING:
    from torchroute.learners.warm_options import WarmStart
    from torchroute.learners.warm_start import WarmRows

#: the values of ``new_arm_prior`` (:meth:`RidgeLearner._init_new_arm_prior`)
NEW_ARM_PRIORS = ("zero", "mean", "spread")
#: the values whose never-observed arm predicts the observed arms' mean
_MEAN_PRIORS = ("mean", "spread")


class RidgeLearner(Learner):
    """A learner whose reward model is one ridge regression per arm and trial.

    Buffers: ``a_inv [R, K, d, d]`` and ``theta [R, K, d]`` (see
    :mod:`torchroute.functional.ridge`).

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d``, the context dimension.
        lam: ridge regulariser ``lambda``. The default 1 (Li et al.'s ``A_k = I``) keeps an
            untried arm's uncertainty ``||x|| / sqrt(lam)`` above the reward range for
            unit-norm features plus a bias; the CABS experiments use 10, which their
            presets set explicitly (``docs/reference/learners.md``).
    """

    def __init__(self, num_trials: int, num_arms: int, dim: int, lam: float = 1.0) -> None:
        super().__init__(num_trials, num_arms)
        check_number(type(self).__name__, "dim", dim, ge=1, integer=True)
        check_number(type(self).__name__, "lam", lam, gt=0)
        self.dim = int(dim)
        self.lam = lam
        a_inv, theta = ridge_init(num_trials, num_arms, dim, lam)
        self.register_buffer("a_inv", a_inv)
        self.register_buffer("theta", theta)

    @classmethod
    def from_problem(cls, problem: Problem, **hparams: Any) -> RidgeLearner:
        """``cls(R, K, d, **hparams)`` for ``problem``."""
        return cls(problem.num_trials, problem.num_arms, problem.dim, **hparams)

    def update(
        self,
        context: Context,
        decision: Decision,
        feedback: Feedback,
        generator: Source = None,
    ) -> dict[str, Tensor]:
        """Fit every observed reward (``feedback.observed``, as the env revealed it; with
        ``Context.prices``, for a learner that :attr:`reads_prices`, at the reference
        prices: :meth:`~torchroute.learners.Learner.reference_feedback`)."""
        self._check_context(context)
        self._check_feedback(context, feedback)
        feedback = self.reference_feedback(context, feedback)
        weight = feedback.observed.to(self.theta.dtype)  # [R, B, K]
        target = self._learning_target(feedback)
        self._fit(context, decision.action, target, weight, feedback.only_played)
        return {}

    def _learning_target(self, feedback: Feedback) -> Tensor:
        """What the ridge models learn, ``[R, B, K]``: the utility ``Feedback.reward`` (a
        learner with an ``objective`` may learn the quality instead)."""
        return feedback.reward

    def _trial_values(self, y: Tensor, x: Tensor) -> Tensor:
        """The predictions ``y [R, n, K]`` for the queries ``x [n, d]`` as each trial's
        utilities (themselves here; a learner that learns the quality subtracts ``rho c``)."""
        return y

    def fit_weighted(
        self,
        context: Context,
        action: Tensor,
        target: Tensor,
        weight: Tensor,
        generator: Source = None,
    ) -> None:
        """Weighted ridge step: ``A_k += w x x^T``, ``b_k += w y x`` for every cell.

        ``update`` is this step with the weights ``feedback.observed`` (0 or 1).

        Args:
            context: ``x [R, B, d]``.
            action: the played arm ``[R, B]`` (long).
            target: ``y [R, B, K]``; cells with ``w = 0`` are never read as numbers.
            weight: sample weights ``w [R, B, K]``, ``>= 0`` (0: not observed).
            generator: unused (the interface of :meth:`NeuralUCB.fit_weighted`).
        """
        self._check_context(context)
        self._fit(context, action, target, weight.to(self.theta.dtype), False)

    def warm_start(self, rows: WarmRows, problem: Problem, warm: WarmStart) -> None:
        """The rows in one closed-form step of the ridge statistics
        (:func:`~torchroute.learners.warm_start.ridge_absorb`, each row weighted by
        ``warm.weights``); with several weights, each trial keeps the one whose greedy
        policy scores best on ``problem.validation``. The rows count as observations of
        ``seen``."""
        from torchroute.learners.warm_start import (
            PerTrialBest,
            arm_scale,
            greedy_value,
            ridge_absorb,
        )

        a0, t0 = self.a_inv, self.theta
        x = rows.x.to(t0.device)
        arms = arm_scale(problem, t0.device)  # [R, K]
        if self._counts_seen():  # the rows count as observations
            seen = (rows.weight > 0).sum(0).to(self.seen.device, self.seen.dtype)  # [K]
            self.seen.add_(seen[None] * arms.to(self.seen.dtype))
        best = PerTrialBest()
        for w in warm.weights:
            a_inv, theta = ridge_absorb(a0, t0, x, rows.target, rows.weight, w * arms)
            if not warm.chooses:
                best.offer({"a_inv": a_inv, "theta": theta}, theta.new_zeros(self.num_trials))
                break
            val = problem.require_validation(f"{type(self).__name__} (several warm_weight)")
            predict = torch.einsum("rkd,md->rmk", theta, val.features.to(theta.dtype))
            predict = self._trial_values(predict, val.features)
            best.offer({"a_inv": a_inv, "theta": theta}, greedy_value(predict, val, problem.rho))
        assert best.state is not None
        self.a_inv = best.state["a_inv"].contiguous()
        self.theta = best.state["theta"].contiguous()
        if getattr(self, "new_arm_prior", "zero") == "spread":
            self._new_arm_covariance(x)

    def _new_arm_covariance(self, features: Tensor) -> None:
        """With ``new_arm_prior="spread"``, after a warm start: each arm still never observed
        (a scenario's new model) gets the covariance ``A_k^{-1} = mean of the observed arms'
        A^{-1} + s^2 E``, with ``s^2`` the spread of the observed arms' predictions over the
        warm rows ``features [n, d]`` and ``E`` the bias direction
        (:mod:`torchroute.functional.new_model`). Nothing changes when every arm is observed.
        """
        from torchroute.functional.new_model import linear_spread, spread_direction

        known = self.seen > 0  # [R, K]
        if bool(known.all()):
            return
        spread = linear_spread(self.theta, known, features)  # [R]
        w = known.to(torch.float64)[..., None, None]  # [R, K, 1, 1]
        mean_cov = (self.a_inv.double() * w).sum(1) / w.sum(1).clamp_min(1.0)  # [R, d, d]
        direction = spread_direction(features).to(mean_cov.device)
        cov = mean_cov + spread[:, None, None] * direction  # [R, d, d]
        new = (~known)[..., None, None]
        self.a_inv = torch.where(new, cov[:, None].to(self.a_inv), self.a_inv).contiguous()

    def _init_new_arm_bonus(self, value: float) -> None:
        """``new_arm_bonus``: with a value > 0, a ``seen [R, K]`` buffer counts each arm's
        observations and :meth:`_add_new_arm_bonus` adds the value to arms never observed
        (without it, 0: no buffer, the state of the learner without the option)."""
        check_number(type(self).__name__, "new_arm_bonus", value, ge=0)
        self.new_arm_bonus = float(value)
        if self.new_arm_bonus:
            self.register_buffer("seen", torch.zeros(self.num_trials, self.num_arms))

    def _add_new_arm_bonus(self, scores: Tensor) -> Tensor:
        """``scores [R, B, K]`` plus ``new_arm_bonus`` on the arms never observed."""
        if not getattr(self, "new_arm_bonus", 0.0):
            return scores
        return scores + self.new_arm_bonus * (self.seen == 0).to(scores.dtype)[:, None]

    def _init_new_arm_prior(self, prior: str) -> None:
        """``new_arm_prior``: what an arm never observed predicts. ``"zero"`` (the ridge
        prior ``theta_k = 0``), or ``"mean"``: the mean ``theta`` of the trial's observed
        arms, its prior mean until it is observed, so that its first observation updates
        from there (the ridge regression towards that mean; ``A_k^{-1} = I / lam`` gives it
        the full width). ``"spread"``: the same mean, and after a warm start an arm the rows
        never observed gets the observed arms' uncertainty plus their spread instead of the
        full width (:meth:`_new_arm_covariance`): it is tried only where an average model
        within that spread could be the best (cold, it is ``"mean"``). With ``"mean"`` or
        ``"spread"`` a ``seen [R, K]`` count is kept, as for a new-arm bonus.
        """
        if prior not in NEW_ARM_PRIORS:
            raise ValueError(
                f"{type(self).__name__}: new_arm_prior must be one of {list(NEW_ARM_PRIORS)}, "
                f"got {prior!r}"
            )
        self.new_arm_prior = prior
        if prior in _MEAN_PRIORS and "seen" not in self._buffers:
            self.register_buffer("seen", torch.zeros(self.num_trials, self.num_arms))

    def _counts_seen(self) -> bool:
        """Whether this learner keeps the ``seen [R, K]`` observation counts."""
        return "seen" in self._buffers

    def _theta_for_scores(self) -> Tensor:
        """``theta [R, K, d]`` as the scores read it: with ``new_arm_prior="mean"`` an arm
        never observed takes the mean ``theta`` of the trial's observed arms (0 when none
        is); otherwise ``theta`` itself. Reads the state only."""
        if getattr(self, "new_arm_prior", "zero") not in _MEAN_PRIORS:
            return self.theta
        seen = (self.seen > 0)[..., None]  # [R, K, 1]
        weight = seen.to(self.theta.dtype)
        count = weight.sum(1, keepdim=True).clamp_min(1.0)  # [R, 1, 1]
        mean = (self.theta * weight).sum(1, keepdim=True) / count  # [R, 1, d]
        return torch.where(seen, self.theta, mean)

    def _fit(
        self, context: Context, action: Tensor, target: Tensor, weight: Tensor, only_played: bool
    ) -> None:
        """The one ridge update: cells of ``weight [R, B, K]`` > 0 enter with that weight."""
        x = context.x.to(self.theta.dtype)  # [R, B, d]
        observed = weight > 0
        if getattr(self, "new_arm_prior", "zero") in _MEAN_PRIORS:
            self.theta = self._theta_for_scores()  # an arm's first update starts from the mean
        if self._counts_seen():
            self.seen.add_(observed.sum(1).to(self.seen.dtype))
        # Unobserved cells are never read as numbers (a NaN there must not leak in).
        reward = torch.where(observed, target.to(x.dtype), 0.0)  # [R, B, K]
        weight = torch.where(observed, weight, 0.0)
        r, b, _ = x.shape
        few = b == 1 and x.device.type == "cpu" and not only_played
        slots = int(observed.sum(-1).amax()) if few else self.num_arms
        if b == 1 and only_played:
            self._update_arms(action, x[:, 0], reward[:, 0], weight[:, 0])
        elif 2 * slots <= self.num_arms:
            # A few arms observed per trial (e.g. the played arm plus surrogates): one
            # gathered update of the observed (trial, arm) pairs (arms are independent, so
            # this is the dense update restricted to the observed arms). The host reads of
            # the slot count and of the pairs are free on the CPU; elsewhere the dense update
            # keeps shapes static.
            self._update_pairs(observed[:, 0], x[:, 0], reward[:, 0], weight[:, 0])
        else:
            xs = x[:, None].expand(r, self.num_arms, b, self.dim)  # [R, K, B, d]
            self.a_inv, self.theta = woodbury(
                self.a_inv, self.theta, xs, reward.transpose(1, 2), weight.transpose(1, 2)
            )
        self._tick(context)

    def _update_pairs(self, observed: Tensor, x: Tensor, reward: Tensor, weight: Tensor) -> None:
        """Sherman–Morrison on every observed ``(trial, arm)`` pair at once: ``observed``,
        ``reward`` and ``weight`` ``[R, K]``, ``x [R, d]``.

        Updates ``P = observed.sum()`` matrices, each with the context of its trial; the
        others are not read. A round in which most trials observe one arm and a few observe
        several (surrogates) costs ``P`` matrices instead of ``R`` times the largest count.
        """
        trial, arm = observed.nonzero(as_tuple=True)  # [P] each, trial-major
        rows = trial * self.num_arms + arm  # rows of the [R*K] views
        self._update_rows(rows, x[trial], reward[trial, arm], weight[trial, arm])

    def _update_rows(self, rows: Tensor, x: Tensor, y: Tensor, w: Tensor) -> None:
        """Sherman–Morrison on the ``(trial, arm)`` rows ``rows [P]`` of the ``[R*K]`` views:
        contexts ``x [P, d]``, targets ``y [P]`` and weights ``w [P]``.

        The gathered copy is updated in place while it is still in cache and ``index_copy_``
        writes it back (index_select and the in-place update are the faster choices; see
        benchmarks/linucb_throughput.py).
        """
        r, k, d = self.num_trials, self.num_arms, self.dim
        if not self.a_inv.is_contiguous():
            self.a_inv = self.a_inv.contiguous()
        if not self.theta.is_contiguous():
            self.theta = self.theta.contiguous()
        a_flat, t_flat = self.a_inv.view(r * k, d, d), self.theta.view(r * k, d)
        a_sel = a_flat.index_select(0, rows)  # [P, d, d], a copy
        t_sel = t_flat.index_select(0, rows)  # [P, d]
        sherman_morrison_(a_sel, t_sel, x, y, w)
        a_flat.index_copy_(0, rows, a_sel)
        t_flat.index_copy_(0, rows, t_sel)

    def _update_arms(self, arm: Tensor, x: Tensor, reward: Tensor, weight: Tensor) -> None:
        """Sherman–Morrison on one arm per trial: ``arm [R, 1]``, ``x [R, d]``, ``reward`` and
        ``weight`` ``[R, K]`` (weight 0: unchanged).

        Reads and writes ``d x d`` per trial instead of ``K d x d`` (:meth:`_update_rows`).
        """
        flat = torch.arange(x.shape[0], device=x.device) * self.num_arms + arm[:, 0]  # [R]
        self._update_rows(flat, x, reward.gather(1, arm)[:, 0], weight.gather(1, arm)[:, 0])
