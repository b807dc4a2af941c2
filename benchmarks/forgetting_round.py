"""CPU cost per round of the learners for change against LinUCB / LinTS, as ratios.

Discounted and sliding-window learners keep Gram statistics and solve them (a Cholesky
factor per arm and trial) at every decision, where LinUCB and LinTS update ``A^{-1}`` with
Sherman–Morrison; this measures what that costs on one synthetic stream (``R`` trials, ``K``
arms, ``d`` features, bandit feedback), all learners in the same run, with
``time.process_time`` (run with ``OMP_NUM_THREADS=1`` on a shared machine).

    OMP_NUM_THREADS=1 python benchmarks/forgetting_round.py --trials 15 --arms 11 --dim 33

Prints a Markdown table: learner, CPU ms per round, ratio to LinUCB.
"""

from __future__ import annotations

import argparse
import time

import torch

from torchroute.learners import LinTS, LinUCB
from torchroute.learners.discounted import DiscountedLinTS, DiscountedLinUCB
from torchroute.learners.sliding_window import SlidingWindowLinTS, SlidingWindowLinUCB
from torchroute.types import Context, Feedback


def per_round_ms(learner, xs: torch.Tensor, rewards: torch.Tensor) -> float:
    """CPU milliseconds per act + update over the stream ``xs [T, R, 1, d]``."""
    gen = torch.Generator().manual_seed(0)
    start = time.process_time()
    for x, reward in zip(xs, rewards):
        context = Context(x=x)
        decision = learner.act(context, gen)
        observed = torch.nn.functional.one_hot(decision.action, reward.shape[-1]).bool()
        feedback = Feedback(torch.where(observed, reward, 0.0), observed, only_played=True)
        learner.update(context, decision, feedback, gen)
    return 1000 * (time.process_time() - start) / len(xs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=15)
    parser.add_argument("--arms", type=int, default=11)
    parser.add_argument("--dim", type=int, default=33)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    r, k, d, t = args.trials, args.arms, args.dim, args.rounds
    g = torch.Generator().manual_seed(1)
    xs = torch.nn.functional.normalize(torch.randn(t, r, 1, d, generator=g), dim=-1)
    rewards = torch.rand(t, r, 1, k, generator=g)
    learners = {
        "linucb": LinUCB(r, k, d),
        "lints": LinTS(r, k, d),
        "discounted_linucb": DiscountedLinUCB(r, k, d),
        "discounted_lints": DiscountedLinTS(r, k, d),
        "sw_linucb": SlidingWindowLinUCB(r, k, d, window=100),
        "sw_lints": SlidingWindowLinTS(r, k, d, window=100),
    }
    times = {name: per_round_ms(learner, xs, rewards) for name, learner in learners.items()}
    print(f"R={r}, K={k}, d={d}, {t} rounds, {torch.get_num_threads()} thread(s)\n")
    print("| learner | CPU ms / round | x LinUCB |\n| --- | --: | --: |")
    for name, ms in times.items():
        print(f"| {name} | {ms:.2f} | {ms / times['linucb']:.1f} |")


if __name__ == "__main__":
    main()
