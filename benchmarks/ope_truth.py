"""Off-policy estimators checked against the truth of full-information routing tables.

For each table (RouterBench; the Open LLM Leaderboard v2 with the CABS paper's per-model
costs), each behaviour policy and ``--seeds`` seeds, a decision log of the whole test split
is written by :func:`torchroute.run.decision_logger.log_decisions` (trial ``s`` replays the
split in its own order and draws its own arms; utilities at ``--rho-log``). Behaviour
policies:

- ``uniform``: :class:`~torchroute.learners.RandomRouter`;
- ``epsilon_greedy``: :class:`~torchroute.learners.EpsilonGreedy` learning online while it
  logs (``eps0 = 0.3``, floor ``eps_min = 0.1``): an adaptive behaviour policy;
- ``softmax``: a softmax (temperature ``0.1``) of a ridge regressor of each arm's utility
  fitted on the train split.

Contexts are the one-hot of each query's task (RouterBench's ``eval_name``, the
leaderboard's sub-benchmark) plus a constant. Targets (the truth is their exact value on the
test split, from the full table), each at ``--rho-log`` and at ``--rho-alt`` (utilities
recomputed from score and cost): the best single arm on train, the regressor's greedy
policy, its softmax at temperature 0.05, and uniform routing. Every log is evaluated with
all estimators (reward model: ridge per arm, cross-fitted on the log in 2 random folds; the
DM/DR family also with a ridge pre-trained on the train split, full information: "train
model", and with a forward ridge, each of ``--forward-blocks`` blocks of the log in log
order predicted by the fit on the blocks before it: "forward model"),
``--bootstrap`` replicates, 95% percentile-bootstrap and empirical-Bernstein intervals.

Printed: one Markdown row per table x behaviour x estimator with the mean over targets of
``|bias|`` (mean over seeds of estimate - truth), RMSE and the coverage of both intervals;
the rows are also written to ``--out`` (CSV).

    .venv/bin/python benchmarks/ope_truth.py --seeds 50
    # choosing settings: other world seeds and logging draws than the reported ones
    .venv/bin/python benchmarks/ope_truth.py --seeds 50 --first-seed 1000 --seed 1
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from torchroute.data import load_openllm_leaderboard, load_routerbench
from torchroute.data.table import RoutingTable
from torchroute.envs.single_choice import SingleChoiceEnv
from torchroute.functional.ope import ESTIMATORS, NEEDS_MODEL, estimate
from torchroute.functional.ope_model import fold_assignment, ridge_reward_model, time_blocks
from torchroute.functional.sampling import sample_categorical
from torchroute.functional.utility import utility
from torchroute.learners import EpsilonGreedy, RandomRouter
from torchroute.learners.base import FixedPolicy
from torchroute.run.decision_logger import log_decisions
from torchroute.types import Decision

SHARED = Path(
    os.environ.get("TORCHROUTE_SHARED_DATA", Path(__file__).parents[2] / "shared" / "data")
)


class SoftmaxRouter(FixedPolicy):
    """``p = softmax(q(x) / temperature)`` of a fixed linear model ``q = x theta`` ``[K, d]``."""

    def __init__(self, num_trials: int, theta: torch.Tensor, temperature: float) -> None:
        super().__init__(num_trials, theta.shape[0])
        self.register_buffer("theta", theta[None].expand(num_trials, -1, -1).clone())
        self.temperature = temperature

    def act(self, context, generator=None):
        scores = torch.einsum("rbd,rkd->rbk", context.x.to(self.theta.dtype), self.theta)
        probs = torch.softmax(scores / self.temperature, -1).to(context.x.dtype)
        return Decision(probs=probs, action=sample_categorical(probs, generator))


def task_features(table: RoutingTable) -> torch.Tensor:
    groups = sorted(set(table.groups))
    onehot = torch.zeros(table.num_queries, len(groups) + 1, dtype=torch.float64)
    onehot[torch.arange(table.num_queries), [groups.index(g) for g in table.groups]] = 1.0
    onehot[:, -1] = 1.0
    return onehot


def fit_ridge(x: torch.Tensor, u: torch.Tensor, lam: float = 1.0) -> torch.Tensor:
    """``theta [K, d]``: ridge of each arm's utility ``u [n, K]`` on ``x [n, d]`` (full info)."""
    gram = x.T @ x + lam * torch.eye(x.shape[1], dtype=x.dtype)
    return torch.linalg.solve(gram, x.T @ u).T


