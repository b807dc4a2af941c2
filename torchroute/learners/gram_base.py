"""Per-arm ridge regression kept as Gram statistics (for learners that forget old data).

LinUCB and LinTS keep ``A^{-1}`` and update it with Sherman–Morrison, which cannot forget.
The learners for changing worlds (:mod:`torchroute.learners.discounted`,
:mod:`torchroute.learners.sliding_window`) shrink or remove old observations, so they keep
the data part of the Gram matrix ``G_k = sum w x x^T`` and ``b_k = sum w y x`` and solve
``(lam I + G_k) theta_k = b_k`` (a Cholesky factor per arm) when they act.

A learner may also hold a prior that is never forgotten (:meth:`GramRidgeLearner.set_prior`:
a warm start, or the prior of a model a residual learner's base router never saw): then
``(lam I + P_k + G_k) theta_k = t_k + b_k``, and as the data part ``G_k``, ``b_k`` decays
(a discount) or leaves (a window) the model returns to the prior mean
``(lam I + P_k)^{-1} t_k``, not to 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.functional.availability import mask_scores
from torchroute.functional.random import Source, normal
from torchroute.functional.sampling import argmax_random_ties, one_hot_probs
from torchroute.learners.base import Learner
from torchroute.learners.objective import Objective
from torchroute.types import Context, Decision, Feedback, Problem

if TYPE_CHECKING:
    from torchroute.learners.warm_options import WarmStart
    from torchroute.learners.warm_start import WarmRows


class GramRidgeLearner(Objective, Learner):
    """A learner with one ridge regression per arm and trial, kept as Gram statistics.

    Buffers: ``gram [R, K, d, d]`` (``G_k``, without the regulariser), ``target [R, K, d]``
    (``b_k``) and ``seen [R, K]`` (how many observations each arm has had, never
    forgotten; it drives ``new_arm_bonus``); with a prior (:meth:`set_prior`),
    ``prior_gram [R, K, d, d]`` (``P_k``) and ``prior_target [R, K, d]`` (``t_k``), never
    forgotten. Subclasses say how a round's observations
    enter (:meth:`_absorb`) and how the decision is scored (:meth:`_scores`).

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d``.
        lam: ridge regulariser ``lambda > 0``.
        new_arm_bonus: added to the score of an arm never observed (a model that has just
            arrived, or any arm before its first observation), so that a new model gets
            tried soon after it appears; 0 (the default) adds nothing.
        objective: ``"utility"`` (the default: the statistics are of each trial's
            utility) or ``"quality_cost"``: of the quality ``Feedback.score``, and the
            scores (bound or draw) are of ``y - rho c`` with the request's ``rho`` and the
            known prices (:mod:`torchroute.learners.objective`).
        cost_model: the costs ``c`` of ``quality_cost``: ``"price"`` (the default, each
            model's known price) or ``"ridge"`` (each query's cost predicted by a ridge of
            the costs on the features, fitted on the train split;
            :mod:`torchroute.learners.objective`).

    Prices: as the per-arm ridge learners (:class:`~torchroute.learners.LinUCB`), the
    statistics (``objective: utility``) hold the utility at the reference prices; with
    ``Context.prices`` ``act`` moves the scores by ``-rho (p_now - p_ref)`` and ``update``
    learns the observed utility moved to the reference prices (its clip kept at the prices
    in force). With ``quality_cost`` the prices enter the decision directly.
    """

    reads_prices = True
    #: given as lists, chosen on validation with the run's scenario replayed (the warm
    #: weight too: a prior is never forgotten, so its weight matters after a change)
    chosen_on_validation: ClassVar[tuple[str, ...]] = ("new_arm_bonus", "warm_weight")

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        lam: float = 1.0,
        new_arm_bonus: float = 0.0,
        objective: str = "utility",
        cost_model: str = "price",
    ) -> None:
        super().__init__(num_trials, num_arms)
        self._init_objective(objective, cost_model)
        name = type(self).__name__
        check_number(name, "dim", dim, ge=1, integer=True)
        check_number(name, "lam", lam, gt=0)
        check_number(name, "new_arm_bonus", new_arm_bonus, ge=0)
        self.dim, self.lam, self.new_arm_bonus = int(dim), float(lam), float(new_arm_bonus)
        self.register_buffer("gram", torch.zeros(num_trials, num_arms, dim, dim))
        self.register_buffer("target", torch.zeros(num_trials, num_arms, dim))
        self.register_buffer("seen", torch.zeros(num_trials, num_arms))
        self.register_buffer("prior_gram", None)  # [R, K, d, d] once a prior is set
        self.register_buffer("prior_target", None)  # [R, K, d]

    def set_prior(self, gram: Tensor | None = None, target: Tensor | None = None) -> None:
        """Add a prior that forgetting never removes: precision ``lam I + P_k`` and moment
        ``t_k`` (prior mean ``(lam I + P_k)^{-1} t_k``).

        Args:
            gram: ``P [R, K, d, d]`` (symmetric; ``lam I + P`` positive definite), added
                to any prior already set; ``None``: unchanged.
            target: ``t [R, K, d]``, added likewise; ``None``: unchanged.
        """
        ref = self.gram
        if gram is not None:
            gram = gram.to(ref.device, ref.dtype).expand_as(ref)
            old = self.prior_gram
            self.prior_gram = gram.clone() if old is None else old + gram
        if target is not None:
            target = target.to(ref.device, ref.dtype).expand_as(self.target)
            old = self.prior_target
            self.prior_target = target.clone() if old is None else old + target

    def warm_start(self, rows: WarmRows, problem: Problem, warm: WarmStart) -> None:
        """The rows as the learner's prior, which forgetting never removes:
        ``P_k = w sum x x^T``, ``t_k = w sum u_k x`` over the rows that observed arm ``k``
        (in float64, then the learner's dtype), so an arm the learner stops observing
        returns to its warm-start prediction, not to 0. The rows count as observations of
        ``seen``. One ``warm_weight`` only (a prior is not chosen on validation)."""
        from torchroute.learners.warm_start import arm_scale

        if warm.chooses:
            raise ValueError(
                f"{type(self).__name__} takes its warm start as its prior: give one warm_weight"
            )
        f64, dev = torch.float64, self.gram.device
        x, w = rows.x.to(dev, f64), rows.weight.to(dev, f64)  # [n, d], [n, K]
        y = torch.where(rows.weight[None].to(dev) > 0, rows.target.to(dev, f64), 0.0)
        scale = warm.weights[0] * arm_scale(problem, dev)  # [R, K]
        gram = torch.einsum("nk,nd,ne->kde", w, x, x)  # [K, d, d]
        moment = torch.einsum("nk,rnk,nd->rkd", w, y, x)  # [R, K, d]
        self.set_prior(scale[..., None, None] * gram[None], scale[..., None] * moment)
        seen = (rows.weight > 0).sum(0).to(dev, self.seen.dtype)  # [K]
        self.seen.add_(seen[None] * (scale > 0).to(self.seen.dtype))

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        for name in ("prior_gram", "prior_target"):  # a saved prior: room for it first
            saved = state_dict.get(prefix + name)
            if saved is not None and getattr(self, name) is None:
                setattr(self, name, torch.empty_like(saved, device=self.gram.device))
        super()._load_from_state_dict(state_dict, prefix, *args)

    @classmethod
    def from_problem(cls, problem: Problem, **hparams: Any) -> GramRidgeLearner:
        """``cls(R, K, d, **hparams)`` for ``problem``, with its ``rho`` and ``prices``
        (:meth:`~torchroute.learners.objective.Objective.set_trade_off`) and, with
        ``cost_model: ridge``, the cost ridge fitted on its train split
        (:meth:`~torchroute.learners.objective.Objective.fit_cost_model`)."""
        learner = cls(problem.num_trials, problem.num_arms, problem.dim, **hparams)
        learner.set_trade_off(problem.rho, problem.prices)
        learner.fit_cost_model(problem)
        return learner

    def posterior(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Ridge means, ``V^{-1} x`` and ``x^T V^{-1} x`` with ``V = lam I + G`` (plus the
        prior ``P``, and ``t + b`` for ``b``, when one is set).

        Args:
            x: contexts ``[R, B, d]`` (in the learner's dtype).

        Returns:
            ``mean [R, B, K]``, ``solved [R, K, d, B]`` (``V_k^{-1} x_b``) and
            ``quad [R, B, K]`` (``x_b^T V_k^{-1} x_b``).
        """
        r, b, d = x.shape
        eye = torch.eye(d, dtype=x.dtype, device=x.device)
        precision = self.gram + self.lam * eye  # [R, K, d, d]
        target = self.target
        if self.prior_gram is not None:
            precision = precision + self.prior_gram
        if self.prior_target is not None:
            target = target + self.prior_target
        chol = torch.linalg.cholesky(precision)
        theta = torch.cholesky_solve(target[..., None], chol)[..., 0]  # [R, K, d]
        rhs = x.transpose(1, 2)[:, None].expand(r, self.num_arms, d, b)
        solved = torch.cholesky_solve(rhs, chol)  # [R, K, d, B]
        mean = torch.einsum("rkd,rbd->rbk", theta, x)
        quad = torch.einsum("rkdb,rbd->rbk", solved, x).clamp_min(0.0)
        return mean, solved, quad

    def act(self, context: Context, generator: Source = None) -> Decision:
        """The argmax of :meth:`_scores` (plus the new-arm bonus) over the available arms.

        Returns:
            One-hot ``probs [R, B, K]`` and ``action [R, B]``.
        """
        self._check_context(context)
        x = context.x.to(self.gram.dtype)
        scores = self._decision_values(self._scores(x, generator), context)  # [R, B, K]
        if self.new_arm_bonus:
            scores = scores + self.new_arm_bonus * (self.seen == 0).to(x.dtype)[:, None]
        scores = self.priced_scores(scores, context)  # Context.prices: -rho (p_now - p_ref)
        action = argmax_random_ties(mask_scores(scores, context.available), generator)
        return Decision(probs=one_hot_probs(action, self.num_arms, x.dtype), action=action)

    def update(
        self, context: Context, decision: Decision, feedback: Feedback, generator: Source = None
    ) -> dict[str, Tensor]:
        """Add the observed rewards (``feedback.observed``; the scores with
        ``objective: quality_cost``) to the statistics. Returns ``{}``."""
        self._check_context(context)
        self._check_feedback(context, feedback)
        feedback = self.reference_feedback(context, feedback)  # at the reference prices
        x = context.x.to(self.gram.dtype)
        weight = feedback.observed.to(x.dtype)  # [R, B, K]
        target = self._learning_target(feedback)
        reward = torch.where(feedback.observed, target.to(x.dtype), 0.0)
        self._absorb(x, reward, weight)
        self.seen.add_(weight.sum(1))
        self._tick(context)
        return {}

    def _scores(self, x: Tensor, generator: Source) -> Tensor:
        raise NotImplementedError

    def _absorb(self, x: Tensor, reward: Tensor, weight: Tensor) -> None:
        raise NotImplementedError


class GramThompson(GramRidgeLearner):
    """Thompson sampling on the ridge posterior: one draw per arm,
    ``N(x^T theta_k, v^2 x^T V_k^{-1} x)`` ``[R, B, K]`` (:func:`ts_scores`).

    Subclasses set the posterior scale with :meth:`_set_scale` and say how observations
    enter (``_absorb``).
    """

    v: float

    def _set_scale(self, v: float) -> None:
        """Check and keep the posterior scale ``v >= 0``."""
        check_number(type(self).__name__, "v", v, ge=0)
        self.v = float(v)

    def _scores(self, x: Tensor, generator: Source) -> Tensor:
        mean, _, quad = self.posterior(x)
        return ts_scores(mean, quad, self.v, generator)


def gram_terms(x: Tensor, reward: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    """A batch's Gram and target terms per arm: ``sum_b w x x^T`` ``[R, K, d, d]`` and
    ``sum_b w y x`` ``[R, K, d]`` from ``x [R, B, d]``, ``reward, weight [R, B, K]``."""
    gram = torch.einsum("rbk,rbd,rbe->rkde", weight, x, x)
    target = torch.einsum("rbk,rbd->rkd", weight * reward, x)
    return gram, target


def ts_scores(mean: Tensor, quad: Tensor, v: float, generator: Source) -> Tensor:
    """One Gaussian draw per arm: ``N(mean, v^2 x^T V^{-1} x)`` ``[R, B, K]``."""
    noise = normal(generator, mean.shape, dtype=mean.dtype, device=mean.device)
    return mean + v * quad.sqrt() * noise
