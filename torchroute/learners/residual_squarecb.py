"""SquareCB on the corrections of a static router: inverse gap weighting over
``base value + correction``.

:class:`ResidualSquareCB` predicts each model's quality as the residual learners do
(:mod:`torchroute.learners.residual`): the base router's prediction plus a ridge
correction ``theta_k . phi(x)`` learnt online on ``score - base_k(x)`` (the same base,
new-model prior, forgetting and ``projection``), and samples from SquareCB's inverse gap
weighting (Foster and Rakhlin 2020; :func:`~torchroute.functional.squarecb.squarecb_probs`)
of the values

    f_k(x) = base_k(x) - rho c_k(x) + phi(x)^T theta_k,

``p_k = 1 / (mu + igw_gamma (f_b - f_k))`` for ``k`` other than the best arm ``b``, the rest
on ``b``, then mixed with the uniform distribution so that ``p_k >= eps_floor`` (as
:class:`~torchroute.learners.SquareCB`, whose ``gamma`` is ``igw_gamma`` here: ``gamma`` is
the residual family's forgetting factor). The exploitation strength is constant, as in
SquareCB and the CABS experiments.

What holds before any update (the correction is exactly 0): the distribution is the
inverse gap weighting of the base router's values, so its most probable arm is the base
router's argmax (the first of tied values), every other arm has probability
``1 / (mu + igw_gamma gap)`` before the floor, and as ``igw_gamma`` grows (with
``eps_floor = 0``) the action is the base router's argmax with probability tending to 1.
It samples, so it does not make the base router's choices bit for bit at a finite
``igw_gamma``.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from torchroute.checks import check_number
from torchroute.functional.availability import mask_scores
from torchroute.functional.random import Source
from torchroute.functional.sampling import probability_floor, sample_categorical
from torchroute.functional.squarecb import squarecb_probs
from torchroute.learners.anchors import _FittedRouter
from torchroute.learners.discounted import DiscountedLinUCB
from torchroute.learners.linear import LinUCB
from torchroute.learners.residual import _Residual
from torchroute.learners.sliding_window import SlidingWindowLinUCB
from torchroute.types import Context, Decision, TrainSplit


class ResidualSquareCB(_Residual):
    """SquareCB on the corrections of a static router (the module doc).

    Args:
        num_trials, num_arms, dim: ``R``, ``K``, ``d``.
        base: the static router (``_FittedRouter``: MLP, kNN, MF, logistic), fitted.
        train: the train split (needed when the base has hidden arms: the new-model prior,
            or with a ``projection``).
        igw_gamma: SquareCB's exploitation strength (> 0).
        mu: the IGW constant, ``K`` when ``None`` (``>= K``).
        eps_floor: minimum probability of an arm, in ``[0, 1 / K]``.
        lam: the correction's prior precision (a larger value trusts the base longer).
        gamma: forgetting factor of the correction in ``(0, 1]`` (1: none).
        window: the contexts the correction remembers (``None``: all).
        projection: as :class:`~torchroute.learners.residual.ResidualLinUCB`.

    Shapes:
        ``act``: ``x [R, B, d]`` -> ``probs [R, B, K]`` (the distribution the action is drawn
        from), ``action [R, B]``; the correction holds ``theta [R, K, p]``.
    """

    samples_from_probs: ClassVar[bool] = True
    chosen_on_validation: ClassVar[tuple[str, ...]] = (
        *_Residual.chosen_on_validation,
        "igw_gamma",
    )
    # the correction's ridge statistics (its width is unused: alpha = 0)
    _kinds = (LinUCB, DiscountedLinUCB, SlidingWindowLinUCB)

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        base: _FittedRouter,
        train: TrainSplit | None = None,
        igw_gamma: float = 4.0,
        mu: float | None = None,
        eps_floor: float = 1e-3,
        lam: float = 10.0,
        gamma: float = 1.0,
        window: int | None = None,
        projection: int | None = None,
    ) -> None:
        name = type(self).__name__
        check_number(name, "igw_gamma", igw_gamma, gt=0)
        if mu is not None:
            check_number(name, "mu", mu, ge=num_arms)
        check_number(name, "eps_floor", eps_floor, ge=0, le=1.0 / num_arms)
        super().__init__(
            num_trials, num_arms, dim, base, train, lam, gamma, window, projection, alpha=0.0
        )
        self.igw_gamma, self.eps_floor = float(igw_gamma), float(eps_floor)
        self.mu = None if mu is None else float(mu)

    def _correction_scores(self, x: Tensor, generator: Source) -> Tensor:
        """The correction's posterior mean ``[R, B, K]`` (no bonus: IGW explores)."""
        return self._correction_posterior(x)[0]

    def values(self, context: Context) -> Tensor:
        """``f_k(x) = base value + correction`` ``[R, B, K]`` (unavailable arms at -inf)."""
        _, _, value = self.base_value(context)
        mean = self._correction_scores(self._context_phi(context), None)
        return mask_scores(value.to(mean.dtype) + mean, context.available)

    def act(self, context: Context, generator: Source = None) -> Decision:
        """Inverse gap weighting of :meth:`values`, floored, and one draw: ``x [R, B, d]``
        -> ``probs [R, B, K]``, ``action [R, B]``."""
        self._check_context(context)
        probs = squarecb_probs(self.values(context), self.igw_gamma, self.mu)
        probs = probability_floor(probs, self.eps_floor)
        return Decision(probs=probs, action=sample_categorical(probs, generator))


__all__ = ["ResidualSquareCB"]
