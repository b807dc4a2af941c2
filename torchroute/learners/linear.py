"""Linear contextual bandits on a ridge solver: LinUCB, LinTS, epsilon-greedy, SquareCB.

(Over 400 lines: the four rules share the per-trial hyper-parameters and each carries its
routing probabilities next to its ``act``.)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from torchroute.checks import check_igw, check_number
from torchroute.errors import OptionError
from torchroute.functional.availability import mask_scores
from torchroute.functional.random import Source, normal
from torchroute.functional.ridge import (
    ridge_init,
    ridge_predict,
    ridge_width,
    sherman_morrison_shared,
)
from torchroute.functional.sampling import (
    argmax_random_ties,
    one_hot_probs,
    probability_floor,
    sample_categorical,
    tie_probs,
)
from torchroute.functional.squarecb import squarecb_probs
from torchroute.learners.base import ArgmaxRouting
from torchroute.learners.fused_linucb import Kernel, check_kernel, fused_act, fused_update
from torchroute.learners.objective import Objective
from torchroute.learners.ridge_base import RidgeLearner
from torchroute.types import Context, Decision, Feedback

#: A hyper-parameter given once (a number) or per trial (``R`` values: a sequence or ``[R]``).
PerTrial = float | Sequence[float] | Tensor


def per_trial(owner: str, name: str, value: PerTrial, num_trials: int, **bounds) -> float | Tensor:
    """A number (checked with ``bounds``, returned as is) or ``R`` per-trial values -> ``[R]``.

    Per-trial values come back as a float64 ``[R]`` tensor, each checked with ``bounds``
    (the keywords of :func:`~torchroute.checks.check_number`).
    """
    if not isinstance(value, (Tensor, Sequence)) or isinstance(value, str):
        check_number(owner, name, value, **bounds)
        return value
    values = torch.as_tensor(
        value if isinstance(value, Tensor) else list(value), dtype=torch.float64
    ).reshape(-1)
    if values.numel() != num_trials:
        raise OptionError(
            f"{owner}: {name} must be a number or R={num_trials} per-trial values, "
            f"got {values.numel()} values"
        )
    for v in values.tolist():
        check_number(owner, name, v, **bounds)
    return values


def _scale(value: float | Tensor, like: Tensor) -> float | Tensor:
    """A number as is; ``[R]`` per-trial values as ``[R, 1, 1]`` in ``like``'s dtype."""
    return value if not isinstance(value, Tensor) else value.to(like.dtype)[:, None, None]


class _PerTrialRidge(Objective, RidgeLearner):
    """A ridge learner whose ``lam`` may also be given per trial (``R`` values).

    Prices: its ridge models estimate the utility at the reference prices
    (``Problem.prices``). With ``Context.prices`` (a known price change) ``act`` moves every
    estimate by ``-rho (p_now - p_ref)`` (:meth:`~torchroute.learners.Learner.
    priced_scores`) and ``update`` learns the observed utility moved to the reference
    prices (:meth:`~torchroute.learners.Learner.reference_feedback`: ``reward + rho (c -
    c p_ref / p_now)``, the clip kept at the prices in force), so a price change moves the
    choice at once and what was learned stays valid.

    ``per_trial_hparams`` names the hyper-parameters a subclass accepts per trial; a float
    keeps the numbers of a float-only learner bit for bit (``A_k^{-1} = I / lam`` is built
    the same way for every distinct value). ``objective``: what the ridge model learns and
    the learner decides by; ``cost_model``: the costs a ``quality_cost`` learner decides by
    (:mod:`torchroute.learners.objective`).
    """

    per_trial_hparams: tuple[str, ...] = ("lam",)
    chosen_on_validation: tuple[str, ...] = ("new_arm_bonus",)
    learns_only_observed = True  # weights = feedback.observed: a 0 leaves A^{-1}, b as they are
    # Context.prices: scores moved by -rho (p_now - p_ref), targets at the reference prices
    reads_prices = True

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        lam: PerTrial,
        objective: str = "utility",
        cost_model: str = "price",
    ) -> None:
        lam = per_trial(type(self).__name__, "lam", lam, num_trials, gt=0)
        super().__init__(num_trials, num_arms, dim, 1.0 if isinstance(lam, Tensor) else lam)
        self._init_objective(objective, cost_model)
        if isinstance(lam, Tensor):
            for value in lam.unique().tolist():
                self.a_inv[lam == value] = ridge_init(1, num_arms, self.dim, value)[0]
            del self.lam
            self.register_buffer("lam", lam)

    def _per_trial(self, name: str, value: PerTrial, **bounds) -> None:
        """Set ``self.<name>``: a number as an attribute, per-trial values as a buffer."""
        checked = per_trial(type(self).__name__, name, value, self.num_trials, **bounds)
        if isinstance(checked, Tensor):
            self.register_buffer(name, checked)
        else:
            setattr(self, name, checked)


