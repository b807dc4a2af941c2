"""Neural-linear learners (Riquelme, Tucker and Snoek 2018): linear heads on a router's
learned representation, updated online.

:class:`NeuralLinearUCB` and :class:`NeuralLinearTS` read a static router's representation
``h(x)`` (``base``: the MLP router's last hidden layer, or the MF router's query vector
``P x``, of each trial's chosen candidate; fitted once on the train split, then fixed) and
predict each model's quality with a Bayesian linear regression (ridge) head per model,

    y_k(x) = theta_k . phi(x),    phi(x) = [h(x), 1]   (p = h + 1 entries),

and play ``argmax_k y_k(x) - rho c_k(x) + bonus`` with the costs ``c_k`` the base router
uses (:meth:`~torchroute.learners.anchors._FittedRouter.predict`). The heads learn the
observed quality ``Feedback.score`` (without it: ``u + rho c_k(x)``, exact where the
utility was not clipped), as the residual learners do.

Warm start (always: the representation is the base's, fitted on train): each head is a
ridge regression on the train rows (full feedback, every model the base saw), each row of
weight ``w`` (``head_weight``): precision ``lam I + P_k``, ``P_k = w sum phi phi^T``, and
moment ``t_k = w sum y_k phi``. Several weights are chosen per trial on the validation
split (without one, on a seeded 20% of the train rows, as the base chooses its
candidates): the weight whose greedy policy has the best mean validation utility. ``P_k``,
``t_k`` are a prior that forgetting never removes.

A model the base router never saw (``Problem.hidden_arms``) has no train rows: its head's
prior is the spread of the observed models' warm heads, mean ``m = mean_k theta_k`` and
covariance ``S + I / lam`` (``S`` their sample covariance), so for every query it predicts
the mean of their predictions with, as its variance, their variance across the models
(``phi^T S phi``) plus the ridge's ``|phi|^2 / lam``: neither 0 nor blind optimism. It is
tried where the models disagree, then kept only where it is better.

Forgetting: ``gamma < 1`` (discounted statistics) or ``window`` (the last contexts) on
the online observations only; the heads then return to their prior (the warm start, or for
a new model the mean of the others), never to a prediction of 0.

(Over 400 lines: the UCB and TS learners share the warm start, the new-model prior and the
update, and each keeps its scoring next to its arguments.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.functional.availability import mask_scores
from torchroute.functional.random import Source
from torchroute.functional.ridge import ridge_predict, ridge_width
from torchroute.learners.anchors import _candidates, _FittedRouter, held_out
from torchroute.learners.base import ArgmaxRouting
from torchroute.learners.discounted import DiscountedLinTS, DiscountedLinUCB
from torchroute.learners.gram_base import GramRidgeLearner
from torchroute.learners.linear import LinTS, LinUCB
from torchroute.learners.objective import request_rho
from torchroute.learners.on_base_router import (
    ScoredArgmax,
    inner_ridge_learner,
    observed_quality,
    posterior_draw,
    ucb_scores,
)
from torchroute.learners.residual import build_base
from torchroute.learners.round_memo import RoundMemo
from torchroute.learners.sliding_window import SlidingWindowLinTS, SlidingWindowLinUCB
from torchroute.types import Context, Decision, Feedback, Problem, TrainSplit


def with_bias(h: Tensor) -> Tensor:
    """``phi = [h, 1]``: ``h [..., w]`` -> ``[..., w + 1]``."""
    return torch.cat([h, h.new_ones(*h.shape[:-1], 1)], -1)


class _NeuralLinear(ScoredArgmax):
    """Shared parts: the representation, the heads' warm start, new-model prior and update.

    Submodules: ``base`` (the static router, fixed) and ``heads`` (LinUCB / LinTS, or their
    discounted or sliding-window forms, on ``phi(x)`` ``[R, B, p]``; the warm start is their
    ``a_inv``/``theta`` (plain) or their never-forgotten prior). Buffers are theirs, plus
    ``head_weight [R]`` (each trial's chosen warm weight, not in the state_dict).
    """

    family: ClassVar[str] = "neural_linear"
    starts_warm: ClassVar[bool] = True  # the representation and the heads learn on train
    reads_prices: ClassVar[bool] = True  # through its base router's costs (_costs)
    per_request_rho: ClassVar[bool] = True  # the heads learn the quality: any rho per request
    chooses_for_budget: ClassVar[bool] = True  # its base router's candidate
    #: the head learners: plain, discounted, sliding window (set by subclasses)
    _kinds: ClassVar[tuple[type, type, type]]

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        base: _FittedRouter,
        train: TrainSplit,
        validation: TrainSplit | None,
        head_weight: float | Sequence[float],
        lam: float,
        gamma: float,
        window: int | None,
        **score_hp: float,
    ) -> None:
        name = type(self).__name__
        for key, value in score_hp.items():  # alpha or v
            check_number(name, key, value, ge=0)
        super().__init__(num_trials, num_arms)
        check_number(name, "dim", dim, ge=1, integer=True)
        check_number(name, "lam", lam, gt=0)
        check_number(name, "gamma", gamma, gt=0, le=1)
        weights = _candidates(f"{name}: head_weight", head_weight)
        if min(weights) <= 0:
            raise ValueError(f"{name}: head_weight must be > 0, got {head_weight!r}")
        if not hasattr(base, "candidate_representation"):
            raise ValueError(
                f"{name}: base must be a router with a learned representation "
                f"(mlp_router, mf_router), got {type(base).__name__}"
            )
        if base.num_trials != num_trials or base.num_arms != num_arms:
            raise ValueError(f"{name}: base was built for other trials or arms")
        if window is not None and gamma < 1:
            raise ValueError(f"{name}: give gamma < 1 or a window, not both")
        self.dim, self.lam = int(dim), float(lam)
        self.base = base
        with torch.no_grad():
            width = base.candidate_representation(train.features[:1].to(base.rho.dtype)).shape[-1]
        self.phi_dim = int(width) + 1
        hp = {key: float(value) for key, value in score_hp.items()}
        self.heads = inner_ridge_learner(
            self._kinds, num_trials, num_arms, self.phi_dim, lam, gamma, window, hp, name
        )
        for key, value in hp.items():
            setattr(self, key, value)
        self.register_buffer("head_weight", None, persistent=False)
        self._warm_heads(train, validation, weights)
        self._phi_memo: RoundMemo[Tensor] = RoundMemo()  # act's phi, read again by update

    @classmethod
    def from_problem(cls, problem: Problem, base: Any = "mlp_router", **hp: Any) -> _NeuralLinear:
        """``base`` (see :func:`~torchroute.learners.residual.build_base`; with a learned
        representation) fitted on ``problem``'s train split, then
        ``cls(R, K, d, base, problem.train, problem.validation, **hp)``."""
        train = problem.require_train(cls.__name__)
        router = build_base(base, problem, cls.__name__).keep_prices(problem)
        return cls(
            problem.num_trials, problem.num_arms, problem.dim, router, train,
            problem.validation, **hp,
        )  # fmt: skip

    # ------------------------------------------------------------------ representation
    def _candidate_phi(self, x: Tensor) -> Tensor:
        """``phi`` of every base candidate, ``x [n, d]`` -> ``[C, n, p]`` float64."""
        base = self.base
        with torch.no_grad():
            return with_bias(base.candidate_representation(x.to(base.rho.dtype)).double())

    def phi(self, x: Tensor) -> Tensor:
        """``phi(x) = [h(x), 1]`` of each trial's base candidate: ``x [R, B, d]`` ->
        ``[R, B, p]`` in the heads' dtype."""
        base = self.base
        with torch.no_grad():
            return with_bias(base.representation(x.to(base.rho.dtype))).to(self._dtype())

    def _context_phi(self, context: Context) -> Tensor:
        """:meth:`phi` of ``context.x [R, B, d]`` -> ``[R, B, p]``, computed once for a
        round's ``act`` and ``update`` (:class:`~torchroute.learners.round_memo.RoundMemo`)."""
        choice = self.base.choice
        stamp = (choice.device, choice.data_ptr(), choice._version, self._dtype())
        return self._phi_memo.get(context, lambda: self.phi(context.x), stamp)

    def _dtype(self) -> torch.dtype:
        heads = self.heads
        return heads.gram.dtype if isinstance(heads, GramRidgeLearner) else heads.theta.dtype

    # ------------------------------------------------------------------ warm start
    def _warm_heads(
        self, train: TrainSplit, validation: TrainSplit | None, weights: tuple[float, ...]
    ) -> None:
        """The heads' prior from the train rows (the module doc), in float64."""
        from torchroute.learners.warm_start import PerTrialBest

        base, r, k, p = self.base, self.num_trials, self.num_arms, self.phi_dim
        fit, choice = held_out(train, validation, len(weights))
        pick = base.choice.cpu()
        z = self._candidate_phi(fit.features.cpu())  # [C, n, p]
        gram = torch.einsum("cnp,cnq->cpq", z, z)[pick]  # [R, p, p]
        moment = torch.einsum("cnp,nk->ckp", z, fit.scores.double().cpu())[pick]  # [R, K, p]
        known = torch.ones(r, k, dtype=torch.bool)
        if base.hidden is not None:
            known = ~base.hidden.cpu()
        scale = known.double()  # a model the base never saw takes no rows
        eye = self.lam * torch.eye(p, dtype=torch.float64)
        best = PerTrialBest()
        for w in weights:
            # every known arm has the trial's rows: one [p, p] system per trial
            solved = torch.linalg.solve(eye + w * gram, w * moment.transpose(1, 2))  # [R, p, K]
            theta = solved.transpose(1, 2) * scale[..., None]  # [R, K, p]
            state = {"theta": theta, "weight": torch.full((r,), w, dtype=torch.float64)}
            if len(weights) == 1:
                best.offer(state, torch.zeros(r, dtype=torch.float64))
                break
            assert choice is not None  # several weights: held_out gives a choice split
            best.offer(state, self._greedy_value(theta, choice))
        assert best.state is not None
        weight = best.state["weight"]  # [R]
        self.head_weight = weight.to(self.rounds.device)
        arm_weight = weight[:, None] * scale  # [R, K]
        prior_gram = arm_weight[..., None, None] * gram[:, None]  # [R, K, p, p]
        prior_target = arm_weight[..., None] * moment  # [R, K, p]
        if not bool(known.all()):
            prior_gram, prior_target = self._new_model_prior(
                known, best.state["theta"], prior_gram, prior_target
            )
        self._set_prior(prior_gram, prior_target)

    def _greedy_value(self, theta: Tensor, split: TrainSplit) -> Tensor:
        """Mean utility ``[R]`` on ``split`` of the argmax of the heads' ``theta [R, K, p]``
        predicted quality minus ``rho`` times the base's costs."""
        from torchroute.learners.warm_start import greedy_value

        base = self.base
        z = self._candidate_phi(split.features.cpu())[base.choice.cpu()]  # [R, m, p]
        quality = torch.einsum("rkp,rmp->rmk", theta, z)
        with torch.no_grad():
            cost = base.costs(split.features.to(base.rho.dtype)).double().cpu()  # [m, K]
        value = quality - base.rho.double().cpu()[:, None, None] * cost[None]
        rho = base.rho.double().cpu()
        cpu = TrainSplit(*(t.double().cpu() for t in (split.features, split.scores, split.costs)))
        return greedy_value(value, cpu, rho)

    def _new_model_prior(
        self, known: Tensor, theta: Tensor, gram: Tensor, target: Tensor
    ) -> tuple[Tensor, Tensor]:
        """The prior of the arms the base never saw (``~known [R, K]``): the mean ``m`` and
        covariance ``S + I / lam`` of the known arms' warm heads ``theta [R, K, p]``
        (``S`` their sample covariance, ``ddof = 1``); returns the priors ``gram
        [R, K, p, p]``, ``target [R, K, p]`` with theirs set."""
        p = self.phi_dim
        eye = torch.eye(p, dtype=torch.float64)
        mask = known.double()[..., None]  # [R, K, 1]
        count = mask.sum(1)  # [R, 1]
        mean = (theta * mask).sum(1) / count  # [R, p]
        dev = (theta - mean[:, None]) * mask  # [R, K, p]
        cov = torch.einsum("rkp,rkq->rpq", dev, dev) / (count - 1).clamp_min(1.0)[..., None]
        precision = torch.linalg.inv(cov + eye / self.lam)  # [R, p, p]
        precision = 0.5 * (precision + precision.transpose(-1, -2))
        hidden = ~known
        new_gram = precision - self.lam * eye  # lam I + new_gram = precision
        new_target = torch.einsum("rpq,rq->rp", precision, mean)
        gram = torch.where(hidden[..., None, None], new_gram[:, None], gram)
        target = torch.where(hidden[..., None], new_target[:, None], target)
        return gram, target

    def _set_prior(self, gram: Tensor, target: Tensor) -> None:
        """Precision ``lam I + gram`` ``[R, K, p, p]`` and moment ``target [R, K, p]`` as the
        heads' starting state (a prior that forgetting never removes)."""
        heads, dev = self.heads, self.rounds.device
        if isinstance(heads, GramRidgeLearner):
            heads.set_prior(gram=gram, target=target)
            return
        eye = self.lam * torch.eye(self.phi_dim, dtype=torch.float64)
        a_inv = torch.linalg.inv(eye + gram)
        a_inv = 0.5 * (a_inv + a_inv.transpose(-1, -2))
        theta = torch.einsum("rkpq,rkq->rkp", a_inv, target)
        heads.a_inv = a_inv.to(dev, heads.a_inv.dtype).contiguous()
        heads.theta = theta.to(dev, heads.theta.dtype).contiguous()

    # ------------------------------------------------------------------ acting
    def posterior(self, phi: Tensor) -> tuple[Tensor, Tensor]:
        """The heads' posterior mean ``phi^T theta_k`` and width ``sqrt(phi^T A_k^{-1} phi)``,
        each ``[R, B, K]``, of ``phi [R, B, p]``."""
        heads = self.heads
        if isinstance(heads, GramRidgeLearner):
            mean, _, quad = heads.posterior(phi)
            return mean, quad.sqrt()
        return ridge_predict(heads.theta, phi), ridge_width(heads.a_inv, phi)

    def predict_quality(self, context: Context) -> Tensor:
        """The heads' predicted quality (posterior mean, no bonus): ``x [R, B, d]`` ->
        ``[R, B, K]``."""
        return self.posterior(self.phi(context.x))[0]

    def _head_scores(self, phi: Tensor, generator: Source) -> Tensor:
        """The heads' quality plus bonus or draw, ``[R, B, K]``."""
        raise NotImplementedError

    def _costs(self, context: Context) -> Tensor:
        """The base router's costs ``[R, B, K]`` (as its own ``act`` takes them: at this
        round's known prices with ``Context.prices``; its score predictions are not
        computed)."""
        base = self.base
        with torch.no_grad():
            return base.priced_costs(base.costs(context.x.to(base.rho.dtype)), context)

    def _scores(self, context: Context, generator: Source) -> Tensor:
        """``head scores - rho c`` (the request's ``rho``), masked, ``[R, B, K]``."""
        quality = self._head_scores(self._context_phi(context), generator)
        cost = self._costs(context).to(quality.dtype)
        value = quality - request_rho(context, self.base.rho, quality) * cost
        return mask_scores(value, context.available)

    def update(
        self, context: Context, decision: Decision, feedback: Feedback, generator: Source = None
    ) -> dict[str, Tensor]:
        """The heads learn the observed quality on ``phi(x)``. Returns ``{}``."""
        self._check_context(context)
        self._check_feedback(context, feedback)
        observed = feedback.observed
        quality = observed_quality(feedback, context, self.base.rho, lambda: self._costs(context))
        phi = self._context_phi(context)  # act's, for the same context
        target = torch.where(observed, quality.to(phi.dtype), 0.0)
        fb = Feedback(reward=target, observed=observed, only_played=feedback.only_played)
        self.heads.update(Context(x=phi), decision, fb, generator)
        self._tick(context)
        return {}


class NeuralLinearUCB(ArgmaxRouting, _NeuralLinear):
    """LinUCB heads on a static router's representation (the module doc).

    Score ``phi^T theta_k + alpha sqrt(phi^T A_k^{-1} phi) - rho c_k(x)`` with
    ``A_k = lam I + P_k + sum phi phi^T`` over the arm's online observations (discounted by
    ``gamma`` per round, or the last ``window`` contexts: then the D-LinUCB /
    sliding-window widths), ``P_k`` the warm start.

    Args:
        num_trials, num_arms, dim: ``R``, ``K``, ``d``.
        base: the static router with a representation (MLP or MF router), fitted.
        train: the train split (features ``[n, d]``, scores ``[n, K]``): the warm rows.
        validation: the validation split (chooses among several ``head_weight``).
        head_weight: the weight ``w`` of a train row in the heads (a number, or candidates
            chosen per trial on validation).
        alpha: width of the confidence bonus.
        lam: the heads' ridge regulariser.
        gamma: forgetting factor in ``(0, 1]`` (1: none) of the online observations.
        window: the contexts the heads remember (``None``: all).

    Shapes:
        ``act``: ``x [R, B, d]`` -> one-hot ``probs [R, B, K]``, ``action [R, B]``; the
        heads hold ``theta [R, K, p]`` and ``A^{-1} [R, K, p, p]`` (plain) or the Gram
        statistics (forgetting), ``p`` the representation's width plus 1.
    """

    _kinds = (LinUCB, DiscountedLinUCB, SlidingWindowLinUCB)

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        base: _FittedRouter,
        train: TrainSplit,
        validation: TrainSplit | None = None,
        head_weight: float | Sequence[float] = 1.0,
        alpha: float = 1.0,
        lam: float = 1.0,
        gamma: float = 1.0,
        window: int | None = None,
    ) -> None:
        super().__init__(
            num_trials, num_arms, dim, base, train, validation, head_weight, lam, gamma, window,
            alpha=alpha,
        )  # fmt: skip

    def _head_scores(self, phi: Tensor, generator: Source) -> Tensor:
        return ucb_scores(self.heads, phi, generator)

    def _argmax_scores(self, context: Context, generator: Source) -> Tensor:
        """The masked scores ``act`` plays the argmax of, ``[R, B, K]``."""
        return self._scores(context, generator)


