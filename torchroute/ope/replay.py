"""The replay method (Li et al. 2011) for learning policies, batched over trials.

A learning policy changes with what it sees, so its value on a log is not a function of
fixed probabilities. Replay walks through the log: at decision ``i`` each trial's learner
draws an arm; when it equals the logged arm ``a_i`` (and, for a non-uniform behaviour
policy, a coin with probability ``c / mu_i`` comes up, ``c <= min_i mu_i``) the decision
is *accepted*: the learner is updated with it and its reward counts. Accepted decisions are
then distributed as if the learner had chosen the arms itself (Li, Chu, Langford & Wang,
"Unbiased offline evaluation of contextual-bandit-based news article recommendation
algorithms", WSDM 2011, Algorithm 1; the coin is the rejection-sampling step that extends
it to a known non-uniform behaviour policy). With uniform logging ``c = 1 / K`` accepts
every match.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from torchroute.functional.random import Source, uniform
from torchroute.functional.utility import utility
from torchroute.types import Context, Feedback


@dataclass(frozen=True)
class ReplayResult:
    """Replay's outcome for ``R`` trials over ``n`` logged decisions.

    Attributes:
        value: ``[R]`` mean reward of the accepted decisions (NaN with none accepted).
        accepted: ``[R]`` number of accepted decisions.
        std_error: ``[R]`` standard error of ``value`` (sample std over ``sqrt(accepted)``).
        mask: ``[R, n]`` bool, which decisions each trial accepted.
    """

    value: Tensor
    accepted: Tensor
    std_error: Tensor
    mask: Tensor


def replay(
    learner: nn.Module,
    features: Tensor,
    action: Tensor,
    propensity: Tensor,
    score: Tensor,
    cost: Tensor,
    rho: Tensor,
    generator: Source = None,
    *,
    embedding: Tensor | None = None,
    scale: float | None = None,
) -> ReplayResult:
    """Run ``learner`` (``R`` trials) through a log with replay.

    Per decision ``i``: ``learner.act`` on ``x_i`` for every trial; a trial accepts when its
    arm equals ``action[i]`` and ``u < scale / propensity[i]`` (``u ~ U[0, 1)``, one per
    trial); then ``learner.update`` runs with the bandit feedback of ``action[i]`` (utility
    ``clip(score - rho cost, 0, 1)`` at each trial's rho) and the trials that did not accept
    keep their previous state (every buffer and parameter is restored for them). So each
    trial's learner sees exactly its accepted decisions, in log order.

    Args:
        learner: a torchroute learner with ``R`` trials whose whole state sits in buffers
            and parameters (no optimiser state in ``get_extra_state``).
        features: ``[n, d]`` contexts.
        action: ``[n]`` logged arms.
        propensity: ``[n]`` their behaviour probabilities.
        score: ``[n]`` quality of the logged arms (utilities are recomputed).
        cost: ``[n]`` their cost.
        rho: ``[R]`` cost sensitivity of each trial.
        generator: the source of the learner's draws and of the acceptance coins.
        embedding: ``[n, e]`` prompt embeddings (optional).
        scale: ``c`` (default ``min(propensity)``); must not exceed it.

    Returns:
        A :class:`ReplayResult`.
    """
    if type(learner).get_extra_state is not nn.Module.get_extra_state:
        raise ValueError(
            f"replay restores the state of trials that did not accept a decision, but "
            f"{type(learner).__name__} keeps state outside its buffers (get_extra_state)"
        )
    r_trials = rho.numel()
    n = action.numel()
    low = propensity.min()
    c = low if scale is None else torch.as_tensor(scale, dtype=propensity.dtype)
    if bool(c > low * (1 + 1e-12)) or bool(c <= 0):
        raise ValueError(f"scale must be in (0, min propensity = {float(low)}], got {float(c)}")
    accept_p = (c / propensity).clamp(max=1.0)  # [n]
    k = learner.num_arms
    state = dict(learner.named_buffers()) | dict(learner.named_parameters())
    for name, t in state.items():
        if t.ndim == 0 or t.shape[0] != r_trials:
            raise ValueError(
                f"replay needs every state tensor of {type(learner).__name__} to lead with "
                f"R={r_trials} trials (one per rho), but {name!r} is {tuple(t.shape)}"
            )
    dtype = features.dtype
    u_all = utility(score[None], cost[None], rho.to(score.dtype)[:, None])  # [R, n]
    masks = []
    for i in range(n):
        x = features[i].expand(r_trials, 1, -1)  # [R, 1, d]
        emb = None if embedding is None else embedding[i].expand(r_trials, 1, -1)
        context = Context(x=x, embedding=emb)
        decision = learner.act(context, generator)
        coin = uniform(generator, (r_trials,), dtype=torch.float64, device=features.device)
        take = (decision.action[:, 0] == action[i]) & (coin < accept_p[i])  # [R]
        arm = action[i].expand(r_trials, 1)  # [R, 1]
        observed = torch.nn.functional.one_hot(arm, k).bool()  # [R, 1, K]
        u = u_all[:, i].to(dtype)  # [R]
        zero = x.new_zeros(())
        feedback = Feedback(
            reward=torch.where(observed, u[:, None, None], zero),
            observed=observed,
            score=torch.where(observed, score[i].to(dtype), zero),
            cost=torch.where(observed, cost[i].to(dtype), zero),
            only_played=True,
        )
        before = {name: t.detach().clone() for name, t in state.items()}
        decision = type(decision)(probs=decision.probs, action=arm)
        learner.update(context, decision, feedback, generator)
        with torch.no_grad():
            for name, t in state.items():
                keep = take.reshape(-1, *([1] * (t.ndim - 1)))
                t.copy_(torch.where(keep, t, before[name]))
        masks.append(take)
    mask = torch.stack(masks, 1) if masks else torch.zeros(r_trials, 0, dtype=torch.bool)
    accepted = mask.sum(1)
    m = accepted.double()
    kept = torch.where(mask, u_all[:, : mask.shape[1]].double(), 0.0)  # [R, n] accepted rewards
    total, total_sq = kept.sum(1), kept.square().sum(1)
    value = total / m
    var = (total_sq - m * value**2) / (m - 1)
    return ReplayResult(value, accepted, (var.clamp_min(0) / m).sqrt(), mask)


__all__ = ["ReplayResult", "replay"]