class LinUCB(ArgmaxRouting, _PerTrialRidge):
    """LinUCB (Li et al. 2010) with one ridge model per arm.

    Score ``x^T theta_k + alpha sqrt(x^T A_k^{-1} x)``; argmax with random tie-break
    (``docs/reference/learners.md``).

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d``.
        alpha: width of the confidence bonus (a number, or ``R`` per-trial values).
        lam: ridge regulariser (a number, or ``R`` per-trial values).
        new_arm_bonus: added to the score of an arm never observed (a model that has just
            arrived through a scenario or ``/models``); 0 (the default) adds nothing.
        new_arm_prior: what an arm never observed predicts: ``"zero"`` (the default, the
            ridge prior) or ``"mean"``, the mean ``theta`` of the trial's observed arms,
            its prior mean from then on (a new model starts as an average one, with the
            full width ``alpha |x| / sqrt(lam)`` on top, rather than at 0 below the warm
            models); or ``"spread"``: that mean, and after a warm start that did not see
            it the observed models' width plus their spread instead of the full width
            (:meth:`~torchroute.learners.ridge_base.RidgeLearner._new_arm_covariance`).
        kernel: ``"torch"`` (eager operators, any device); ``"fused"``: one C++ call for
            the scores and one for a bandit update (CPU, a torch C++ extension built at
            first use), the same results up to rounding; ``"fused_fp16"``: also a float16 copy of
            ``A^{-1}`` for the widths (float32; widths to about ``1e-3`` relative);
            ``"auto"``: ``"fused"`` when the kernel builds (or is cached), else ``"torch"``
            with one warning (``"fused"`` asked for explicitly is an error then), and eager
            on a non-CPU device. See
            :mod:`torchroute.learners.fused_linucb` and ``benchmarks/linucb_throughput.py``.
        objective: ``"utility"`` (the default: the ridge models learn each trial's utility)
            or ``"quality_cost"``: they learn the quality ``Feedback.score`` and the score
            is ``x^T theta_k + alpha width - rho c_k`` with the request's ``rho``
            (``Context.rho``, else the trial's) and the known prices ``c_k``
            (:mod:`torchroute.learners.objective`; eager operators, never the fused kernel).
        cost_model: the costs ``c_k`` of ``quality_cost``: ``"price"`` (the default, each
            model's known price) or ``"ridge"`` (each query's cost ``c_k(x)`` predicted by a
            ridge of the costs on the features fitted on the train split; scaled by
            ``p_now / p_ref`` under ``Context.prices``; :mod:`torchroute.learners.objective`).

    Defaults (``docs/reference/learners.md``, "Paper values vs library defaults"): ``alpha = 1``
    and ``lam = 1`` (Li et al.'s ``A_k = I``). An untried arm has ``theta_k = 0`` and
    ``A_k^{-1} = I / lam``, so its score is ``alpha ||x|| / sqrt(lam)``; for unit-norm
    features plus a bias (``||x|| = sqrt(2)``) that is ``sqrt(2) ~ 1.41``, above every
    reward in ``[0, 1]``, so an untried arm outranks every arm whose bonus has shrunk (a
    tried arm's score tends to its mean reward, at most 1) and each arm gets tried. The CABS values
    ``lam = 10, alpha = 1`` give ``sqrt(0.2) ~ 0.45``, below a good model's utility, and
    LinUCB may then never leave its first arm; the paper presets set them explicitly.

    Shapes:
        ``act``: ``x [R, B, d]`` -> ``probs [R, B, K]`` (one-hot), ``action [R, B]``.
    """

    per_trial_hparams = ("alpha", "lam")
    chosen_on_validation = ("new_arm_bonus", "new_arm_prior")

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        alpha: PerTrial = 1.0,
        lam: PerTrial = 1.0,
        kernel: Kernel = "torch",
        new_arm_bonus: float = 0.0,
        new_arm_prior: str = "zero",
        objective: str = "utility",
        cost_model: str = "price",
    ) -> None:
        super().__init__(num_trials, num_arms, dim, lam, objective, cost_model)
        self._per_trial("alpha", alpha, ge=0)
        self._init_new_arm_bonus(new_arm_bonus)
        self._init_new_arm_prior(new_arm_prior)
        self._auto = kernel == "auto"
        self.kernel = check_kernel(type(self).__name__, kernel)

    def _fused(self) -> bool:
        """Whether this call takes the fused kernel (``"auto"``: on the CPU only; never with
        a new-arm bonus, the mean prior or ``objective: quality_cost``)."""
        if self.new_arm_bonus or self.new_arm_prior != "zero" or self.per_request_rho:
            return False
        return self.kernel != "torch" and not (self._auto and self.a_inv.device.type != "cpu")

    def act(self, context: Context, generator: Source = None) -> Decision:
        """The arm with the largest upper confidence bound per context.

        Args:
            context: ``x [R, B, d]``.
            generator: draws for the random tie-breaks.

        Returns:
            One-hot ``probs [R, B, K]`` and ``action [R, B]``.
        """
        if self._fused() and context.available is None and not self._knows_prices(context):
            self._refuse_other_rho(context)
            return fused_act(self, context, generator)
        self._check_context(context)
        x = context.x.to(self.theta.dtype)
        scores = self.priced_scores(self._scores(x, context), context)
        scores = mask_scores(scores, context.available)
        action = argmax_random_ties(scores, generator)
        probs = one_hot_probs(action, self.num_arms, x.dtype)
        return Decision(probs=probs, action=action, scores=scores)

    def _scores(self, x: Tensor, context: Context | None = None) -> Tensor:
        """The upper confidence bounds ``[R, B, K]`` of ``x [R, B, d]`` (eager operators),
        with the new-arm bonus (arms never observed); with ``objective: quality_cost``,
        minus ``rho c_k`` (``context``'s trade-offs and prices; ``None``: the trials')."""
        scores = ridge_predict(self._theta_for_scores(), x)  # [R, B, K]
        if isinstance(self.alpha, Tensor) or self.alpha != 0:
            scores = scores + _scale(self.alpha, x) * ridge_width(self.a_inv, x)
        if context is not None or self.per_request_rho:
            scores = self._decision_values(scores, context or Context(x=x))
        return self._add_new_arm_bonus(scores)

    def _argmax_scores(self, context: Context, generator: Source) -> Tensor:
        """The bounds ``act`` computes with eager operators, masked, ``[R, B, K]``; where a
        fused kernel rounded them so that its arm is not among the tied ones,
        :meth:`routing_probs` gives that arm's one-hot vector."""
        x = context.x.to(self.theta.dtype)
        scores = self.priced_scores(self._scores(x, context), context)
        return mask_scores(scores, context.available)

    def update(
        self, context: Context, decision: Decision, feedback: Feedback, generator: Source = None
    ) -> dict[str, Tensor]:
        """Sherman–Morrison updates of the observed arms' ridge statistics.

        Args:
            context: ``x [R, B, d]``.
            decision: the decision of ``act``.
            feedback: ``reward [R, B, K]`` and ``observed [R, B, K]``.
            generator: unused.

        Returns:
            ``{}``.
        """
        if self._fused():
            feedback = self.reference_feedback(context, feedback)  # at the reference prices
            return fused_update(self, context, decision, feedback, generator)
        return super().update(context, decision, feedback, generator)


