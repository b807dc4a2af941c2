"""``static_refit``: a static router refitted with a scenario's change applied (a yardstick).

What would retraining after the change give? :class:`StaticRefit` plays a static router
(``base``: an anchor config, default ``mlp_router``) fitted on the train split as every
static router is, until the scenario's change round; from that round on it plays the same
router refitted on the train split *with the change applied* (the new model's train rows
visible, drifted scores shifted as the drift event shifts them, costs at the new price;
its hyper-parameters chosen on the validation split changed the same way). The run hands
it the changed problems (:class:`~torchroute.envs.after_change.AfterChange`, one per group
of trials that meet the same change) through its ``after_change`` argument; without a
scenario there is none and it is its base router throughout.

It is a reference (``role = "reference"``): it knows what no deployed router knows (the
world after the change before it is observed), so reports treat it as the upper reference
of the static side, never as a competitor; the leaderboard's *change loss* is its utility
after the change minus the baseline's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from torchroute.functional.availability import mask_scores
from torchroute.functional.random import Source
from torchroute.functional.sampling import argmax_random_ties, one_hot_probs
from torchroute.learners.base import ArgmaxRouting, FixedPolicy
from torchroute.learners.on_base_router import packaged_configs_of, resolve_base
from torchroute.learners.static import _StaticRouter
from torchroute.types import Context, Decision, Problem

if TYPE_CHECKING:
    from torchroute.envs.after_change import AfterChange


def build_static(base: Any, problem: Problem, who: str) -> _StaticRouter:
    """The static router ``base`` names, built for ``problem``.

    ``base``: the name of a packaged learner config (``"mlp_router"``, ``"knn_val"``,
    ``"logistic_router"``, ``"mf_router"``, ``"best_arm_classifier"``), a config node (a
    mapping with a ``_target_``, such as the run's own anchor ``${learners.mlp}``) or the
    factory Hydra made of one, or a built router. Raises ``ValueError`` (one line naming
    ``base``) otherwise.
    """
    router = resolve_base(base, problem, who)
    if not isinstance(router, _StaticRouter):
        names = packaged_configs_of(_StaticRouter)
        raise ValueError(f"{who}: base must be a static router config ({names}), got {base!r}")
    return router


class StaticRefit(ArgmaxRouting, FixedPolicy):
    """A static router before the change, the same router refitted after it from then on.

    Args:
        before: the router fitted on the problem's train split (``R`` trials).
        after: per change group, ``(trials [n_g] long, the router refitted for those
            trials on the changed splits)``; the groups cover the ``R`` trials once.
            Empty: no change, ``before`` is played throughout.
        change: the first round played by the refitted routers (``0``-based; ignored
            without ``after``).

    Buffers: ``played [R]`` (contexts acted on, in the state_dict: the round counter that
    decides the switch, so a resumed run switches at the same round).

    Shapes:
        ``act``: ``Context(x [R, B, d])`` -> one-hot ``probs [R, B, K]``, ``action [R, B]``
        and ``scores [R, B, K]`` (the values of the router playing this round).
    """

    role = "reference"  # a yardstick, not a static router to beat (FixedPolicy: no learning)
    refits_after_change = True
    #: before the change its router reads ``Context.prices``; after it, the refitted
    #: routers were fitted at the new prices (their contexts carry none, so not twice)
    reads_prices = True
    #: ``base`` given as a list: the router chosen on validation (with the run option
    #: ``choose_on_validation: {as_baseline: [base]}``, the regime's baseline router)
    chosen_on_validation = ("base",)

    def __init__(
        self,
        before: _StaticRouter,
        after: Sequence[tuple[Tensor, _StaticRouter]] = (),
        change: int = 0,
    ) -> None:
        super().__init__(before.num_trials, before.num_arms)
        covered = torch.cat([t.cpu() for t, _ in after]) if after else None
        if covered is not None and not torch.equal(
            covered.sort().values, torch.arange(before.num_trials)
        ):
            raise ValueError("StaticRefit: the after groups must cover each trial once")
        self.dim = before.dim
        self.before = before
        self.after = nn.ModuleList([router for _, router in after])
        for i, (trials, _) in enumerate(after):
            self.register_buffer(f"trials_{i}", trials.long().clone(), persistent=False)
        self.change = int(change)
        self.register_buffer("played", torch.zeros(before.num_trials, dtype=torch.long))

    @classmethod
    def from_problem(
        cls,
        problem: Problem,
        base: Any = "mlp_router",
        after_change: AfterChange | None = None,
    ) -> StaticRefit:
        """``base`` fitted on ``problem`` and, per group of ``after_change`` (the run
        passes it for an env with a scenario), on that group's changed problem."""
        who = cls.__name__
        before = build_static(base, problem, who)
        if after_change is None:
            return cls(before)
        after = [(t, build_static(base, part, who)) for t, part in after_change.groups]
        return cls(before, after, after_change.change)

    def values(self, context: Context) -> Tensor:
        """``[R, B, K]``: the refitted routers' values for trials past the change (their
        :meth:`~torchroute.learners.static._StaticRouter.values`), ``before``'s for the
        others; unavailable arms not masked."""
        value = self.before.values(context)
        if not len(self.after):
            return value
        refit = value.clone()
        for i, router in enumerate(self.after):
            trials = getattr(self, f"trials_{i}")
            part = Context(
                x=context.x[trials],
                index=None if context.index is None else context.index[trials],
                embedding=None if context.embedding is None else context.embedding[trials],
            )
            refit = refit.index_copy(0, trials, router.values(part).to(refit.dtype))
        switched = (self.played >= self.change)[:, None, None]  # [R, 1, 1]
        return torch.where(switched, refit, value)

    def _argmax_scores(self, context: Context, generator: Source) -> Tensor:
        """The masked values the next :meth:`act` would maximise, ``[R, B, K]``."""
        return mask_scores(self.values(context), context.available)

    def act(self, context: Context, generator: Source = None) -> Decision:
        """The argmax of :meth:`values` over the available arms (random tie-break); counts
        the contexts (``played``)."""
        self._check_context(context)
        scores = self._argmax_scores(context, generator)
        action = argmax_random_ties(scores, generator)
        self.played.add_(context.batch_size)
        probs = one_hot_probs(action, self.num_arms, context.x.dtype)
        return Decision(probs=probs, action=action, scores=scores)


__all__ = ["StaticRefit", "build_static"]
