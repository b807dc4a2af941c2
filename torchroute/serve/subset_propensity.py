"""The probability that a subset learner routes a query to exactly the set it chose.

A subset learner's decision is ``M`` draws (``Decision.action [1, 1, M]``); the models
called are the distinct draws ``A``. The propensity of the decision is ``P(A)``, the
probability that the rule's draws have exactly ``A`` as their set of distinct values (the
order and the repeats of the draws do not change what is called or paid):

- a rule that draws ``M`` times i.i.d. from the ``probs`` it reports (``iid_draws``:
  OMD-Approachability and its contextual version): by inclusion-exclusion over the
  subsets ``S`` of ``A``, ``P(A) = sum_S (-1)^{|A| - |S|} (sum_{i in S} q_i)^M`` (exact);
- any other rule (the top-``M`` baselines, whose ``probs`` are not a draw distribution):
  estimated from ``draws`` further ``act`` calls on the same context plus the one taken,
  ``(count + 1) / (draws + 1)`` (never 0; exactly 1 for a deterministic choice).
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor

from torchroute.functional.subset import subset_mask
from torchroute.learners.subset_base import SubsetLearner
from torchroute.types import Context, Decision


def iid_set_probability(q: Tensor, subset: Tensor, draws: int) -> Tensor:
    """``P(distinct values of M i.i.d. draws from q = A)`` by inclusion-exclusion.

    Args:
        q: ``[K]`` per-draw probabilities.
        subset: ``[K]`` bool, the set ``A`` (non-empty, at most ``M`` members).
        draws: ``M``.

    Returns:
        A float64 scalar tensor in ``[0, 1]``.
    """
    members = subset.nonzero()[:, 0].tolist()
    q = q.double()
    total = q.new_zeros(())
    for size in range(1, len(members) + 1):
        sign = (-1) ** (len(members) - size)
        for part in itertools.combinations(members, size):
            total = total + sign * q[list(part)].sum() ** draws
    return total.clamp(0.0, 1.0)


def subset_propensity(
    learner: SubsetLearner,
    context: Context,
    decision: Decision,
    generator: torch.Generator,
    draws: int = 200,
) -> tuple[float, str]:
    """The probability of the routed set of a one-trial, one-context subset decision.

    Args:
        learner: the learner that made ``decision`` (its state is only read).
        context: ``x [1, 1, X]`` as given to ``act``.
        decision: ``probs [1, 1, K]``, ``action [1, 1, M]``.
        generator: the source of the Monte-Carlo draws (not the one ``act`` used).
        draws: Monte-Carlo ``act`` calls for rules that do not draw i.i.d. from ``probs``.

    Returns:
        ``(propensity, method)`` with ``method`` ``"iid draws"`` or ``"monte carlo"``.
    """
    chosen = subset_mask(decision.action[0, 0], learner.num_arms)  # [K]
    if learner.iid_draws:
        p = iid_set_probability(decision.probs[0, 0], chosen, decision.action.shape[-1])
        return float(p), "iid draws"
    hits = 0
    with torch.no_grad():
        for _ in range(draws):  # one context per act: the subset learners' protocol
            again = learner.act(context, generator).action[0, 0]
            hits += bool(torch.equal(subset_mask(again, learner.num_arms), chosen))
    return (hits + 1) / (draws + 1), "monte carlo"
