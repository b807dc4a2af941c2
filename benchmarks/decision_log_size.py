"""Bytes of a run's decision logs per trial, lean (the default) and with ``log_contexts``.

Runs each learner as the behaviour policy on a synthetic table the size of a RouterBench
test stream (``--rounds`` 1,793 decisions, ``--arms`` 11 models, 0/1 scores), writes its log
as ``torchroute simulate ... log_decisions=true`` does (one Parquet file per trial), and
again with ``log_contexts=true`` (``--dim`` 32 PCA features and a ``--embedding`` 384-d
encoder embedding per decision), then projects both to ``--trials`` 728 trials::

    python benchmarks/decision_log_size.py

Prints one Markdown row per learner: MB per trial and MB for the whole run, both ways.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

from torchroute.data import linear_contextual_table
from torchroute.data.decision_io import save_decisions
from torchroute.data.decisions import DecisionLog
from torchroute.envs.single_choice import SingleChoiceEnv
from torchroute.learners import BestSingleArm, LinTS, LinUCB, RandomRouter, SquareCB
from torchroute.run.decision_logger import log_decisions

LEARNERS = {
    "linucb": LinUCB.from_problem,
    "lints": LinTS.from_problem,
    "squarecb": SquareCB.from_problem,
    "best_single": BestSingleArm.from_problem,
    "random": lambda p: RandomRouter(p.num_trials, p.num_arms),
}


def file_bytes(log: DecisionLog) -> int:
    """Size of ``log`` written as one trial's Parquet file."""
    with tempfile.TemporaryDirectory() as folder:
        return save_decisions(log, Path(folder) / "trial0.parquet").stat().st_size


def main() -> None:
    """Measure every learner of :data:`LEARNERS` and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1793)
    parser.add_argument("--arms", type=int, default=11)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--embedding", type=int, default=384)
    parser.add_argument("--trials", type=int, default=728)
    args = parser.parse_args()
    n = int(args.rounds / 0.3) + 1  # the table's test split (30%) holds --rounds queries
    table, _ = linear_contextual_table(n, args.arms, args.dim, seed=0, bernoulli=True)
    env = SingleChoiceEnv(table, rho=[300.0], seeds=[3], split="test", horizon=args.rounds)
    g = torch.Generator().manual_seed(0)
    print(f"| learner | lean MB/trial | lean MB x{args.trials} | contexts MB/trial |")
    print("| --- | --- | --- | --- |")
    for name, make in LEARNERS.items():
        logs, _ = log_decisions(make(env.problem()), env, name=name, contexts=False, seed=0)
        lean = file_bytes(logs[0])
        contexts = replace(
            logs[0],
            features=torch.randn(args.rounds, args.dim + 1, generator=g).float().double(),
            embedding=torch.randn(args.rounds, args.embedding, generator=g).float().double(),
        )
        full = file_bytes(contexts)
        print(
            f"| {name} | {lean / 1e6:.3f} | {args.trials * lean / 1e6:.0f} | "
            f"{full / 1e6:.2f} (x{args.trials}: {args.trials * full / 1e9:.2f} GB) |"
        )


if __name__ == "__main__":
    main()
