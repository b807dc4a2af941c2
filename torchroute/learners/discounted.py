"""Discounted LinUCB and LinTS: old observations weigh ``gamma^age`` (a forgetting factor).

D-LinUCB (Russac, Vernade and Cappé 2019, "Weighted linear bandits for non-stationary
environments", Algorithm 1), one model per arm: each round

    V_k <- gamma V_k + w x x^T + (1 - gamma) lam I        (V_k = lam I + G_k)
    V~_k <- gamma^2 V~_k + w x x^T + (1 - gamma^2) lam I  (V~_k = lam I + G~_k)
    b_k <- gamma b_k + w y x

kept as the data parts ``G_k <- gamma G_k + w x x^T`` (the same recursion: the regulariser
stays ``lam I``), and the score ``x^T theta_k + alpha sqrt(x^T V_k^{-1} V~_k V_k^{-1} x)``
with ``theta_k = V_k^{-1} b_k``. ``gamma = 1`` is plain LinUCB's statistics.

A prior (a warm start: :meth:`~torchroute.learners.gram_base.GramRidgeLearner.set_prior`)
is not discounted: ``V_k = lam I + P_k + G_k`` and ``b_k + t_k``, so an arm no longer
observed returns to its warm-start prediction, not to 0.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.functional.random import Source
from torchroute.learners.gram_base import GramRidgeLearner, GramThompson, gram_terms


class _Discounted(GramRidgeLearner):
    """The statistics discounted by ``gamma`` once per round; subclasses score.

    Buffers (besides ``gram``, ``target``, ``seen``): with ``tilde``, ``gram2 [R, K, d, d]``
    (``G~_k``, the same observations discounted by ``gamma^2``).
    """

    chosen_on_validation: ClassVar[tuple[str, ...]] = ("gamma", "new_arm_bonus", "warm_weight")

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        gamma: float,
        lam: float,
        new_arm_bonus: float,
        tilde: bool = False,
        objective: str = "utility",
        cost_model: str = "price",
    ) -> None:
        super().__init__(num_trials, num_arms, dim, lam, new_arm_bonus, objective, cost_model)
        check_number(type(self).__name__, "gamma", gamma, gt=0, le=1)
        self.gamma = float(gamma)
        self.register_buffer("gram2", torch.zeros_like(self.gram) if tilde else None)

    def _absorb(self, x: Tensor, reward: Tensor, weight: Tensor) -> None:
        gram, target = gram_terms(x, reward, weight)
        self.gram.mul_(self.gamma).add_(gram)
        if self.gram2 is not None:
            self.gram2.mul_(self.gamma**2).add_(gram)
        self.target.mul_(self.gamma).add_(target)


class DiscountedLinUCB(_Discounted):
    """D-LinUCB: LinUCB on statistics discounted by ``gamma`` per round.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d``.
        gamma: forgetting factor in ``(0, 1]`` (an observation ``n`` rounds old weighs
            ``gamma^n``; the effective memory is about ``1 / (1 - gamma)`` rounds).
        alpha: width of the confidence bonus. The paper's ``beta_t`` (a bound that grows
            with ``d`` and ``log t``) is replaced by a constant, as LinUCB's ``alpha`` is.
        lam: ridge regulariser.
        new_arm_bonus: added to the score of an arm never observed (see
            :class:`~torchroute.learners.gram_base.GramRidgeLearner`).
        objective: ``"utility"`` (the default) or ``"quality_cost"`` (the quality is
            learnt, the score is ``... - rho c_k``; see
            :class:`~torchroute.learners.gram_base.GramRidgeLearner`).
        cost_model: ``"price"`` (the default) or ``"ridge"``: the costs ``c_k`` of
            ``quality_cost`` (:class:`~torchroute.learners.gram_base.GramRidgeLearner`).

    Buffers: ``gram``, ``gram2`` (the ``gamma^2`` statistics) ``[R, K, d, d]``,
    ``target [R, K, d]``, ``seen [R, K]``. The discount is applied once per round, whatever
    the number ``B`` of contexts in it.

    Shapes:
        ``act``: ``x [R, B, d]`` -> one-hot ``probs [R, B, K]``, ``action [R, B]``.
    """

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        gamma: float = 0.99,
        alpha: float = 1.0,
        lam: float = 1.0,
        new_arm_bonus: float = 0.0,
        objective: str = "utility",
        cost_model: str = "price",
    ) -> None:
        super().__init__(
            num_trials, num_arms, dim, gamma, lam, new_arm_bonus, True, objective, cost_model
        )
        check_number(type(self).__name__, "alpha", alpha, ge=0)
        self.alpha = float(alpha)

    def _scores(self, x: Tensor, generator: Source) -> Tensor:
        mean, solved, _ = self.posterior(x)
        eye = torch.eye(self.dim, dtype=x.dtype, device=x.device)
        v_tilde = self.gram2 + self.lam * eye  # [R, K, d, d]
        if self.prior_gram is not None:
            v_tilde = v_tilde + self.prior_gram
        tilde = torch.einsum("rkde,rkeb->rkdb", v_tilde, solved)
        width = torch.einsum("rkdb,rkdb->rbk", solved, tilde).clamp_min(0.0).sqrt()
        return mean + self.alpha * width


class DiscountedLinTS(_Discounted, GramThompson):
    """Linear Thompson sampling on statistics discounted by ``gamma`` per round.

    Each arm's draw is ``N(x^T theta_k, v^2 x^T V_k^{-1} x)`` with ``V_k = lam I + G_k`` and
    ``G_k``, ``b_k`` discounted as in :class:`DiscountedLinUCB`.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d``.
        gamma: forgetting factor in ``(0, 1]``.
        v: posterior scale.
        lam: ridge regulariser.
        new_arm_bonus: added to the score of an arm never observed.
        objective: ``"utility"`` (the default) or ``"quality_cost"`` (a draw of
            ``y_k - rho c_k``; see :class:`~torchroute.learners.gram_base.GramRidgeLearner`).
        cost_model: ``"price"`` (the default) or ``"ridge"``: the costs ``c_k`` of
            ``quality_cost`` (:class:`~torchroute.learners.gram_base.GramRidgeLearner`).

    Shapes:
        ``act``: ``x [R, B, d]`` -> one-hot ``probs [R, B, K]``, ``action [R, B]``.
    """

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        gamma: float = 0.99,
        v: float = 1.0,
        lam: float = 1.0,
        new_arm_bonus: float = 0.0,
        objective: str = "utility",
        cost_model: str = "price",
    ) -> None:
        super().__init__(
            num_trials, num_arms, dim, gamma, lam, new_arm_bonus, False, objective, cost_model
        )
        self._set_scale(v)