class NeuralLinearTS(_NeuralLinear):
    """Thompson sampling heads on a static router's representation (the module doc).

    Each arm's draw is ``N(phi^T theta_k, v^2 phi^T A_k^{-1} phi) - rho c_k(x)``; with
    ``v = 0`` no normal is drawn (the greedy neural-linear learner).

    Args: as :class:`NeuralLinearUCB`, with the posterior scale ``v`` for ``alpha``.

    Shapes:
        ``act``: ``x [R, B, d]`` -> one-hot ``probs [R, B, K]``, ``action [R, B]``.
    """

    _kinds = (LinTS, DiscountedLinTS, SlidingWindowLinTS)

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        base: _FittedRouter,
        train: TrainSplit,
        validation: TrainSplit | None = None,
        head_weight: float | Sequence[float] = 1.0,
        v: float = 0.5,
        lam: float = 1.0,
        gamma: float = 1.0,
        window: int | None = None,
    ) -> None:
        super().__init__(
            num_trials, num_arms, dim, base, train, validation, head_weight, lam, gamma, window,
            v=v,
        )  # fmt: skip

    def _head_scores(self, phi: Tensor, generator: Source) -> Tensor:
        mean, width = self.posterior(phi)
        return posterior_draw(mean, width, self.v, generator)


__all__ = ["NeuralLinearTS", "NeuralLinearUCB", "with_bias"]
