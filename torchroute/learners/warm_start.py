"""Warm starts: a learner's state before round 1, from the train split or a decision log.

A learner config may hold (every packaged one does, ``warm_start: null`` by default)::

    warm_start: null | train | <decision log path>
    warm_weight: 1.0          # weight of each warm row; a list: chosen per trial on validation
    warm_epochs: 2            # neural models: passes over the rows; a list: chosen on validation
    warm_clip: 10.0           # decision log: importance weights capped at this value

``train``: every train query with every arm's utility ``clip(Y - rho C, 0, 1)`` for each
trial's ``rho`` (full feedback). A decision log (the serve export or a run's
``log_decisions`` output, with ``features`` and ``propensity`` columns): the logged arm's
utility only, weighted by the importance weight ``min(1 / propensity, warm_clip)``, the
clipping of the OPE estimators.

How each learner takes the rows (:func:`apply_warm_start`):

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
  (:meth:`~torchroute.learners.gram_base.GramRidgeLearner.set_prior`), which forgetting
  never removes: an arm they stop observing returns to its warm-start prediction, not to 0;
- any other learner: the rows replayed through its own ``update`` (full feedback), in
  chunks of 64 contexts, once.

Several ``warm_weight`` (or ``warm_epochs``) values are scored on the validation split
(``Problem.validation``, never the replayed split): for each trial the value whose greedy
policy (argmax of the predicted utility) has the highest mean validation utility is kept.
The round counters are reset to 0 after the warm start (round 1 is still the first round).
A model of ``Problem.hidden_arms`` (a scenario's new model) did not exist when the rows
were collected: its rows are left out of every warm start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from torchroute.functional.utility import utility
from torchroute.learners.base import FixedPolicy, Learner
from torchroute.learners.gram_base import GramRidgeLearner
from torchroute.learners.ridge_base import RidgeLearner
from torchroute.types import Context, Decision, Feedback, Problem, TrainSplit

#: the learner config keys read here (removed before the learner's factory is called)
WARM_KEYS = ("warm_start", "warm_weight", "warm_epochs", "warm_clip")
_CHUNK = 64


@dataclass(frozen=True)
class WarmStart:
    """The warm-start options of one learner config.

    Attributes:
        source: ``None`` (cold), ``"train"`` or the path of a decision log.
        weights: the candidate weights of a warm row (one: used as is).
        epochs: the candidate numbers of passes of a neural model over the rows.
        clip: the cap of the importance weights of a decision log's rows.
    """

    source: str | None = None
    weights: tuple[float, ...] = (1.0,)
    epochs: tuple[int, ...] = (2,)
    clip: float = 10.0

    @classmethod
    def split_node(cls, node: Mapping[str, Any], key: str) -> tuple[WarmStart, dict[str, Any]]:
        """``(options, node without the warm keys)``; ``key`` names the node in errors."""
        rest = {k: v for k, v in node.items() if k not in WARM_KEYS}
        source = node.get("warm_start")
        if source is not None and not isinstance(source, (str, Path)):
            raise ValueError(f"{key}.warm_start must be null, 'train' or a decision log path")
        weights = _numbers(node.get("warm_weight", 1.0), f"{key}.warm_weight", float)
        epochs = _numbers(node.get("warm_epochs", 2), f"{key}.warm_epochs", int)
        clip = node.get("warm_clip", 10.0)
        if any(w <= 0 for w in weights):
            raise ValueError(f"{key}.warm_weight must be > 0, got {list(weights)}")
        if any(e < 1 for e in epochs):
            raise ValueError(f"{key}.warm_epochs must be >= 1, got {list(epochs)}")
        if not isinstance(clip, (int, float)) or not clip >= 1:
            raise ValueError(f"{key}.warm_clip must be a number >= 1, got {clip!r}")
        src = None if source is None else str(source)
        return cls(src, weights, epochs, float(clip)), rest

    @property
    def chooses(self) -> bool:
        """Whether a value is chosen on the validation split (several candidates)."""
        return len(self.weights) > 1 or len(self.epochs) > 1


def _numbers(value: Any, key: str, kind: type) -> tuple[Any, ...]:
    values = list(value) if isinstance(value, Sequence) and not isinstance(value, str) else [value]
    if not values or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
    ):
        raise ValueError(f"{key} must be a number or a non-empty list of numbers, got {value!r}")
    if kind is int and any(float(v) != int(v) for v in values):
        raise ValueError(f"{key} must hold integers, got {value!r}")
    return tuple(kind(v) for v in values)


@dataclass(frozen=True)
class WarmRows:
    """Full- or partial-feedback rows a learner is warmed on.

    Attributes:
        x: bandit features ``[n, d]``.
        target: utilities ``[R, n, K]`` (each trial's ``rho``); unread where ``weight`` is 0.
        weight: sample weights ``[n, K]`` (0: not observed; 1 for a train row).
        action: the logged arm ``[n]`` (long), or ``None`` for full-feedback rows.
    """

    x: Tensor
    target: Tensor
    weight: Tensor
    action: Tensor | None = None


def train_rows(problem: Problem, who: str) -> WarmRows:
    """Every train query with every arm's utility for each trial's ``rho``."""
    train = problem.require_train(who)
    target = _utilities(train, problem.rho)
    return WarmRows(train.features, target, torch.ones_like(train.scores))


def log_rows(problem: Problem, path: str | Path, clip: float, who: str) -> WarmRows:
    """The decisions of the log at ``path`` that received feedback, weighted by
    ``min(1 / propensity, clip)`` on the logged arm (the only one observed)."""
    from torchroute.ope.log import load_decisions

    log = load_decisions(path, arms=list(problem.arm_names))
    if log.features is None:
        raise ValueError(
            f"{who}: warm_start={str(path)!r} needs a decision log with a 'features' column "
            "(the serve export or a run's log_decisions output)"
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
    u = utility(score[None], cost[None], problem.rho.to(dt)[:, None])  # [R, n]
    k = problem.num_arms
    target = u[..., None].expand(-1, -1, k).contiguous()  # read on the logged arm only
    iw = (1.0 / log.propensity[keep].to(dev, dt)).clamp(max=clip)  # [n]
    weight = torch.nn.functional.one_hot(action, k).to(dt) * iw[:, None]
    return WarmRows(x, target, weight, action)


def _utilities(split: TrainSplit, rho: Tensor) -> Tensor:
    """``clip(Y - rho C, 0, 1)`` of a split for every trial: ``[R, n, K]``."""
    return utility(split.scores[None], split.costs[None], rho.to(split.scores.dtype)[:, None, None])


def warm_rows(problem: Problem, warm: WarmStart, who: str) -> WarmRows:
    """The rows of ``warm.source`` for ``problem``'s trials."""
    if warm.source == "train":
        return train_rows(problem, who)
    return log_rows(problem, warm.source, warm.clip, who)


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


def _warm_ridge(learner: RidgeLearner, problem: Problem, rows: WarmRows, warm: WarmStart) -> None:
    a0, t0 = learner.a_inv, learner.theta
    x = rows.x.to(t0.device)
    best = None
    arms = arm_scale(problem, t0.device)  # [R, K]
    if learner._counts_seen():  # the rows count as observations
        seen = (rows.weight > 0).sum(0).to(learner.seen.device, learner.seen.dtype)  # [K]
        learner.seen.add_(seen[None] * arms.to(learner.seen.dtype))
    for w in warm.weights:
        scale = w * arms
        a_inv, theta = ridge_absorb(a0, t0, x, rows.target, rows.weight, scale)
        if not warm.chooses:
            best = (a_inv, theta)
            break
        val = problem.require_validation(f"{type(learner).__name__} (several warm_weight)")
        score = greedy_value(
            torch.einsum("rkd,md->rmk", theta, val.features.to(theta.dtype)), val, problem.rho
        )
        if best is None:
            best = (a_inv, theta, score)
            continue
        better = score > best[2]
        best = (
            torch.where(better[:, None, None, None], a_inv, best[0]),
            torch.where(better[:, None, None], theta, best[1]),
            torch.maximum(score, best[2]),
        )
    learner.a_inv, learner.theta = best[0].contiguous(), best[1].contiguous()


# --------------------------------------------------------------------------- gram
def _warm_gram(
    learner: GramRidgeLearner, problem: Problem, rows: WarmRows, warm: WarmStart
) -> None:
    """The rows as the learner's prior (``P_k``, ``t_k``), in float64 then its dtype."""
    if warm.chooses:
        raise ValueError(
            f"{type(learner).__name__} takes its warm start as its prior: give one warm_weight"
        )
    f64, dev = torch.float64, learner.gram.device
    x, w = rows.x.to(dev, f64), rows.weight.to(dev, f64)
    y = torch.where(rows.weight[None].to(dev) > 0, rows.target.to(dev, f64), 0.0)
    scale = warm.weights[0] * arm_scale(problem, dev)  # [R, K]
    gram = torch.einsum("nk,nd,ne->kde", w, x, x)  # [K, d, d]
    moment = torch.einsum("nk,rnk,nd->rkd", w, y, x)  # [R, K, d]
    learner.set_prior(scale[..., None, None] * gram[None], scale[..., None] * moment)
    seen = (rows.weight > 0).sum(0).to(dev, learner.seen.dtype)  # [K]: rows count as seen
    learner.seen.add_(seen[None] * (scale > 0).to(learner.seen.dtype))


# --------------------------------------------------------------------------- neural
def _warm_neural(learner: Learner, problem: Problem, rows: WarmRows, warm: WarmStart) -> None:
    from torchroute.functional.mlp import z_inverse_update_

    n = rows.x.shape[0]
    dt = learner.w_out.dtype
    dev = learner.w_out.device
    x = rows.x.to(dev, dt)
    known = arm_scale(problem, dev) > 0  # [R, K]
    observed = (rows.weight > 0).to(dev)[None] & known[:, None]  # [R, n, K]
    weight = rows.weight.to(dev, dt)[None].expand(learner.num_trials, -1, -1)
    target = torch.where(observed, rows.target.to(dev, dt), 0.0)
    full = rows.action is None
    gen = torch.Generator().manual_seed(0)
    size = learner.batch_size
    best, best_score = None, None
    val = problem.require_validation(type(learner).__name__) if warm.chooses else None
    for epoch in range(1, max(warm.epochs) + 1):
        order = torch.randperm(n, generator=gen).to(dev)
        for lo in range(0, n, size):
            idx = order[lo : lo + size]
            xb = x[idx][None].expand(learner.num_trials, -1, -1)
            learner.train_step(
                xb, target[:, idx], observed[:, idx], None if full else weight[:, idx]
            )
        if val is not None and epoch in warm.epochs:
            with torch.no_grad():
                xv = val.features.to(dev, dt)[None].expand(learner.num_trials, -1, -1)
                score = greedy_value(learner(xv)[0], val, problem.rho)
            state = {k: v.detach().clone() for k, v in learner.params().items()}
            if best is None:
                best, best_score = state, score
            else:
                better = score > best_score
                for k, v in state.items():
                    shape = (-1,) + (1,) * (v.ndim - 1)
                    best[k] = torch.where(better.view(shape), v, best[k])
                best_score = torch.maximum(score, best_score)
    if best is not None:
        with torch.no_grad():
            for k, v in learner.params().items():
                v.copy_(best[k])
    with torch.no_grad():
        keep = min(n, learner.capacity)
        tail = slice(n - keep, n)
        xs = x[tail][None].expand(learner.num_trials, -1, -1)
        learner._store(
            xs,
            target[:, tail],
            observed[:, tail],
            weight[:, tail] if learner.sample_weights else None,
        )
        if learner.nu != 0:
            for lo in range(0, n, 1024):
                xb = x[lo : lo + 1024][None].expand(learner.num_trials, -1, -1)
                _, phi = learner(xb)
                z_inverse_update_(learner.z_inv, phi, observed[:, lo : lo + 1024])


# --------------------------------------------------------------------------- generic
def _warm_by_update(learner: Learner, problem: Problem, rows: WarmRows) -> None:
    """Replay the rows through ``learner.update`` (chunks of 64 contexts)."""
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


def apply_warm_start(learner: Learner, problem: Problem, warm: WarmStart, who: str) -> Learner:
    """Warm ``learner`` (built for ``problem``) in place as ``warm`` says; returns it.

    Raises ``ValueError`` (naming ``who``) for a static router, a missing train or
    validation split, or an unusable decision log.
    """
    if warm.source is None:
        return learner
    if isinstance(learner, FixedPolicy):
        raise ValueError(
            f"{who}: warm_start applies to online learners; {type(learner).__name__} does not "
            "learn online (a static router is fitted on the train split already)"
        )
    rows = warm_rows(problem, warm, who)
    _warm(learner, problem, rows, warm)
    for module in learner.modules():
        if isinstance(module, Learner):
            module.rounds.zero_()
    return learner


def _warm(learner: Learner, problem: Problem, rows: WarmRows, warm: WarmStart) -> None:
    from torchroute.learners.cabs_c import CABSC
    from torchroute.learners.cabs_d import CABSD
    from torchroute.learners.neural import NeuralUCB

    if isinstance(learner, RidgeLearner):
        _warm_ridge(learner, problem, rows, warm)
    elif isinstance(learner, GramRidgeLearner):
        _warm_gram(learner, problem, rows, warm)
    elif isinstance(learner, NeuralUCB):
        _warm_neural(learner, problem, rows, warm)
    elif isinstance(learner, CABSD):
        _warm(learner.expert, problem, rows, warm)
        _warm(learner.cabs_c, problem, rows, warm)
    elif isinstance(learner, CABSC):
        _warm(learner.rs, problem, rows, warm)
    else:
        if warm.chooses:
            raise ValueError(
                f"{type(learner).__name__} takes its warm start through its own update: give "
                "one warm_weight (several are chosen on validation for ridge and neural models)"
            )
        _warm_by_update(learner, problem, rows)


__all__ = [
    "WARM_KEYS",
    "WarmRows",
    "WarmStart",
    "apply_warm_start",
    "greedy_value",
    "log_rows",
    "ridge_absorb",
    "train_rows",
]
