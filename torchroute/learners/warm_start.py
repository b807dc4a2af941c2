"""Warm starts: a learner's state before round 1, from the train split or a decision log.

The options are a :class:`~torchroute.learners.warm_options.WarmStart` (the ``warm_*`` keys
of a learner config). ``train``: every train query with every arm's utility
``clip(Y - rho C, 0, 1)`` for each trial's ``rho`` (full feedback). A decision log (the serve
export or a run's ``log_decisions`` output, with ``features`` and ``propensity`` columns):
the logged arm's utility only, weighted by the importance weight
``min(1 / propensity, warm_clip)``, the clipping of the OPE estimators. A learner that
learns the quality (:attr:`Learner.warm_target <torchroute.learners.Learner.warm_target>`
``"score"``: ``objective: quality_cost``) gets the scores ``Y`` instead of the utilities.
The run reads the source and hands the rows (:class:`WarmRows`) to :meth:`Learner.warm_start
<torchroute.learners.Learner.warm_start>`, which each learner owns:

- ridge learners (LinUCB, LinTS, SquareCB, epsilon-greedy, ...): one closed-form batched
  update of the ridge statistics, ``A_k += w sum x x^T``, ``b_k += w sum u_k x``
  (:func:`ridge_absorb`; equal to the row-by-row Sherman–Morrison updates);
- NeuralUCB and its variants: ``warm_epochs`` passes of mini-batch steps over the rows
  (mini-batches of the learner's ``batch_size``), then the last ``capacity`` rows go into
  its replay and ``Z_k`` takes every row's last-layer features;
- CABS-C / CABS-D: their pre-trained oracle as it is, and the rows for their regression
  solver and (CABS-D) their standard expert;
- the forgetting ridge learners (discounted and sliding-window LinUCB / LinTS): the rows
  become their prior, ``P_k = w sum x x^T``, ``t_k = w sum u_k x``
  (:meth:`~torchroute.learners.gram_base.GramRidgeLearner.warm_start`), which forgetting
  never removes: an arm they stop observing returns to its warm-start prediction, not to 0;
- any other learner (the default): the rows replayed through its own ``update`` (full
  feedback), in chunks of 64 contexts, once (:func:`replay_through_update`).

Several ``warm_weight`` (or ``warm_epochs``) values are scored on the validation split
(``Problem.validation``, never the replayed split): for each trial the value whose greedy
policy (argmax of the predicted utility) has the highest mean validation utility is kept
(:class:`PerTrialBest`). The round counters are reset to 0 after the warm start (round 1 is
still the first round). A model of ``Problem.hidden_arms`` (a scenario's new model) did not
exist when the rows were collected: its rows are left out of every warm start
(:func:`arm_scale`).

This module is imported only by a run that warm-starts a learner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor

from torchroute.functional.utility import utility
from torchroute.learners.warm_options import WARM_KEYS, WarmStart
from torchroute.types import Context, Decision, Feedback, Problem, TrainSplit

if TYPE_CHECKING:
    from torchroute.learners.base import Learner

_CHUNK = 64


@dataclass(frozen=True)
class WarmRows:
    """Full- or partial-feedback rows a learner is warmed on.

    Attributes:
        x: bandit features ``[n, d]``.
        target: utilities ``[R, n, K]`` (each trial's ``rho``), or the scores (the same
            for every trial) for a learner that learns the quality; unread where
            ``weight`` is 0.
        weight: sample weights ``[n, K]`` (0: not observed; 1 for a train row).
        action: the logged arm ``[n]`` (long), or ``None`` for full-feedback rows.
    """

    x: Tensor
    target: Tensor
    weight: Tensor
    action: Tensor | None = None


class LoggedDecisions(Protocol):
    """What :func:`logged_rows` reads of a decision log (a ``DecisionLog``)."""

    action: Tensor  # [n] long
    features: Tensor | None  # [n, d]
    score: Tensor  # [n], NaN: no feedback
    cost: Tensor  # [n], NaN: no feedback
    propensity: Tensor  # [n]


def train_rows(problem: Problem, who: str, target: str = "utility") -> WarmRows:
    """Every train query with every arm's utility for each trial's ``rho`` (``target``
    ``"utility"``) or its score (``"score"``, ``[R, n, K]`` all trials alike)."""
    train = problem.require_train(who)
    if target == "score":
        values = train.scores[None].expand(problem.num_trials, -1, -1)
    else:
        values = _utilities(train, problem.rho)
    return WarmRows(train.features, values, torch.ones_like(train.scores))


def logged_rows(
    problem: Problem,
    log: LoggedDecisions,
    clip: float,
    who: str,
    path: str,
    target: str = "utility",
) -> WarmRows:
    """The decisions of ``log`` (read from ``path``) that received feedback, weighted by
    ``min(1 / propensity, clip)`` on the logged arm (the only one observed); their utility
    for each trial's ``rho`` (``target`` ``"utility"``) or their score (``"score"``)."""
    if log.features is None:
        raise ValueError(
            f"{who}: warm_start={path!r} needs a decision log with a 'features' column "
            "(the serve export, or a simulate run's with log_decisions=true log_contexts=true)"
        )
    if log.features.shape[1] != problem.dim:
        raise ValueError(
            f"{who}: the decision log {path} has features of size {log.features.shape[1]}, "
            f"the run's features have d={problem.dim}"
        )
    keep = ~(torch.isnan(log.score) | torch.isnan(log.cost))
    if not bool(keep.any()):
        raise ValueError(f"{who}: the decision log {path} has no decision with feedback")
    dev, dt = problem.rho.device, problem.dtype
    action = log.action[keep].to(dev)
    x = log.features[keep].to(dev, dt)
    score, cost = log.score[keep].to(dev, dt), log.cost[keep].to(dev, dt)
    if target == "score":
        u = score[None].expand(problem.num_trials, -1)  # [R, n]
    else:
        u = utility(score[None], cost[None], problem.rho.to(dt)[:, None])  # [R, n]
    k = problem.num_arms
    target = u[..., None].expand(-1, -1, k).contiguous()  # read on the logged arm only
    iw = (1.0 / log.propensity[keep].to(dev, dt)).clamp(max=clip)  # [n]
    weight = torch.nn.functional.one_hot(action, k).to(dt) * iw[:, None]
    return WarmRows(x, target, weight, action)


