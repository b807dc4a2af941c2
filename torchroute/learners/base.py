"""The learner interface: ``act`` and ``update``, state in buffers with a leading trial dim.

A learner also says what it is and can do, in class attributes read by the runner, the
router, the reports and the device check (no list of classes is kept elsewhere):
:attr:`Learner.feedback`, :attr:`Learner.protocol`, :attr:`Learner.device_tolerance`,
:attr:`Learner.reads_groups`, :attr:`Learner.samples_from_probs`,
:attr:`Learner.learns_online`, :attr:`Learner.role`, :attr:`Learner.family`,
:attr:`Learner.per_request_rho`, :attr:`Learner.warm_target`,
:attr:`Learner.chosen_on_validation` and :attr:`Learner.reads_prices` (or
:attr:`Learner.prices_unread`);
:meth:`Learner.routing_probs` gives the probability of every arm under the rule ``act``
applies, and :meth:`Learner.warm_start` takes rows observed before round 1.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from torchroute.buildable import buildable
from torchroute.checks import check_number
from torchroute.errors import InputError
from torchroute.functional.availability import mask_scores, restrict_probs
from torchroute.functional.random import Source
from torchroute.functional.sampling import sample_categorical, tie_probs
from torchroute.learners.known_prices import KnownPrices, keeping_prices
from torchroute.types import Context, Decision, Feedback, Problem

if TYPE_CHECKING:
    from torchroute.learners.warm_options import WarmStart
    from torchroute.learners.warm_start import WarmRows


@buildable
class Learner(KnownPrices, nn.Module):
    """Base class of every online learner.

    A learner holds ``R`` independent trials; every buffer starts with that dimension, so
    ``.to(device)``, ``state_dict()`` and ``load_state_dict()`` move, save and restore a
    whole batched run. Subclasses implement :meth:`act` and :meth:`update`; neither
    synchronises with the host. Configs build learners with :meth:`from_problem`.

    Randomness comes only from the ``generator`` argument: a ``torch.Generator`` shared by
    all trials (``None``: torch's global one) or per-trial streams
    (:class:`~torchroute.functional.random.TrialRNG`). Every draw goes through the entry
    points of :mod:`torchroute.functional.random` (``uniform``, ``normal``, ``gamma``,
    ``integers``) or :func:`~torchroute.functional.sampling.sample_categorical`, with a
    leading ``R`` dimension and a number of draw calls per round that does not depend on
    the data, so that with per-trial streams a trial's numbers do not depend on the other
    trials.

    Arms that do not exist this round (``Context.available``, a scenario's new model before
    it arrives) are never played: every subclass's ``act`` is wrapped so that, when the
    context carries the mask, the decision is restricted to the available arms
    (:func:`restrict_decision`: probability exactly 0
    on the others, renormalised, an unavailable action redrawn). A learner that picks an
    argmax masks its scores itself (:func:`~torchroute.functional.availability.mask_scores`)
    so that it plays its best available arm; the wrapper then changes nothing but makes one
    extra draw. Without the mask (the default) ``act`` runs unwrapped, bit for bit.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.

    Example:
        A learner that always plays arm 0::

            class FirstArm(Learner):
                def act(self, context, generator=None):
                    action = context.x.new_zeros(context.x.shape[:2], dtype=torch.long)
                    return Decision(one_hot_probs(action, self.num_arms, context.x.dtype), action)

                def update(self, context, decision, feedback, generator=None):
                    self._tick(context)
                    return {}

            learner = FirstArm.from_problem(env.problem())
    """

    #: the size of ``Context.x`` the learner reads (``None``: it does not read ``x``)
    dim: int | None = None
    #: the feedback it learns from: ``"bandit"`` (the played arm), ``"full"`` (every arm's
    #: reward, asked for with ``Decision.observe``) or ``"graph"`` (some arms besides the
    #: played one). A router, which sees the routed model only, warns for ``"full"``.
    feedback: ClassVar[Literal["bandit", "full", "graph"]] = "bandit"
    #: the round protocol it plays: ``"single"`` (one arm per query), ``"subset"`` (a
    #: multiset of arms, :class:`~torchroute.learners.SubsetLearner`) or ``"low_rank"``
    #: (a softmax policy over experts); the device check runs it on an env of that protocol
    protocol: ClassVar[Literal["single", "subset", "low_rank"]] = "single"
    #: the tolerance of its device-vs-CPU comparison in the device check: ``"exact"``
    #: (closed-form updates), ``"neural"`` (MLPs trained with Adam), ``"solver"``
    #: (iterative solvers) or ``"ips"`` (targets divided by solver probabilities)
    device_tolerance: ClassVar[Literal["exact", "neural", "solver", "ips"]] = "exact"
    #: whether ``act`` reads each query's group (a one-hot context a router must be sent)
    reads_groups: ClassVar[bool] = False
    #: whether ``act`` draws the action from the ``probs`` it returns: then those are the
    #: exact routing probabilities (:meth:`routing_probs` returns them)
    samples_from_probs: ClassVar[bool] = False
    #: Monte-Carlo draws of the default :meth:`routing_probs`
    routing_draws: ClassVar[int] = 200
    #: whether ``update`` changes what ``act`` does; ``False`` for a static router (fixed,
    #: or fitted once on the train split), which reports compare online learners against
    learns_online: ClassVar[bool] = True
    #: whether ``update`` learns only from ``feedback.observed``: a trial whose observed
    #: mask is all ``False`` keeps the state that decides (its ``rounds`` count aside), so
    #: a decision without feedback can be masked out instead of undone (late or partial
    #: feedback, :class:`torchroute.feedback_queue.PendingFeedback`)
    learns_only_observed: ClassVar[bool] = False
    #: what reports make of it: ``"online"`` (it learns from the rounds), ``"static"``
    #: (fixed, or fitted once on the train split: what online learners are compared
    #: against) or ``"reference"`` (a yardstick every learner is compared with, such as the
    #: uniform-random router); found from a config node by
    #: :func:`torchroute.run.classes.learner_class`
    role: ClassVar[Literal["online", "static", "reference"]] = "online"
    #: whether it is refitted with a scenario's change applied (a reference of what
    #: retraining would give, :class:`~torchroute.learners.refit.StaticRefit`): the
    #: leaderboard measures the change loss against it, never ranks it
    refits_after_change: ClassVar[bool] = False
    #: the family the report's opening groups it in (``"baselines"`` unless it says)
    family: ClassVar[str] = "baselines"
    #: whether it starts from what the train split teaches whatever its config says (an
    #: online learner built on a router fitted on train): reports count it among the warm
    #: online learners, as one whose config sets ``warm_start``
    starts_warm: ClassVar[bool] = False
    # reads_prices / prices_unread: what it does with Context.prices (KnownPrices)
    #: whether ``act`` decides with each request's trade-off ``Context.rho [R, B]`` when the
    #: context carries one (else each trial's ``Problem.rho``); a learner that cannot (it
    #: learnt or fitted the utility at its trial's rho) is refused a stream whose requests
    #: carry other rhos. The ridge learners say it per instance (``objective``).
    per_request_rho: ClassVar[bool] = False
    #: whether one built for a spend target (``Problem.budget``: a paced trial) may decide
    #: otherwise than one built for its starting rho alone (a static score router chooses
    #: its candidate for the budget; a learner on such a router inherits that): a budget
    #: run replays the validation split at each grid rho once per budget for it, once for
    #: all budgets otherwise
    chooses_for_budget: ClassVar[bool] = False
    #: what its warm-start rows hold (:func:`torchroute.run.warm.warm_rows`): each trial's
    #: ``"utility"``, or the quality ``"score"`` (``objective: quality_cost``)
    warm_target: ClassVar[str] = "utility"
    #: the config keys that exist for a changing world (a discount, a window, a new-model
    #: bonus, a warm weight, ...): given as a list in a run's learner config, each trial
    #: gets the value chosen on the validation split with the run's scenario replayed on
    #: it (:mod:`torchroute.run.choose_on_validation`); none by default
    chosen_on_validation: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "act" in cls.__dict__:
            cls.act = _respecting_availability(cls.__dict__["act"])  # type: ignore[method-assign]
        made = cls.__dict__.get("from_problem")
        if isinstance(made, classmethod):
            cls.from_problem = classmethod(keeping_prices(made.__func__))  # type: ignore[method-assign]

    def __init__(self, num_trials: int, num_arms: int) -> None:
        super().__init__()
        name = type(self).__name__
        check_number(name, "num_trials", num_trials, ge=1, integer=True)
        check_number(name, "num_arms", num_arms, ge=2, integer=True)
        self.num_trials = int(num_trials)
        self.num_arms = int(num_arms)
        # Round counter per trial; doubles as the device/dtype anchor (no self.device).
        self.register_buffer("rounds", torch.zeros(num_trials, dtype=torch.long))

    @classmethod
    def from_problem(cls, problem: Problem, **hparams: Any) -> Learner:
        """Build the learner for ``problem`` with hyper-parameters ``hparams``.

        The default passes ``R`` and ``K``; learners that need more of the problem
        (the feature size, rho, the train split) override it.
        """
        return cls(problem.num_trials, problem.num_arms, **hparams)

    @classmethod
    def check_options(cls, **hparams: Any) -> None:
        """Checks of a config's hyper-parameters that need no problem (none by default).

        A run calls it with the learner node's values before it builds the env or
        pre-trains an oracle, so a bad option fails before anything is written; a learner
        whose constructor is slow to reach (an oracle to pre-train first) overrides it.
        Raises ``ValueError`` naming the option.
        """

    @classmethod
    def decides_per_request(cls, **hparams: Any) -> bool:
        """Whether a learner built with ``hparams`` has :attr:`per_request_rho` (read from
        a config node before the learner is built; the class attribute by default)."""
        return bool(cls.per_request_rho)

    def check_problem(self, problem: Problem, who: str = "the environment") -> None:
        """A one-line error when this learner was built for another ``R``, ``K`` or ``d``."""
        name = type(self).__name__
        for what, mine, theirs in (
            ("R (trials)", self.num_trials, problem.num_trials),
            ("K (arms)", self.num_arms, problem.num_arms),
            ("d (features)", self.dim, problem.dim if self.dim is not None else None),
        ):
            if mine != theirs:
                raise InputError(f"{name} was built for {what}={mine} but {who} has {theirs}")

    def act(self, context: Context, generator: Source = None) -> Decision:
        """Choose arms: ``context.x [R, B, d]`` -> ``Decision(probs [R, B, K], action [R, B])``.

        ``generator``: a ``torch.Generator``, ``None`` or a ``TrialRNG`` (see the class).
        """
        raise NotImplementedError

    def update(
        self,
        context: Context,
        decision: Decision,
        feedback: Feedback,
        generator: Source = None,
    ) -> dict[str, Tensor]:
        """Learn from ``feedback`` (``[R, B, K]`` rewards and mask); returns per-trial metrics.

        ``generator`` is the run's source of randomness (mini-batch draws and the like): a
        ``torch.Generator`` or per-trial streams, as for :meth:`act`.
        """
        raise NotImplementedError

    def warm_start(self, rows: WarmRows, problem: Problem, warm: WarmStart) -> None:
        """Take ``rows`` (:class:`~torchroute.learners.warm_start.WarmRows`: ``x [n, d]``,
        ``target [R, n, K]``, ``weight [n, K]``) as observations before round 1, in place.

        The default replays them once through :meth:`update` (full feedback, chunks of 64
        contexts); a learner with a closed form overrides it. ``problem`` is the one the
        learner was built for (its ``hidden_arms`` take no rows, its ``validation`` split
        chooses among several ``warm.weights`` or ``warm.epochs`` where a learner can).
        The caller resets the round counters afterwards. Raises ``ValueError`` for options
        the learner cannot take.
        """
        from torchroute.learners.warm_start import replay_through_update

        if warm.chooses:
            raise ValueError(
                f"{type(self).__name__} takes its warm start through its own update: give "
                "one warm_weight (several are chosen on validation for ridge and neural models)"
            )
        replay_through_update(self, problem, rows)

    def result_columns(self) -> dict[str, Tensor]:
        """Per-trial values ``{name: [R]}`` written once into ``results.csv`` at the end of a
        run (a static router's ``val_utility``, say); none by default."""
        return {}

    def routing_probs(
        self,
        context: Context,
        decision: Decision,
        generator: Source = None,
        draws: int | None = None,
    ) -> Tensor:
        """The probability of every arm under the rule ``act`` applied to ``context``.

        ``Decision.probs`` is that distribution only when ``act`` samples the action from it
        (:attr:`samples_from_probs`); an argmax rule reports a one-hot vector although it
        breaks ties at random. The default is exact for a sampling learner and otherwise a
        Monte-Carlo estimate: ``draws`` further ``act`` calls on the same contexts (default
        :attr:`routing_draws` = 200) plus the decision taken,
        ``(count + 1[chosen]) / (draws + 1)`` (never 0 for the chosen arm; a rule that does
        not depend on the generator gets exactly 1). Learners that know their distribution
        in closed form override it. The state is only read.

        Args:
            context: ``x [R, B, d]`` as given to ``act``.
            decision: what ``act`` returned (``probs [R, B, K]``, ``action [R, B]``).
            generator: the source of any draws (not the one ``act`` used).
            draws: Monte-Carlo draws (``None``: :attr:`routing_draws`).

        Returns:
            ``probs [R, B, K]`` float64, each row summing to 1.
        """
        if self.samples_from_probs:
            return decision.probs.double()
        m = self.routing_draws if draws is None else int(draws)
        check_number(type(self).__name__, "draws", m, ge=1, integer=True)
        r, b = context.x.shape[:2]

        def repeat(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.repeat(1, m, *([1] * (t.dim() - 2)))

        many = Context(
            x=repeat(context.x),
            index=repeat(context.index),
            embedding=repeat(context.embedding),
            available=repeat(context.available),
            prices=repeat(context.prices),
            rho=repeat(context.rho),
        )
        with torch.no_grad():
            picks = self.act(many, generator).action.view(r, m, b)  # [R, M, B]
        counts = torch.nn.functional.one_hot(picks, self.num_arms).double().sum(1)  # [R, B, K]
        chosen = torch.nn.functional.one_hot(decision.action, self.num_arms).double()
        return (counts + chosen) / (m + 1)

    def _check_context(self, context: Context) -> None:
        if context.num_trials != self.num_trials:
            raise InputError(
                f"{type(self).__name__} holds {self.num_trials} trials but the context has "
                f"{context.num_trials} (Context.x is [R, B, d])"
            )
        if self.dim is not None and context.x.shape[-1] != self.dim:
            raise InputError(
                f"{type(self).__name__} was built for d={self.dim} features but the context "
                f"has d={context.x.shape[-1]}"
            )

    def _check_feedback(self, context: Context, feedback: Feedback) -> None:
        expected = (*context.x.shape[:2], self.num_arms)
        if tuple(feedback.reward.shape) != expected:
            raise InputError(
                f"{type(self).__name__} expects feedback [R, B, K] = {expected}, got "
                f"{tuple(feedback.reward.shape)}"
            )

    def _tick(self, context: Context) -> None:
        self.rounds.add_(context.batch_size)  # in place: no Module.__setattr__ per round


# the base's own factory keeps the prices too (subclasses' are wrapped as they are defined)
Learner.from_problem = classmethod(keeping_prices(Learner.__dict__["from_problem"].__func__))  # type: ignore[method-assign]


def _respecting_availability(act: Callable[..., Decision]) -> Callable[..., Decision]:
    """``act`` restricted to ``context.available`` (once, however deep ``super().act`` goes)."""

    @functools.wraps(act)
    def wrapped(self: Learner, context: Context, generator: Source = None) -> Decision:
        if context.available is None or self.__dict__.get("_restricting", False):
            return act(self, context, generator)
        self.__dict__["_restricting"] = True
        try:
            decision = act(self, context, generator)
        finally:
            self.__dict__["_restricting"] = False
        if decision.is_subset:
            return decision
        return restrict_decision(decision, context.available, generator)

    return wrapped


class ArgmaxRouting(Learner):
    """A learner whose ``act`` plays the argmax of its scores with random tie-breaks:
    :meth:`routing_probs` in closed form, from the scores ``act`` reported.

    A subclass defines :meth:`_argmax_scores` and returns those scores in
    ``Decision.scores``; put it first among the bases (``class L(ArgmaxRouting, Base)``).
    """

    def routing_probs(
        self,
        context: Context,
        decision: Decision,
        generator: Source = None,
        draws: int | None = None,
    ) -> Tensor:
        """Exact: uniform over the arms tied at the top score, ``[R, B, K]`` float64.

        The scores are ``Decision.scores``, else recomputed by :meth:`_argmax_scores`; a row
        whose action is not among the tied arms (another kernel rounded its scores) is that
        action's one-hot vector. ``draws`` is unused.
        """
        self._check_context(context)
        scores = decision.scores
        if scores is None:
            scores = self._argmax_scores(context, generator)
        return tie_probs(scores, decision.action)

    def _argmax_scores(self, context: Context, generator: Source) -> Tensor:
        """The masked scores ``[R, B, K]`` whose argmax ``act`` plays on ``x [R, B, d]``."""
        raise NotImplementedError


class FixedPolicy(Learner):
    """A learner that does not learn online: ``update`` only validates and counts rounds."""

    learns_online = False
    role = "static"
    learns_only_observed = True  # update changes nothing that decides (rounds aside)

    def update(
        self,
        context: Context,
        decision: Decision,
        feedback: Feedback,
        generator: Source = None,
    ) -> dict[str, Tensor]:
        """Validate the feedback and count the round; nothing is learnt. Returns ``{}``."""
        self._check_context(context)
        self._check_feedback(context, feedback)
        self._tick(context)
        return {}


def restrict_decision(decision: Decision, available: Tensor, generator: Source = None) -> Decision:
    """``decision`` with no mass and no action on an unavailable arm.

    ``probs`` becomes :func:`restrict_probs`; an action on an unavailable arm is redrawn
    from those probabilities (an available action is kept, so the action is distributed
    as the restricted ``probs``: ``p_k + (1 - S) p_k / S = p_k / S``). One draw is made
    every call, whatever the actions, so the number of draws does not depend on the data.
    ``observe`` loses the unavailable arms, and ``scores`` (an argmax rule's) get them
    masked. Shapes: ``probs, available [R, B, K]``, ``action [R, B]``.
    """
    probs = restrict_probs(decision.probs, available)
    redraw = sample_categorical(probs, generator)  # [R, B]
    playable = available.gather(-1, decision.action[..., None])[..., 0]
    action = torch.where(playable, decision.action, redraw)
    observe = None if decision.observe is None else decision.observe & available
    scores = None if decision.scores is None else mask_scores(decision.scores, available)
    return Decision(probs=probs, action=action, observe=observe, scores=scores)
