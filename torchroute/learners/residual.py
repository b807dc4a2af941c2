"""Online learners on top of a static router: they learn only what the router gets wrong.

:class:`ResidualLinUCB` and :class:`ResidualLinTS` predict each model's quality as a static
anchor router's prediction (``base``, fitted on the train split, its hyper-parameters
chosen on validation as for the router's own row) plus a linear correction,

    y_k(x) = base_k(x) + theta_k . x,

and play ``argmax_k y_k(x) - rho c_k(x)`` with the costs ``c_k`` the base router uses (the
known per-model prices where the train split has them, else its ridge prediction; with
``Context.prices``, a known price change, those costs at this round's prices, as the base
router reads them) and the request's ``rho`` (``Context.rho`` when the context carries
one, else the trial's): what they learn is the quality, which neither a price nor a
trade-off moves, so one learner serves any trade-off.
``x`` is the run's feature vector, which by default is the unit-norm embedding plus a bias
column, so the correction is ``theta_k . [x', 1]``. ``theta_k`` has prior mean 0 and
covariance ``I / lam``; the confidence width (UCB) or the posterior draw (TS) is over the
correction only. The correction learns the observed quality minus the base prediction,
``Feedback.score - base_k(x)`` (without ``Feedback.score``: ``u + rho c_k(x)``, exact
where the utility was not clipped).

Before any update every arm's correction is 0 with the same covariance, so the
correction-plus-bonus is one number for all arms of a query; the scores add it centred
(its largest value over the arms subtracted, which moves no argmax), so it adds exactly 0
and :class:`ResidualLinUCB` makes the base router's choices bit for bit, tie-breaks
included (:class:`ResidualLinTS` with ``v = 0`` too; with ``v > 0`` it samples from its
prior).

A model the base router never saw (``Problem.hidden_arms``: a scenario's new model) is
predicted as the mean of the observed models' predictions for the query, and its
correction's prior covariance is ``I / lam + s^2 e e^T``: ``e`` the bias column and
``s^2`` the variance across the observed models of their predicted scores (mean over the
train rows), how far a model is from the average one. Its bound starts above an average
model's by that width, so it is tried; once observed, its bias coefficient learns its own
offset and it is kept only where it is better. (Without a bias column, ``E = I / m`` with
``m`` the mean ``|x|^2`` replaces ``e e^T``.)

Forgetting: ``gamma < 1`` (the statistics of :class:`~torchroute.learners.discounted.
DiscountedLinUCB`) or ``window`` (:class:`~torchroute.learners.sliding_window.
SlidingWindowLinUCB`) on the correction; the correction then decays to its prior mean 0,
that is to the base router (and a new model to the mean of the others), never to a
prediction of 0.

Change detection (``restart_delta``, off by default; :class:`ResidualLinUCB` and
:class:`ResidualLinTS` with ``gamma = 1`` and no ``window``): a Gaussian GLR test per
(trial, arm) on the residuals ``score - base_k(x)`` the arm observed since its last restart,
after Besson, Kaufmann, Maillard and Seznec (JMLR 2022); where it fires, that arm's
correction in that trial goes back to mean 0 with precision ``restart_lam``, and a bias
correction (``projection: 0``) is refit at once on the residuals after the most likely
change point (:mod:`torchroute.learners.residual_restart` says exactly what is tested and
how it differs from the paper). A soft shift (``change_hazard``, a bias correction,
with or without the test) moves each arm's score by what the posterior of one change in
its residuals expects of its bias, in proportion to the evidence, long before the test
would fire (the same module).

(Over 400 lines: the two learners share their base, correction, new-model prior and
change test here; the test itself is :mod:`torchroute.learners.residual_restart`.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.functional.availability import mask_scores
from torchroute.functional.new_model import spread_direction
from torchroute.functional.random import Source
from torchroute.functional.ridge import ridge_predict, ridge_width
from torchroute.learners.anchors import BestArmClassifier, _FittedRouter
from torchroute.learners.base import ArgmaxRouting
from torchroute.learners.discounted import DiscountedLinTS, DiscountedLinUCB
from torchroute.learners.gram_base import GramRidgeLearner
from torchroute.learners.linear import LinTS, LinUCB
from torchroute.learners.objective import request_rho
from torchroute.learners.on_base_router import (
    ScoredArgmax,
    inner_ridge_learner,
    observed_quality,
    packaged_configs_of,
    posterior_draw,
    resolve_base,
    ucb_scores,
)
from torchroute.learners.residual_restart import (
    RESTART_KEYS,
    RESTART_LAM,
    RESTART_MEMORY,
    GLRRestart,
    check_restart,
    check_restart_node,
)
from torchroute.learners.round_memo import RoundMemo
from torchroute.learners.sliding_window import SlidingWindowLinTS, SlidingWindowLinUCB
from torchroute.types import Context, Decision, Feedback, Problem, TrainSplit

if TYPE_CHECKING:
    from torchroute.learners.warm_options import WarmStart
    from torchroute.learners.warm_start import WarmRows


def build_base(base: Any, problem: Problem, who: str) -> _FittedRouter:
    """The base router named by ``base`` for ``problem``.

    ``base``: the name of a packaged learner config (``"mlp_router"``, ``"knn_val"``,
    ``"mf_router"``, ``"logistic_router"``), a config node (a mapping with a ``_target_``,
    such as the run's own anchor, ``${learners.mlp}``), the factory Hydra made of one, or a
    built router. Raises ``ValueError`` (one line naming ``base``) for anything else.
    """
    router = resolve_base(base, problem, who)
    if not isinstance(router, _FittedRouter) or isinstance(router, BestArmClassifier):
        names = packaged_configs_of(_FittedRouter, (BestArmClassifier,))
        raise ValueError(
            f"{who}: base must be a static router that predicts every model's score "
            f"({names}), got {type(router).__name__}"
        )
    return router


def spread_of_models(base: _FittedRouter, features: Tensor) -> float:
    """``s^2``: the variance across the observed models of the base router's predicted
    scores, averaged over ``features [n, d]`` and over the trials (their chosen candidates
    and observed models)."""
    known = torch.ones(base.num_trials, base.num_arms, dtype=torch.bool)
    if base.hidden is not None:
        known = ~base.hidden.cpu()
    masks, which = known.unique(dim=0, return_inverse=True)  # [U, K], [R]
    with torch.no_grad():
        pred = base.candidate_scores(features.to(base.rho.dtype)).double().cpu()  # [C, n, K]
    mask = masks[:, None].double()  # [U, 1, K]
    count = mask.sum(-1)  # [U, 1]
    mean = (pred[:, None] * mask).sum(-1) / count  # [C, U, n]
    dev = (pred[:, None] - mean[..., None]).pow(2) * mask
    var = (dev.sum(-1) / (count - 1).clamp_min(1.0)).mean(-1)  # [C, U]
    return float(var[base.choice.cpu(), which].mean())


def new_model_covariance(features: Tensor, lam: float, spread: float) -> Tensor:
    """``I / lam + s^2 E`` ``[d, d]`` float64 (``E = e e^T`` on the bias column, a column
    equal to 1 on every row of ``features [n, d]``; else ``I / mean |x|^2``)."""
    eye = torch.eye(features.shape[1], dtype=torch.float64)
    return eye / lam + spread * spread_direction(features)


def principal_basis(features: Tensor, rank: int) -> Tensor:
    """The top ``rank`` principal directions of ``features [n, d]`` (centred), ``[d, rank]``
    float64 (``rank = 0``: ``[d, 0]``, the correction is then its bias alone)."""
    x = features.double().cpu()
    if rank > min(x.shape):
        raise ValueError(f"projection must be <= {min(x.shape)} (train rows, features), got {rank}")
    _, _, vh = torch.linalg.svd(x - x.mean(0), full_matrices=False)
    return vh[:rank].T.contiguous()


class _Residual(ScoredArgmax):
    """Shared parts: the base value, the correction's statistics and its update.

    Submodules: ``base`` (the static router, fixed) and ``correction`` (the learner of the
    corrections ``theta_k``: LinUCB / LinTS, or their discounted or sliding-window forms,
    on the targets ``score - base_k(x)``). Buffers are theirs.
    """

    family: ClassVar[str] = "residual"
    reads_prices: ClassVar[bool] = True  # through its base router's costs (base_value)
    starts_warm: ClassVar[bool] = True  # its base router is fitted on the train split
    per_request_rho: ClassVar[bool] = True  # it learns the quality: any rho per request
    chooses_for_budget: ClassVar[bool] = True  # its base router's candidate
    # how far and how fast to leave the base router: chosen on the validation stream with the
    # run's scenario replayed (a list of values; one value: used as given)
    chosen_on_validation: ClassVar[tuple[str, ...]] = ("base", "lam", "gamma", "window")
    #: the correction learners: plain, discounted, sliding window (set by subclasses)
    _kinds: ClassVar[tuple[type, type, type]]

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        base: _FittedRouter,
        train: TrainSplit | None,
        lam: float,
        gamma: float,
        window: int | None,
        projection: int | None,
        restart_delta: float | None = None,
        restart_lam: float = RESTART_LAM,
        restart_memory: int = RESTART_MEMORY,
        change_hazard: float | None = None,
        **score_hp: float,
    ) -> None:
        name = type(self).__name__
        check_restart(
            name, restart_delta, restart_lam, restart_memory, gamma, window, change_hazard,
            projection,
        )  # fmt: skip
        for key, value in score_hp.items():  # alpha or v: checked first, then kept
            check_number(name, key, value, ge=0)
        score_hp = {key: float(value) for key, value in score_hp.items()}
        super().__init__(num_trials, num_arms)
        check_number(name, "dim", dim, ge=1, integer=True)
        check_number(name, "lam", lam, gt=0)
        check_number(name, "gamma", gamma, gt=0, le=1)
        if base.num_trials != num_trials or base.num_arms != num_arms:
            raise ValueError(f"{name}: base was built for other trials or arms")
        self.dim, self.lam = int(dim), float(lam)
        self.base = base
        # phi(x) = [x U, 1] with U the top principal directions of the train features
        self.register_buffer("basis", None, persistent=False)  # [d, r] (fixed, from train)
        if projection is not None:
            check_number(name, "projection", projection, ge=0, integer=True)
            if train is None:
                raise ValueError(f"{name}: projection needs the train split")
            self.basis = principal_basis(train.features, int(projection)).float()
            dim = int(projection) + 1
        self.phi_dim = int(dim)
        self.correction = inner_ridge_learner(
            self._kinds, num_trials, num_arms, dim, lam, gamma, window, score_hp, name
        )
        for key, value in score_hp.items():
            setattr(self, key, value)
        # a trial with no observed cell keeps its correction (a plain ridge one: weights =
        # observed), its change memory and its shift (both read the observed cells only)
        self.learns_only_observed = bool(self.correction.learns_only_observed)
        self.spread = 0.0
        # the base's values and phi of a round's context, read by its act and its update
        self._base_memo: RoundMemo[tuple[Tensor, Tensor, Tensor]] = RoundMemo()
        self._phi_memo: RoundMemo[Tensor] = RoundMemo()
        if base.hidden is not None and bool(base.hidden.any()):
            if train is None:
                raise ValueError(f"{name}: a model the base never saw needs the train split")
            self._new_model_prior(train.features)
        self.restart: GLRRestart | None = None
        if restart_delta is not None or change_hazard is not None:
            self._init_restart(train, restart_delta, restart_lam, restart_memory, change_hazard)

    @classmethod
    def check_options(cls, **hparams: Any) -> None:
        """The change test's options (:func:`~torchroute.learners.residual_restart.
        check_restart_node`), before the base router is fitted."""
        super().check_options(**hparams)
        check_restart_node(cls.__name__, hparams)

    def _init_restart(
        self,
        train: TrainSplit | None,
        delta: float | None,
        lam: float,
        memory: int,
        hazard: float | None,
    ) -> None:
        """The change test and soft shift (:class:`~torchroute.learners.residual_restart.
        GLRRestart`) with the priors a restart puts back: ``I / restart_lam`` ``[p, p]``
        and, for the arms the base never saw, their new-model covariance ``I / restart_lam
        + s^2 E``."""
        new = None
        if self.base.hidden is not None and bool(self.base.hidden.any()):
            assert train is not None  # checked with the new-model prior
            new = new_model_covariance(self.phi(train.features.double()), lam, self.spread)
        prior = torch.eye(self.phi_dim, dtype=torch.float64) / lam
        who = type(self).__name__
        bias = self.basis is not None and self.basis.shape[1] == 0  # projection 0
        self.restart = GLRRestart(
            self.num_trials, self.num_arms, delta, memory, who, prior, new, bias, hazard, lam
        )

    def warm_start(self, rows: WarmRows, problem: Problem, warm: WarmStart) -> None:
        """As :meth:`Learner.warm_start <torchroute.learners.Learner.warm_start>` (the rows
        replayed through :meth:`update`), with the change test off: the rows are the
        correction's prior, and the test's memory holds the online residuals alone (a
        restart then drops the rows' part of that model's correction too)."""
        test, self.restart = self.restart, None
        try:
            super().warm_start(rows, problem, warm)
        finally:
            self.restart = test

    @classmethod
    def from_problem(cls, problem: Problem, base: Any = "mlp_router", **hp: Any) -> _Residual:
        """``base`` (see :func:`build_base`) fitted on ``problem``'s train split, then
        ``cls(R, K, d, base, problem.train, **hp)``."""
        router = build_base(base, problem, cls.__name__).keep_prices(problem)
        return cls(problem.num_trials, problem.num_arms, problem.dim, router, problem.train, **hp)

    def phi(self, x: Tensor) -> Tensor:
        """The correction's features: ``x [..., d]`` itself, or ``[x U, 1]`` with a
        ``projection`` (``[..., r + 1]``)."""
        if self.basis is None:
            return x
        z = x @ self.basis.to(x.dtype)
        return torch.cat([z, z.new_ones(*z.shape[:-1], 1)], -1)

    def _new_model_prior(self, train_x: Tensor) -> None:
        """The hidden arms' correction covariance ``I / lam + s^2 E`` (the module doc), from
        the train features ``train_x [n, d]``."""
        self.spread = spread_of_models(self.base, train_x)
        cov = new_model_covariance(self.phi(train_x.double()), self.lam, self.spread)  # [p, p]
        hidden = self.base.hidden[..., None, None].to(self.rounds.device)  # [R, K, 1, 1]
        corr = self.correction
        if isinstance(corr, GramRidgeLearner):
            extra = torch.linalg.inv(cov) - self.lam * torch.eye(self.phi_dim, dtype=cov.dtype)
            corr.set_prior(gram=torch.where(hidden, extra.to(corr.gram), 0.0))
        else:
            corr.a_inv = torch.where(hidden, cov.to(corr.a_inv), corr.a_inv).contiguous()

    def base_value(self, context: Context) -> tuple[Tensor, Tensor, Tensor]:
        """The base router's quality predictions (a model it never saw: the mean of the
        others), costs and values ``y - rho c`` (the request's ``rho``), each ``[R, B, K]``,
        computed as the router's own ``act`` computes them; once for a round's ``act`` and
        ``update`` (:class:`~torchroute.learners.round_memo.RoundMemo`)."""
        return self._base_memo.get(context, lambda: self._base_value(context), self._stamp())

    def _base_value(self, context: Context) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`base_value`, computed."""
        base = self.base
        with torch.no_grad():
            y_hat, c_hat = base.predict(context)
            c_hat = base.priced_costs(c_hat, context)  # at this round's known prices
            if base.hidden is not None:
                known = (~base.hidden)[:, None].to(y_hat.dtype)  # [R, 1, K]
                mean = (y_hat * known).sum(-1, keepdim=True) / known.sum(-1, keepdim=True)
                y_hat = torch.where(base.hidden[:, None], mean, y_hat)
            value = y_hat - request_rho(context, base.rho, y_hat) * c_hat
        return y_hat, c_hat, value

    def _context_phi(self, context: Context) -> Tensor:
        """:meth:`phi` of ``context.x`` in the correction's dtype, ``[R, B, p]``, once for
        a round's ``act`` and ``update``."""
        return self._phi_memo.get(
            context, lambda: self.phi(context.x.to(self._dtype())), self._stamp()
        )

    def _stamp(self) -> tuple:
        """What the memos depend on besides the context: the base's choice (a loaded state
        replaces it in place), the basis and the correction's dtype."""
        choice, basis = self.base.choice, self.basis
        where = None if basis is None else (basis.device, basis.data_ptr(), basis._version)
        return (choice.device, choice.data_ptr(), choice._version, where, self._dtype())

    def predict_quality(self, context: Context) -> Tensor:
        """The predicted quality ``base_k(x) + x^T theta_k`` (the correction's posterior
        mean, no bonus), ``x [R, B, d]`` -> ``[R, B, K]``."""
        y_hat, _, _ = self.base_value(context)
        mean, _ = self._correction_posterior(self.phi(context.x.to(self._dtype())))
        return y_hat.to(mean.dtype) + self._shifted(mean)

    def _correction_posterior(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The correction's posterior mean ``x^T theta_k`` and width ``sqrt(x^T A_k^{-1} x)``,
        each ``[R, B, K]``, of the correction's features ``x [R, B, p]``."""
        corr = self.correction
        if isinstance(corr, GramRidgeLearner):
            mean, _, quad = corr.posterior(x)
            return mean, quad.sqrt()
        return ridge_predict(corr.theta, x), ridge_width(corr.a_inv, x)

    def _correction_scores(self, x: Tensor, generator: Source) -> Tensor:
        """The correction plus its bonus or draw, ``[R, B, K]``."""
        raise NotImplementedError

    def _scores(self, context: Context, generator: Source) -> Tensor:
        """``base value + (correction - its largest value over the arms)``, masked."""
        _, _, value = self.base_value(context)
        delta = self._shifted(self._correction_scores(self._context_phi(context), generator))
        delta = delta - delta.amax(-1, keepdim=True)
        return mask_scores(value.to(delta.dtype) + delta, context.available)

    def _shifted(self, scores: Tensor) -> Tensor:
        """``scores [R, B, K]`` plus each arm's soft shift (``change_hazard``; the module
        doc), or as they are without one."""
        if self.restart is None or self.restart.hazard is None:
            return scores
        return scores + self.restart.shift[:, None, :].to(scores.dtype)

    def _dtype(self) -> torch.dtype:
        corr = self.correction
        return corr.gram.dtype if isinstance(corr, GramRidgeLearner) else corr.theta.dtype

    def update(
        self, context: Context, decision: Decision, feedback: Feedback, generator: Source = None
    ) -> dict[str, Tensor]:
        """The correction learns ``score - base_k(x)`` on the observed cells; with
        ``restart_delta``, the observed cells are then tested and those that report a change
        restart (the module doc). Returns ``{}``; with ``restart_delta``, ``{"restarts":
        [R]}``, the number of models restarted this round per trial (a run reports its
        mean per round)."""
        self._check_context(context)
        self._check_feedback(context, feedback)
        y_hat, c_hat, _ = self.base_value(context)
        observed = feedback.observed
        quality = observed_quality(feedback, context, self.base.rho, lambda: c_hat)
        target = torch.where(observed, quality.to(y_hat.dtype) - y_hat, 0.0)
        residual = Feedback(reward=target, observed=observed, only_played=feedback.only_played)
        phi = Context(x=self._context_phi(context))
        self.correction.update(phi, decision, residual, generator)
        if self.restart is None:
            self._tick(context)
            return {}
        changed = self.restart.step(observed, target)  # [R, K]
        self.restart.reset(self.correction, changed, self.base.hidden)
        if self.restart.hazard is not None:  # the bias correction: theta [R, K, 1]
            self.restart.update_shift(self.correction.theta[..., 0], observed.any(1) | changed)
        self._tick(context)
        if self.restart.delta is None:
            return {}
        return {"restarts": changed.sum(-1).to(y_hat.dtype)}


class ResidualLinUCB(ArgmaxRouting, _Residual):
    """LinUCB on the corrections of a static router (the module doc).

    Score ``base_k(x) - rho c_k(x) + x^T theta_k + alpha sqrt(x^T A_k^{-1} x)`` with
    ``A_k = lam I + sum x x^T`` over the arm's observations (discounted by ``gamma`` per
    round, or the last ``window`` contexts: then the D-LinUCB / sliding-window widths).

    Args:
        num_trials, num_arms, dim: ``R``, ``K``, ``d``.
        base: the static router (``_FittedRouter``: MLP, kNN, MF, logistic), fitted.
        train: the train split (needed when the base has hidden arms: the new-model prior).
        alpha: width of the confidence bonus.
        lam: the correction's prior precision (a larger value trusts the base longer).
        gamma: forgetting factor in ``(0, 1]`` (1: none).
        window: the contexts the correction remembers (``None``: all).
        projection: ``r``: the correction reads ``phi(x) = [x U, 1]``, ``U [d, r]`` the top
            ``r`` principal directions of the train features (``0``: its bias alone);
            ``None`` (the default): ``x`` itself.
        restart_delta: the confidence ``delta`` in ``(0, 1)`` of the change test on each
            arm's residuals (the module doc); ``None`` (the default): no test. Needs
            ``gamma = 1`` and no ``window``.
        restart_lam: the prior precision of an arm's correction after a restart (default
            1: one pseudo-observation of the base's prediction, the plain LinUCB's
            ``A = I``; the test has just found that base and correction no longer hold for
            that arm, so its new correction must move within a few observations).
        restart_memory: the most recent residuals per (trial, arm) the test reads (>= 2;
            default 1024). A shift ``D`` half-way through ``M`` residuals gives the statistic
            ``M D^2 / 2`` at ``sigma^2 = 1/4``: a drop of 0.3 needs ``M`` above about 400 to
            reach the threshold at ``delta = 0.01`` (256: 11.5 against 14.0).
        change_hazard: the soft shift's prior odds ``h`` in ``(0, 1)`` of a change at each
            kept residual (:mod:`~torchroute.learners.residual_restart`); ``None`` (the
            default): no shift. Needs ``projection: 0``, ``gamma = 1`` and no ``window``;
            the memory is the test's (``restart_memory``), kept without a test too.

    Shapes:
        ``act``: ``x [R, B, d]`` -> one-hot ``probs [R, B, K]``, ``action [R, B]``; with
        ``restart_delta``, ``update`` also returns ``restarts [R]`` and the state holds the
        test's ``restart.values [R, K, M]``, ``restart.count`` and ``restart.restarts
        [R, K]``; with ``change_hazard`` (and without a test, the same memory) it holds
        ``restart.shift [R, K]``.
    """

    _kinds = (LinUCB, DiscountedLinUCB, SlidingWindowLinUCB)
    chosen_on_validation: ClassVar[tuple[str, ...]] = (
        *_Residual.chosen_on_validation,
        "alpha",
        *RESTART_KEYS,
    )

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        base: _FittedRouter,
        train: TrainSplit | None = None,
        alpha: float = 1.0,
        lam: float = 10.0,
        gamma: float = 1.0,
        window: int | None = None,
        projection: int | None = None,
        restart_delta: float | None = None,
        restart_lam: float = RESTART_LAM,
        restart_memory: int = RESTART_MEMORY,
        change_hazard: float | None = None,
    ) -> None:
        super().__init__(
            num_trials, num_arms, dim, base, train, lam, gamma, window, projection,
            restart_delta, restart_lam, restart_memory, change_hazard, alpha=alpha,
        )  # fmt: skip

    def _correction_scores(self, x: Tensor, generator: Source) -> Tensor:
        return ucb_scores(self.correction, x, generator)

    def _argmax_scores(self, context: Context, generator: Source) -> Tensor:
        """The masked scores ``act`` plays the argmax of, ``[R, B, K]``."""
        return self._scores(context, generator)


class ResidualLinTS(_Residual):
    """Linear Thompson sampling on the corrections of a static router (the module doc).

    Each arm's draw is ``base_k(x) - rho c_k(x) + N(x^T theta_k, v^2 x^T A_k^{-1} x)``;
    with ``v = 0`` no normal is drawn (the greedy residual learner).

    Args: as :class:`ResidualLinUCB` (the ``restart_*`` change test and ``change_hazard``
    included), with the posterior scale ``v`` for ``alpha``.

    Shapes:
        ``act``: ``x [R, B, d]`` -> one-hot ``probs [R, B, K]``, ``action [R, B]``; with
        ``restart_delta``, ``update`` also returns ``restarts [R]`` and the state holds the
        test's ``restart.values [R, K, M]``, ``restart.count`` and ``restart.restarts
        [R, K]``.
    """

    _kinds = (LinTS, DiscountedLinTS, SlidingWindowLinTS)
    chosen_on_validation: ClassVar[tuple[str, ...]] = (
        *_Residual.chosen_on_validation,
        "v",
        *RESTART_KEYS,
    )

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        base: _FittedRouter,
        train: TrainSplit | None = None,
        v: float = 0.5,
        lam: float = 10.0,
        gamma: float = 1.0,
        window: int | None = None,
        projection: int | None = None,
        restart_delta: float | None = None,
        restart_lam: float = RESTART_LAM,
        restart_memory: int = RESTART_MEMORY,
        change_hazard: float | None = None,
    ) -> None:
        super().__init__(
            num_trials, num_arms, dim, base, train, lam, gamma, window, projection,
            restart_delta, restart_lam, restart_memory, change_hazard, v=v,
        )  # fmt: skip

    def _correction_scores(self, x: Tensor, generator: Source) -> Tensor:
        mean, width = self._correction_posterior(x)
        return posterior_draw(mean, width, self.v, generator)


__all__ = ["ResidualLinTS", "ResidualLinUCB", "build_base"]