def _utilities(split: TrainSplit, rho: Tensor) -> Tensor:
    """``clip(Y - rho C, 0, 1)`` of a split for every trial: ``[R, n, K]``."""
    return utility(split.scores[None], split.costs[None], rho.to(split.scores.dtype)[:, None, None])


def arm_scale(problem: Problem, device: torch.device) -> Tensor:
    """``[R, K]``: 0 for an arm of ``problem.hidden_arms`` (a model that did not exist when
    the rows were collected: its rows are never used), 1 otherwise."""
    shape = (problem.num_trials, problem.num_arms)
    if problem.hidden_arms is None:
        return torch.ones(shape, dtype=torch.float64, device=device)
    return (~problem.hidden_arms.to(device)).to(torch.float64)


# --------------------------------------------------------------------------- ridge
def ridge_absorb(
    a_inv: Tensor, theta: Tensor, x: Tensor, target: Tensor, weight: Tensor, scale: Tensor
) -> tuple[Tensor, Tensor]:
    """Add ``n`` weighted rows to per-arm ridge statistics in one closed-form step.

    ``A = A_inv^{-1} + s sum_i w_ik x_i x_i^T``, ``b = A_old theta + s sum_i w_ik y_rik x_i``,
    returned as ``(A^{-1}, A^{-1} b)`` (computed in float64).

    Args:
        a_inv: ``[R, K, d, d]``.
        theta: ``[R, K, d]``.
        x: ``[n, d]`` rows shared by the trials.
        target: ``[R, n, K]``; unread where ``weight`` is 0.
        weight: ``[n, K]`` sample weights.
        scale: ``[R, K]`` weight of the rows per trial and arm (0: the arm takes none).

    Returns:
        ``(a_inv', theta')`` in the input dtypes.
    """
    f64 = torch.float64
    x64, w64 = x.to(f64), weight.to(f64)
    y = torch.where(weight[None] > 0, target.to(f64), 0.0)
    gram = torch.einsum("nk,nd,ne->kde", w64, x64, x64)  # [K, d, d]
    moment = torch.einsum("nk,rnk,nd->rkd", w64, y, x64)  # [R, K, d]
    a_old = torch.linalg.inv(a_inv.to(f64))
    a_old = 0.5 * (a_old + a_old.transpose(-1, -2))
    b = torch.einsum("rkde,rke->rkd", a_old, theta.to(f64))
    s = scale.to(f64)
    a_new = a_old + s[:, :, None, None] * gram[None]
    b_new = b + s[:, :, None] * moment
    a_inv_new = torch.linalg.inv(a_new)
    a_inv_new = 0.5 * (a_inv_new + a_inv_new.transpose(-1, -2))
    theta_new = torch.einsum("rkde,rke->rkd", a_inv_new, b_new)
    return a_inv_new.to(a_inv.dtype), theta_new.to(theta.dtype)