def targets(x_train, u_train_by_rho, x_test):
    """``{name: probs [n_test, K]}`` per rho: best arm, greedy, softmax(0.05), uniform."""
    out = []
    for u_train in u_train_by_rho:
        k = u_train.shape[1]
        theta = fit_ridge(x_train, u_train)
        pred = x_test @ theta.T  # [n, K]
        best = torch.zeros_like(pred)
        best[:, int(u_train.mean(0).argmax())] = 1.0
        greedy = torch.nn.functional.one_hot(pred.argmax(-1), k).double()
        out.append(
            {
                "best_arm": best,
                "greedy": greedy,
                "softmax": torch.softmax(pred / 0.05, -1),
                "uniform": torch.full_like(pred, 1.0 / k),
            }
        )
    return out


def run_table(name, table, args, rows):
    x = task_features(table)
    train, test = table.rows("train"), table.rows("test")
    rhos = [args.rho_log, args.rho_alt]
    u_train = [utility(table.scores[train], table.costs[train], r) for r in rhos]
    u_test = [utility(table.scores[test], table.costs[test], r) for r in rhos]
    tgt = targets(x[train], u_train, x[test])
    names = list(tgt[0])
    truth = torch.tensor([[(tgt[g][t] * u_test[g]).sum(1).mean() for t in names] for g in range(2)])
    truth = truth.reshape(-1)  # [P = 2 x targets], rho-major
    # the targets' probabilities on every table row (contexts are looked up by query id)
    full = torch.zeros(2 * len(names), table.num_queries, table.num_arms, dtype=torch.float64)
    for g in range(2):
        for j, t in enumerate(names):
            full[g * len(names) + j, torch.as_tensor(test)] = tgt[g][t]
    s = args.seeds
    env = SingleChoiceEnv(
        table,
        rho=[args.rho_log] * s,
        seeds=list(range(args.first_seed, args.first_seed + s)),
        split="test",
        features=x,
        dtype=torch.float64,
    )
    problem = env.problem()
    theta = fit_ridge(x[train], u_train[0])
    behaviours = {
        "uniform": RandomRouter.from_problem(problem),
        "epsilon_greedy": EpsilonGreedy.from_problem(problem, eps0=0.3, eps_min=0.1),
        "softmax": SoftmaxRouter(s, theta, temperature=0.1),
    }
    index = {q: i for i, q in enumerate(table.query_ids)}
    # a reward model pre-trained on the train split (full information), [2, N, K]
    q_oracle = torch.stack([(x @ fit_ridge(x[train], u).T).clamp(0, 1) for u in u_train])
    for behaviour, learner in behaviours.items():
        if behaviour not in args.behaviours.split(","):
            continue
        start = time.perf_counter()
        logs, _ = log_decisions(learner.double(), env, name=behaviour, seed=args.seed)
        est, lower_b, upper_b, lower_e, upper_e = [], [], [], [], []
        gen = torch.Generator().manual_seed(args.seed)
        for log in logs:
            rows_ = torch.tensor([index[q] for q in log.query_ids])
            pi = full[:, rows_]  # [P, n, K]
            reward = log.utility(torch.tensor(rhos, dtype=torch.float64))  # [2, n]
            fold = fold_assignment(log.num_decisions, 2, gen)
            q_hat = ridge_reward_model(log.features, log.action, reward, table.num_arms, 1.0, fold)
            reward_p = reward.repeat_interleave(len(names), 0)  # [P, n]
            q_p = q_hat.repeat_interleave(len(names), 0)  # [P, n, K]
            boot = estimate(
                pi,
                log.action,
                log.propensity,
                reward_p,
                q_p,
                num_bootstrap=args.bootstrap,
                generator=gen,
            )
            bern = estimate(
                pi, log.action, log.propensity, reward_p, q_p, num_bootstrap=0, interval="bernstein"
            )
            # the same DM/DR family with a reward model pre-trained on the train split
            q_o = q_oracle[:, rows_].repeat_interleave(len(names), 0)  # [P, n, K]
            boot_o = estimate(
                pi,
                log.action,
                log.propensity,
                reward_p,
                q_o,
                estimators=NEEDS_MODEL,
                num_bootstrap=args.bootstrap,
                generator=gen,
            )
            bern_o = estimate(
                pi,
                log.action,
                log.propensity,
                reward_p,
                q_o,
                estimators=NEEDS_MODEL,
                num_bootstrap=0,
                interval="bernstein",
            )
            # the DM/DR family with a forward reward model: block j of the log (in log order)
            # predicted by the ridge fitted on blocks before it
            blocks = time_blocks(log.num_decisions, args.forward_blocks)
            q_f = ridge_reward_model(
                log.features, log.action, reward, table.num_arms, 1.0, blocks, forward=True
            ).repeat_interleave(len(names), 0)
            boot_f = estimate(
                pi,
                log.action,
                log.propensity,
                reward_p,
                q_f,
                estimators=NEEDS_MODEL,
                num_bootstrap=args.bootstrap,
                generator=gen,
            )
            bern_f = estimate(
                pi,
                log.action,
                log.propensity,
                reward_p,
                q_f,
                estimators=NEEDS_MODEL,
                num_bootstrap=0,
                interval="bernstein",
            )
            parts_b, parts_e = (boot, boot_o, boot_f), (bern, bern_o, bern_f)
            est.append(torch.cat([o.value for o in parts_b]))
            lower_b.append(torch.cat([o.lower for o in parts_b]))
            upper_b.append(torch.cat([o.upper for o in parts_b]))
            lower_e.append(torch.cat([o.lower for o in parts_e]))
            upper_e.append(torch.cat([o.upper for o in parts_e]))
        est = torch.stack(est)  # [S, E, P]
        err = est - truth
        cover_b = ((torch.stack(lower_b) <= truth) & (truth <= torch.stack(upper_b))).double()
        cover_e = ((torch.stack(lower_e) <= truth) & (truth <= torch.stack(upper_e))).double()
        labels = list(ESTIMATORS) + [f"{e} (train model)" for e in NEEDS_MODEL]
        labels += [f"{e} (forward model)" for e in NEEDS_MODEL]
        for e, estimator in enumerate(labels):
            rows.append(
                {
                    "table": name,
                    "behaviour": behaviour,
                    "estimator": estimator,
                    "abs_bias": float(err[:, e].mean(0).abs().mean()),
                    "rmse": float(err[:, e].pow(2).mean(0).sqrt().mean()),
                    "coverage_bootstrap": float(cover_b[:, e].mean()),
                    "coverage_bernstein": float(cover_e[:, e].mean()),
                    "seeds": s,
                    "targets": len(truth),
                    "n": logs[0].num_decisions,
                }
            )
        print(f"  {name} {behaviour}: {time.perf_counter() - start:.0f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--rho-log", type=float, default=0.0)
    ap.add_argument("--rho-alt", type=float, default=500.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--first-seed", type=int, default=0, help="world seeds first-seed .. first-seed+seeds-1"
    )
    ap.add_argument("--behaviours", default="uniform,epsilon_greedy,softmax")
    ap.add_argument(
        "--forward-blocks",
        type=int,
        default=10,
        help="log-order blocks of the forward reward model (10: chosen on seeds 1000-1049)",
    )
    ap.add_argument("--tables", default="routerbench,openllm")
    ap.add_argument("--out", default="outputs/ope_truth/truth.csv")
    args = ap.parse_args()
    rows = []
    for name in args.tables.split(","):
        if name == "routerbench":
            table = load_routerbench(SHARED / "routerbench", drop_missing=True)
        else:
            base = SHARED / "openllm_lb_v2"
            table = load_openllm_leaderboard(
                base / "new_leaderboard_processed_20241205.pickle",
                base / "costs_from_paper.csv",
                drop_missing=True,
                trust_pickle=True,
            )
        run_table(name, table, args, rows)
    frame = pd.DataFrame(rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out, index=False)
    print(
        f"rho_log={args.rho_log}, rho_alt={args.rho_alt}, {args.seeds} seeds, "
        f"{args.bootstrap} bootstrap replicates; mean over {frame['targets'].iloc[0]} targets"
    )
    print(
        "| table | behaviour | estimator | abs bias | RMSE | coverage (bootstrap) | "
        "coverage (Bernstein) |"
    )
    print("|---|---|---|---:|---:|---:|---:|")
    for r in frame.itertuples():
        print(
            f"| {r.table} (n={r.n}) | {r.behaviour} | {r.estimator} | {r.abs_bias:.4f} | "
            f"{r.rmse:.4f} | {r.coverage_bootstrap:.2f} | {r.coverage_bernstein:.2f} |"
        )


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