class FullFeedbackLinUCB(LinUCB):
    """LinUCB that observes every arm's reward each round (a full-information baseline).

    ``act`` asks for every arm's feedback (``Decision.observe`` all ``True``), so every
    arm's ridge model is updated each round; ``alpha = 0`` by default (greedy on the ridge
    prediction), as in the CABS experiments. ``objective`` and ``cost_model`` as for
    :class:`LinUCB`: with ``quality_cost`` every arm's model learns its score
    (``Feedback.score``) and the choice is ``argmax x^T theta_k - rho c_k``.

    Shapes:
        ``act``: ``x [R, B, d]`` -> one-hot ``probs [R, B, K]``, ``action [R, B]``,
        ``observe [R, B, K]`` (all ``True``).
    """

    feedback = "full"

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        alpha: PerTrial = 0.0,
        lam: PerTrial = 1.0,
        objective: str = "utility",
        cost_model: str = "price",
    ) -> None:
        super().__init__(
            num_trials, num_arms, dim, alpha=alpha, lam=lam, objective=objective,
            cost_model=cost_model,
        )  # fmt: skip

    def act(self, context: Context, generator: Source = None) -> Decision:
        """LinUCB's greedy decision (``alpha = 0``), asking to observe every arm."""
        decision = super().act(context, generator)
        observe = torch.ones_like(decision.probs, dtype=torch.bool)
        return Decision(probs=decision.probs, action=decision.action, observe=observe)

    def update(
        self, context: Context, decision: Decision, feedback: Feedback, generator: Source = None
    ) -> dict[str, Tensor]:
        """Every observed reward; while every arm sees every context the arms' inverse Gram
        matrices are equal, and one of them is updated for all (the same numbers as the
        per-arm update, ``K`` times less work).

        Args:
            context: ``x [R, B, d]``.
            decision: the decision of ``act``.
            feedback: ``reward [R, B, K]`` and ``observed [R, B, K]``.
            generator: unused.

        Returns:
            ``{}``.
        """
        if not self._gram_shared(context, feedback):
            return super().update(context, decision, feedback, generator)
        feedback = self.reference_feedback(context, feedback)  # at the reference prices
        self._check_context(context)
        self._check_feedback(context, feedback)
        x = context.x.to(self.theta.dtype)  # [R, 1, d]
        reward = self._learning_target(feedback)[:, 0].to(x.dtype)  # [R, K], every cell observed
        a_inv, theta = sherman_morrison_shared(self.a_inv[:, :1], self.theta, x, reward)
        self.a_inv.copy_(a_inv.expand_as(self.a_inv))  # in place: no new [R, K, d, d]
        self.theta = theta
        self.__dict__["_shared_stamp"] = (self.a_inv.data_ptr(), self.a_inv._version)
        self._tick(context)
        return {}

    def _gram_shared(self, context: Context, feedback: Feedback) -> bool:
        """One context per trial, every arm observed and the arms' ``A_k^{-1}`` equal (on
        the CPU: the host reads are free there; elsewhere the per-arm update runs)."""
        a_inv = self.a_inv
        if context.x.shape[1] != 1 or a_inv.device.type != "cpu" or feedback.only_played:
            return False
        if feedback.observed.shape != (self.num_trials, 1, self.num_arms):
            return False
        if not bool(feedback.observed.all()):
            return False
        if self.__dict__.get("_shared_stamp") == (a_inv.data_ptr(), a_inv._version):
            return True  # unchanged since the last shared update
        # once after a load, a per-arm update or a change from outside: check it
        return torch.equal(a_inv, a_inv[:, :1].expand_as(a_inv))


