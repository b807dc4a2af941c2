"""Trial-rounds per second on one device: LinUCB, the SquareCB-G graph program and HPG.

A *trial-round* is one trial doing one ``act`` and one ``update`` (for the graph program:
one instance of the program solved, i.e. the per-round solve of one trial). Inputs are
generated before timing; each figure is the best of ``blocks`` timed blocks of ``rounds``
calls after one warm-up block, with the device synchronised at each block end.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from torchroute.functional.graph_program import graph_squarecb_probs
from torchroute.learners import HPG, Learner, LinUCB
from torchroute.types import Context, Feedback

POOL = 8  # pre-generated rounds, cycled


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_rate(
    step: Callable[[int], None], units: int, rounds: int, device: torch.device, blocks: int = 3
) -> float:
    """``units x rounds / t`` of the fastest of ``blocks`` blocks of ``rounds`` calls."""
    step(0)  # warm-up: allocator, kernels, thread pool
    _sync(device)
    best = float("inf")
    for _ in range(blocks):
        t0 = time.perf_counter()
        for i in range(rounds):
            step(i)
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return units * rounds / best


def _contexts(
    r: int, d: int, k: int, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit-norm contexts ``[P, R, 1, d]`` and rewards in ``[0, 1]`` ``[P, R, 1, K]``."""
    g = torch.Generator().manual_seed(0)
    x = torch.nn.functional.normalize(torch.randn(POOL, r, 1, d, generator=g), dim=-1)
    reward = torch.rand(POOL, r, 1, k, generator=g)
    return x.to(device, dtype), reward.to(device, dtype)


def _bandit_round(
    learner: Learner, x: torch.Tensor, reward: torch.Tensor, k: int, gen: torch.Generator
) -> None:
    """One act and one bandit update: ``x [R, 1, d]``, ``reward [R, 1, K]``."""
    context = Context(x)
    decision = learner.act(context, gen)
    observed = torch.nn.functional.one_hot(decision.action, k).bool()
    feedback = Feedback(reward=reward * observed, observed=observed, only_played=True)
    learner.update(context, decision, feedback, gen)


def linucb_rate(
    device: torch.device | str, trials: int = 4096, dim: int = 128, arms: int = 11, rounds: int = 10
) -> float:
    """LinUCB (``alpha = 1, lam = 1``, float32, ``R x K x d x d`` state), trial-rounds/s."""
    device = torch.device(device)
    x, reward = _contexts(trials, dim, arms, device, torch.float32)
    learner = LinUCB(trials, arms, dim, alpha=1.0, lam=1.0).to(device)
    gen = torch.Generator(device=device).manual_seed(0)

    def step(i: int) -> None:
        _bandit_round(learner, x[i % POOL], reward[i % POOL], arms, gen)

    return best_rate(step, trials, rounds, device)


def graph_program_rate(
    device: torch.device | str, instances: int = 4096, arms: int = 11, rounds: int = 3
) -> float:
    """:func:`graph_squarecb_probs` on random instances (float64), instances per second.

    Losses ``U(0, 1)``, graphs of density 0.3, ``gamma`` log-uniform in ``[1e-2, 1e4]``.
    """
    device = torch.device(device)
    g = torch.Generator().manual_seed(0)
    f = torch.rand(instances, arms, generator=g, dtype=torch.float64).to(device)
    graph = (torch.rand(instances, arms, arms, generator=g) < 0.3).to(device)
    gamma = (10 ** (torch.rand(instances, generator=g, dtype=torch.float64) * 6 - 2)).to(device)
    return best_rate(lambda i: graph_squarecb_probs(f, graph, gamma), instances, rounds, device)


def hpg_rate(
    device: torch.device | str,
    trials: int = 256,
    dim: int = 768,
    models: int = 8,
    capacity: int = 32,
    rounds: int = 5,
) -> float:
    """HPG (``tau = 8, beta = 8 / d``, ``eta = 0.5``, float32 state ``[R, M, d, capacity]``),
    trial-rounds per second."""
    device = torch.device(device)
    x, reward = _contexts(trials, dim, models, device, torch.float32)
    learner = HPG(trials, models, dim, tau=8.0, beta=8.0 / dim, eta=0.5, capacity=capacity)
    learner = learner.to(device)
    gen = torch.Generator(device=device).manual_seed(0)

    def step(i: int) -> None:
        _bandit_round(learner, x[i % POOL], reward[i % POOL], models, gen)

    return best_rate(step, trials, rounds, device)
