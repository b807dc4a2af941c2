"""One served learner for every trade-off, against one learner per trade-off (RouterBench).

A stream of RouterBench test queries goes through serve's :class:`~torchroute.serve.Router`
(the route / feedback path of ``POST /route`` and ``POST /feedback``, the decision log in
memory), each request carrying a rho of ``{0, 500, 1000}`` in turn, to one warm
``objective: quality_cost`` learner; the same stream goes, at each fixed rho, to a warm
learner of the default objective (the utility at that rho). Each request is answered with
the table's score and cost of the routed model. Printed: per rho, the mean utility (at that
rho) over the requests that carried it, for the one learner and for the fixed-rho learner on
the same requests, and the difference (goal: >= -0.01).

    python benchmarks/serve_request_rho.py --learner linucb --queries 600 --seed 0
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import torch

from torchroute.configs_path import compose_config
from torchroute.run.build import build, build_learner
from torchroute.run.options import RunOptions
from torchroute.serve import Router

RHOS = (0.0, 500.0, 1000.0)


def _router(node: dict, problem, rho: float, name: str) -> Router:
    """A warm one-trial router of ``node`` at ``rho`` (embeddings are the features)."""
    one = dataclasses.replace(
        problem, num_trials=1, rho=torch.tensor([rho]), labels={}, init_rng=None
    )
    learner = build_learner(node, one, name, warm=True).cpu()
    return Router(learner, lambda p: build_learner(node, p, name), one, seed=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learner", default="linucb", help="linucb, lints or squarecb")
    parser.add_argument("--queries", type=int, default=600, help="test queries streamed")
    parser.add_argument("--seed", type=int, default=0, help="the order of the stream")
    args = parser.parse_args()
    cfg = compose_config(
        "simulate",
        ["experiment=routerbench_leaderboard", "seeds=[0]", "rhos=[0]", "device=cpu", "jobs=1"],
    )
    opts = RunOptions.from_config(cfg)
    built = build(opts)
    problem = built.env.problem()
    node = dict(cfg.learners[f"{args.learner}_warm"])
    table, features = built.table, built.features.to(problem.dtype)
    test = np.random.default_rng(args.seed).permutation(table.rows("test"))[: args.queries]
    rhos = [RHOS[i % len(RHOS)] for i in range(len(test))]

    one = _router({**node, "objective": "quality_cost"}, problem, 0.0, args.learner)
    fixed = {rho: _router(node, problem, rho, args.learner) for rho in RHOS}
    utility: dict[str, dict[float, list[float]]] = {"one": {}, "fixed": {}}
    for i, (row, rho) in enumerate(zip(test, rhos)):
        x = features[row][None]
        for kind, router, own in [("one", one, rho)] + [("fixed", fixed[r], None) for r in RHOS]:
            (decision,) = router.route(embeddings=x, rho=own)
            arm = router.arm_names.index(decision["model"])
            score, cost = float(table.scores[row, arm]), float(table.costs[row, arm])
            router.feedback([decision["request_id"]], [score], [cost])
            if kind == "one" or router is fixed[rho]:
                u = min(1.0, max(0.0, score - rho * cost))
                utility[kind].setdefault(rho, []).append(u)
        if (i + 1) % 150 == 0:
            print(f"{i + 1} queries", flush=True)
    print(f"{args.learner}, {len(test)} RouterBench test queries, seed {args.seed}")
    print("rho   one learner  fixed-rho learner  difference (SE)     requests")
    for rho in RHOS:
        one_u, fixed_u = np.array(utility["one"][rho]), np.array(utility["fixed"][rho])
        diff, n = one_u - fixed_u, len(one_u)
        se = diff.std(ddof=1) / np.sqrt(n)
        print(
            f"{rho:<5g} {one_u.mean():.4f}       {fixed_u.mean():.4f}             "
            f"{diff.mean():+.4f} ({se:.4f})   {n}"
        )


if __name__ == "__main__":
    main()