class LinTS(_PerTrialRidge):
    """Linear Thompson sampling (Agrawal & Goyal 2013): ``theta~ ~ N(theta_k, v^2 A_k^{-1})``.

    Only ``x^T theta~_k`` enters the argmax, and for one context it is distributed as
    ``N(x^T theta_k, v^2 x^T A_k^{-1} x)``; sampling that scalar per arm gives the same
    decision distribution as sampling ``theta~`` at ``O(K d^2)`` instead of the
    ``O(K d^3)`` of a Cholesky factor per arm. With ``B > 1`` contexts each context gets
    its own posterior draw.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d``.
        v: posterior scale (a number, or ``R`` per-trial values).
        lam: ridge regulariser (a number, or ``R`` per-trial values).
        new_arm_bonus: added to the draw of an arm never observed; 0 (the default) adds
            nothing.
        new_arm_prior: what an arm never observed predicts: ``"zero"`` (the default) or
            ``"mean"``, the mean ``theta`` of the trial's observed arms (its prior mean
            from then on), or ``"spread"``, as for :class:`LinUCB`.
        objective: ``"utility"`` (the default) or ``"quality_cost"``: the posterior is of
            the quality ``y`` (``Feedback.score``) and each arm's draw is one of
            ``y_k - rho c_k`` (the draw of ``y`` minus the request's ``rho`` times the
            known price; :mod:`torchroute.learners.objective`).
        cost_model: ``"price"`` (the default) or ``"ridge"``: the costs ``c_k`` of
            ``quality_cost``, as for :class:`LinUCB`.

    Defaults ``v = 1, lam = 1``: an untried arm's draw is ``N(0, v^2 ||x||^2 / lam)``, with
    standard deviation ``sqrt(2) ~ 1.41`` for unit-norm features plus a bias, so it beats
    a good arm's mean (``<= 1``) with probability ``>= 0.24`` each round. With the CABS
    ``lam = 10`` and ``v = 0.5`` the deviation is ``0.22`` and an untried arm almost never
    beats a model scoring 0.8.

    :meth:`routing_probs` estimates the arms' chances from further posterior draws.
    """

    per_trial_hparams = ("v", "lam")
    chosen_on_validation = ("new_arm_bonus", "new_arm_prior")

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        v: PerTrial = 1.0,
        lam: PerTrial = 1.0,
        new_arm_bonus: float = 0.0,
        new_arm_prior: str = "zero",
        objective: str = "utility",
        cost_model: str = "price",
    ) -> None:
        super().__init__(num_trials, num_arms, dim, lam, objective, cost_model)
        self._per_trial("v", v, ge=0)
        self._init_new_arm_bonus(new_arm_bonus)
        self._init_new_arm_prior(new_arm_prior)

    def act(self, context: Context, generator: Source = None) -> Decision:
        """The argmax of one posterior draw per arm: ``probs [R, B, K]``, ``action [R, B]``."""
        self._check_context(context)
        x = context.x.to(self.theta.dtype)
        mean = ridge_predict(self._theta_for_scores(), x)  # [R, B, K]
        noise = normal(generator, mean.shape, dtype=mean.dtype, device=mean.device)
        scores = mean + _scale(self.v, x) * ridge_width(self.a_inv, x) * noise
        scores = self._add_new_arm_bonus(self._decision_values(scores, context))
        scores = self.priced_scores(scores, context)
        action = argmax_random_ties(mask_scores(scores, context.available), generator)
        return Decision(probs=one_hot_probs(action, self.num_arms, x.dtype), action=action)

    def routing_probs(
        self,
        context: Context,
        decision: Decision,
        generator: Source = None,
        draws: int | None = None,
    ) -> Tensor:
        """The chance of each arm to win a posterior draw, from ``M = draws`` more draws.

        ``(count + 1[chosen]) / (M + 1)``, ``[R, B, K]`` float64: never 0 for the chosen
        arm, a resolution of ``1 / (M + 1)``; averaged over decisions it is the rule's
        distribution. One draw of ``[M, R, B, K]`` normals from ``generator``, no ``act``
        call (``draws``: :attr:`routing_draws` when ``None``).
        """
        self._check_context(context)
        m = self.routing_draws if draws is None else int(draws)
        check_number(type(self).__name__, "draws", m, ge=1, integer=True)
        x = context.x.to(self.theta.dtype)
        mean = ridge_predict(self._theta_for_scores(), x)  # [R, B, K]
        if self.per_request_rho:  # the draws of y - rho c
            mean = self._decision_values(mean, context)
        mean = self.priced_scores(mean, context)
        width = _scale(self.v, x) * ridge_width(self.a_inv, x)  # [R, B, K]
        noise = normal(generator, (m, *mean.shape), dtype=mean.dtype, device=mean.device)
        picks = (mean + width * noise).argmax(-1)  # [M, R, B]
        counts = torch.nn.functional.one_hot(picks, self.num_arms).double().sum(0)
        chosen = torch.nn.functional.one_hot(decision.action, self.num_arms).double()
        return (counts + chosen) / (m + 1)