def greedy_value(predict: Tensor, split: TrainSplit, rho: Tensor) -> Tensor:
    """Mean utility ``[R]`` on ``split`` of the argmax of ``predict [R, m, K]``."""
    u = _utilities(split, rho).to(predict.device)
    return u.gather(-1, predict.argmax(-1, keepdim=True))[..., 0].mean(-1)


class PerTrialBest:
    """The best of several candidate states, chosen per trial by a validation score.

    Each :meth:`offer` gives a state (tensors with a leading trial dim ``R``) and its score
    ``[R]``; a trial keeps the candidate of its highest score (the first one on a tie).
    """

    def __init__(self) -> None:
        self.state: dict[str, Tensor] | None = None
        self.score: Tensor | None = None

    def offer(self, state: dict[str, Tensor], score: Tensor) -> None:
        """Keep, per trial, ``state`` where ``score [R]`` beats the best so far."""
        if self.state is None or self.score is None:
            self.state, self.score = dict(state), score
            return
        better = score > self.score
        for k, v in state.items():
            shape = (-1,) + (1,) * (v.ndim - 1)
            self.state[k] = torch.where(better.view(shape), v, self.state[k])
        self.score = torch.maximum(score, self.score)


def replay_through_update(learner: Learner, problem: Problem, rows: WarmRows) -> None:
    """Replay the rows through ``learner.update`` (chunks of 64 contexts), once: the
    default :meth:`Learner.warm_start <torchroute.learners.Learner.warm_start>`."""
    r = learner.num_trials
    ref = learner.rounds
    known = (arm_scale(problem, ref.device) > 0)[:, None]  # [R, 1, K]
    dt = rows.target.dtype
    for lo in range(0, rows.x.shape[0], _CHUNK):
        sl = slice(lo, lo + _CHUNK)
        x = rows.x[sl][None].expand(r, -1, -1).to(ref.device)
        context = Context(x=x)
        observed = (rows.weight[sl] > 0)[None].to(ref.device) & known
        reward = torch.where(observed, rows.target[:, sl].to(ref.device), 0.0)
        if rows.action is None:
            decision = learner.act(context)
        else:
            action = rows.action[sl][None].expand(r, -1).to(ref.device)
            probs = torch.nn.functional.one_hot(action, learner.num_arms).to(dt)
            decision = Decision(probs=probs, action=action)
        feedback = Feedback(reward=reward, observed=observed, only_played=rows.action is not None)
        learner.update(context, decision, feedback)


__all__ = [
    "WARM_KEYS",
    "LoggedDecisions",
    "PerTrialBest",
    "WarmRows",
    "WarmStart",
    "arm_scale",
    "greedy_value",
    "logged_rows",
    "replay_through_update",
    "ridge_absorb",
    "train_rows",
]
