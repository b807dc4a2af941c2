"""A run's warm start: the rows of a learner's ``warm_start`` source handed to the learner.

The options are the :class:`~torchroute.learners.warm_options.WarmStart` of the learner's
config node; the rows are the train split or a decision log, read here; what the learner
does with them is its own :meth:`~torchroute.learners.Learner.warm_start`. Imported only
when a learner warm-starts.
"""

from __future__ import annotations

from torchroute.data.decisions import load_decisions
from torchroute.learners.base import Learner
from torchroute.learners.warm_options import WarmStart
from torchroute.learners.warm_start import WarmRows, logged_rows, train_rows
from torchroute.types import Problem


def warm_rows(problem: Problem, warm: WarmStart, who: str, target: str = "utility") -> WarmRows:
    """The rows of ``warm.source`` (``train`` or a decision log path) for ``problem``: each
    trial's utilities, or the scores (``target="score"``, a learner's
    :attr:`~torchroute.learners.Learner.warm_target`)."""
    if warm.source == "train":
        return train_rows(problem, who, target)
    assert warm.source is not None
    log = load_decisions(warm.source, arms=list(problem.arm_names))
    return logged_rows(problem, log, warm.clip, who, warm.source, target)


def apply_warm_start(learner: Learner, problem: Problem, warm: WarmStart, who: str) -> Learner:
    """Warm ``learner`` (built for ``problem``) in place as ``warm`` says; returns it.

    Its round counters (and those of the learners it holds) are reset to 0 afterwards.
    Raises ``ValueError`` (naming ``who``) for a learner that does not learn online
    (:attr:`Learner.learns_online`), a missing train or validation split, or an unusable
    decision log.
    """
    if warm.source is None:
        return learner
    if not learner.learns_online:
        raise ValueError(
            f"{who}.warm_start applies to online learners; {type(learner).__name__} does not "
            "learn online (a static router is fitted on the train split already)"
        )
    learner.warm_start(warm_rows(problem, warm, who, learner.warm_target), problem, warm)
    for module in learner.modules():
        if isinstance(module, Learner):
            module.rounds.zero_()
    return learner


__all__ = ["apply_warm_start", "warm_rows"]