class EpsilonGreedy(_PerTrialRidge):
    """Epsilon-greedy on the ridge prediction with a decaying exploration rate.

    ``eps_t = max(eps_min, eps_0 / (1 + decay t))``; with probability ``eps_t`` a uniform
    arm, else the greedy one.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d``.
        eps0: initial exploration rate (the CABS grid is ``{1, .5, .2, .1}``; a number,
            or ``R`` per-trial values).
        decay: decay rate per round.
        eps_min: floor of the exploration rate.
        eps_floor: minimum probability of every arm (CABS Assumption 4.5).
        lam: ridge regulariser (1 by default, as for every ridge learner; the uniform
            share ``eps_t / K`` explores whatever its value; a number, or ``R`` values).
        new_arm_bonus: added to the ridge prediction of an arm never observed before the
            greedy choice (a model that has just arrived is then the greedy arm until it
            is observed); 0 (the default) adds nothing and no state.
        objective: ``"utility"`` (the default: the ridge models learn each trial's utility)
            or ``"quality_cost"``: they learn the quality ``Feedback.score`` and the greedy
            arm is the argmax of ``x^T theta_k - rho c_k`` with the request's ``rho``
            (``Context.rho``, else the trial's; :mod:`torchroute.learners.objective`).
        cost_model: the costs ``c_k`` of ``quality_cost``: ``"price"`` (the default) or
            ``"ridge"`` (:mod:`torchroute.learners.objective`).

    Shapes:
        ``act``: ``x [R, B, d]`` -> ``probs [R, B, K]``, ``action [R, B]``.
    """

    learns_only_observed = False  # its exploration rate decays with its rounds count

    per_trial_hparams = ("eps0", "lam")

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        eps0: PerTrial = 0.5,
        decay: float = 1e-3,
        eps_min: float = 0.01,
        eps_floor: float = 1e-3,
        lam: PerTrial = 1.0,
        new_arm_bonus: float = 0.0,
        objective: str = "utility",
        cost_model: str = "price",
    ) -> None:
        super().__init__(num_trials, num_arms, dim, lam, objective, cost_model)
        name = type(self).__name__
        self._init_new_arm_bonus(new_arm_bonus)
        self._per_trial("eps0", eps0, ge=0, le=1)
        smallest = float(self.eps0.min()) if isinstance(self.eps0, Tensor) else self.eps0
        check_number(name, "eps_min", eps_min, ge=0, le=smallest)
        check_number(name, "decay", decay, ge=0)
        check_number(name, "eps_floor", eps_floor, ge=0, le=1.0 / num_arms)
        self.decay, self.eps_min, self.eps_floor = decay, eps_min, eps_floor

    def act(self, context: Context, generator: Source = None) -> Decision:
        """Greedy with probability ``1 - eps_t``, else uniform.

        Returns:
            ``probs [R, B, K]`` and ``action [R, B]``.
        """
        self._check_context(context)
        x = context.x.to(self.theta.dtype)
        greedy = argmax_random_ties(self._greedy_values(context), generator)  # [R, B]
        eps = self._eps(x.dtype)  # [R, 1, 1]
        probs = (1 - eps) * one_hot_probs(greedy, self.num_arms, x.dtype) + eps / self.num_arms
        probs = probability_floor(probs, self.eps_floor)
        return Decision(probs=probs, action=sample_categorical(probs, generator))

    def _greedy_values(self, context: Context) -> Tensor:
        """The masked values ``[R, B, K]`` the greedy arm is the argmax of: the ridge
        prediction (``utility``) or ``prediction - rho c_k`` (``quality_cost``), plus the
        new-arm bonus, at this round's prices."""
        predicted = ridge_predict(self.theta, context.x.to(self.theta.dtype))
        predicted = self._decision_values(predicted, context)
        predicted = self.priced_scores(self._add_new_arm_bonus(predicted), context)
        return mask_scores(predicted, context.available)

    def _eps(self, dtype: torch.dtype) -> Tensor:
        """This round's exploration rate ``eps_t`` per trial, ``[R, 1, 1]``."""
        # number / tensor is reciprocal() * number in torch: written so, per-trial values
        # give the bits of a float eps0.
        eps0 = self.eps0 if not isinstance(self.eps0, Tensor) else self.eps0.to(dtype)
        denom = 1 + self.decay * self.rounds.to(dtype)  # [R]
        return (denom.reciprocal() * eps0).clamp_min(self.eps_min)[:, None, None]

    def routing_probs(
        self,
        context: Context,
        decision: Decision,
        generator: Source = None,
        draws: int | None = None,
    ) -> Tensor:
        """Exact: ``act``'s floored mixture averaged over the greedy arms tied at the top,
        ``[R, B, K]`` float64 (``generator`` and ``draws`` unused).

        Every one-hot mixture has the same smallest entry ``eps_t / K``, so the floor mixes
        each the same way and the average is the mixture of the tie distribution.
        """
        self._check_context(context)
        ties = tie_probs(self._greedy_values(context))  # [R, B, K]
        eps = self._eps(torch.float64)[..., None]  # [R, 1, 1, 1]
        eye = torch.eye(self.num_arms, dtype=torch.float64, device=ties.device)
        per_arm = probability_floor((1 - eps) * eye + eps / self.num_arms, self.eps_floor)
        return (ties[..., None] * per_arm).sum(-2)  # [R, B, K]: sum_j ties_j p(. | j)


class SquareCB(_PerTrialRidge):
    """SquareCB (Foster & Rakhlin 2020) on a ridge regression solver (CABS Algorithm 3).

    ``p = IGW(r^; gamma, mu = K)`` (:func:`~torchroute.functional.squarecb.squarecb_probs`),
    then mixed with the uniform distribution so that ``p_k >= eps_floor``.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d``.
        gamma: exploitation strength (4 in the CABS experiments).
        mu: IGW constant, ``K`` when ``None``.
        eps_floor: minimum probability (CABS Assumption 4.5).
        lam: ridge regulariser (1 by default, as for every ridge learner; IGW gives an
            untried arm, predicted 0, probability ``1 / (mu + gamma r^_b) >= 1 / (K + gamma)``;
            a number, or ``R`` per-trial values).
        new_arm_bonus: added to the ridge prediction of an arm never observed before the
            inverse-gap weighting (a model that has just arrived gets more of the mass
            until it is observed); 0 (the default) adds nothing and no state.
        objective: ``"utility"`` (the default) or ``"quality_cost"``: the ridge models
            predict the quality ``y^`` (``Feedback.score``) and the weighting is over
            ``y^_k - rho c_k`` (the request's ``rho``, the known prices;
            :mod:`torchroute.learners.objective`). Those values are not clipped to
            ``[0, 1]``: a gap above 1 (a model dearer by more than ``1 / rho`` per query
            than one of equal quality) gets less than ``1 / (mu + gamma)``, as it should
            (it loses more than any utility gap can); ``gamma`` keeps its meaning in
            utility units.
        cost_model: ``"price"`` (the default) or ``"ridge"``: the costs ``c_k`` of
            ``quality_cost``, as for :class:`LinUCB`.
    """

    samples_from_probs = True

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        gamma: float = 4.0,
        mu: float | None = None,
        eps_floor: float = 1e-3,
        lam: PerTrial = 1.0,
        new_arm_bonus: float = 0.0,
        objective: str = "utility",
        cost_model: str = "price",
    ) -> None:
        super().__init__(num_trials, num_arms, dim, lam, objective, cost_model)
        check_igw(type(self).__name__, num_arms, gamma, mu, eps_floor)
        self._init_new_arm_bonus(new_arm_bonus)
        self.gamma, self.mu, self.eps_floor = gamma, mu, eps_floor

    def act(self, context: Context, generator: Source = None) -> Decision:
        """Inverse-gap weighting of the ridge predictions, floored.

        Returns:
            ``probs [R, B, K]`` and ``action [R, B]``.
        """
        self._check_context(context)
        x = context.x.to(self.theta.dtype)
        predicted = self._decision_values(ridge_predict(self.theta, x), context)
        predicted = self.priced_scores(self._add_new_arm_bonus(predicted), context)
        probs = squarecb_probs(predicted, self.gamma, self.mu)
        probs = probability_floor(probs, self.eps_floor)
        return Decision(probs=probs, action=sample_categorical(probs, generator))
