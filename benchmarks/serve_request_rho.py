"""One served learner for every trade-off, against one learner per trade-off (RouterBench).

A stream of RouterBench test queries goes through serve's :class:`~torchroute.serve.Router`
(the route / feedback path of ``POST /route`` and ``POST /feedback``, the decision log in
memory), each request carrying a rho of ``{0, 500, 1000}`` in turn, to ONE warm learner
that takes each request's rho (``--learner``):

- ``linucb``, ``lints``, ``squarecb``: the preset's warm learner with ``objective:
  quality_cost`` and ``--cost-model`` (``price``: each model's known price; ``ridge``:
  each query's cost predicted by a ridge fitted on train), and ``--warm-weight`` if given;
- ``residual_linucb``, ``residual_lints``: an online correction of the static router
  ``--base`` (a learner of the preset, default ``mlp``), ``--lam`` and ``--alpha`` / v.

The one learner is built (its choices on the validation split: the warm weight, the base
router's hyper-parameters) at the trial rho ``--build-rho``. The same stream goes, at
each fixed rho, to the references, each built at that rho and learning from every request:

- ``same``: the learner of the same kind decided for that rho (for the ridge learners: the
  warm learner of the default objective, the utility at that rho; for the residual
  learners: the same residual learner with its base chosen for that rho);
- ``linucb``: the preset's warm LinUCB of the default objective (``linucb_warm``);
- ``static``: the base static router (``--base``) chosen for that rho;
- ``best``: per rho, whichever of ``linucb`` and ``static`` has the higher mean utility on
  the requests of that rho (chosen on the test stream itself: a reference that favours
  the references).

Each request is answered with the table's score and cost of the routed model. Printed:
per rho, the mean utility (at that rho) over the requests that carried it, for the one
learner and each reference on the same requests, and the paired differences one minus
``same`` and one minus ``best`` with their standard errors (goal: >= -0.01).

    python benchmarks/serve_request_rho.py --learner linucb --queries 600 --seed 0
    python benchmarks/serve_request_rho.py --learner residual_linucb --queries 900 --seed 0
    python benchmarks/serve_request_rho.py --learner linucb --cost-model ridge --queries 900
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import ListConfig

from torchroute.configs_path import compose_config
from torchroute.run.build import build, build_learner
from torchroute.run.classes import learner_class
from torchroute.run.options import RunOptions
from torchroute.serve import Router

RHOS = (0.0, 500.0, 1000.0)
RIDGE = ("linucb", "lints", "squarecb")
RESIDUAL = ("residual_linucb", "residual_lints")


def _router(node: dict, problem: Any, rho: float, name: str) -> Router:
    """A warm one-trial router of ``node`` at ``rho`` (embeddings are the features)."""
    one = dataclasses.replace(
        problem, num_trials=1, rho=torch.tensor([rho]), labels={}, init_rng=None
    )
    learner = build_learner(node, one, name, warm=True).cpu()
    return Router(learner, lambda p: build_learner(node, p, name), one, seed=0)


def _first_values(node: dict) -> dict:
    """``node`` with each option a ``simulate`` run chooses on validation (the class's
    ``chosen_on_validation``, given as a list in the preset: a change test, a discount)
    at its first listed value: one learner is built here, on a stationary stream."""
    keys = getattr(learner_class(node), "chosen_on_validation", ())
    return {
        k: (v[0] if k in keys and isinstance(v, (list, tuple, ListConfig)) else v)
        for k, v in node.items()
    }


def _nodes(cfg: Any, args: argparse.Namespace) -> tuple[dict, dict, dict, dict]:
    """The config nodes of the one learner, the same-kind fixed-rho learner, the fixed-rho
    utility LinUCB and the base static router."""
    learners = cfg.learners
    linucb = _first_values(dict(learners["linucb_warm"]))
    static = dict(learners[args.base])
    if args.learner in RIDGE:
        same = _first_values(dict(learners[f"{args.learner}_warm"]))
        one = {**same, "objective": "quality_cost", "cost_model": args.cost_model}
        if args.warm_weight is not None:
            one["warm_weight"] = args.warm_weight
        return one, same, linucb, static
    width = "alpha" if args.learner == "residual_linucb" else "v"
    same = {**dict(learners[args.learner]), "base": static, "lam": args.lam, width: args.alpha}
    same = _first_values(same)
    return same, same, linucb, static


def _stream(args: argparse.Namespace) -> dict[str, dict[float, np.ndarray]]:
    """Run the stream; per router kind and rho, the utilities of the requests of that rho."""
    cfg = compose_config(
        "simulate",
        ["experiment=routerbench_leaderboard", "seeds=[0]", "rhos=[0]", "device=cpu", "jobs=1"],
    )
    built = build(RunOptions.from_config(cfg))
    problem = built.env.problem()
    one_node, same_node, linucb_node, static_node = _nodes(cfg, args)
    table, features = built.table, built.features.to(problem.dtype)
    test = np.random.default_rng(args.seed).permutation(table.rows("test"))[: args.queries]
    rhos = [RHOS[i % len(RHOS)] for i in range(len(test))]

    routers: dict[str, Any] = {"one": _router(one_node, problem, args.build_rho, args.learner)}
    for kind, node in [("same", same_node), ("linucb", linucb_node), ("static", static_node)]:
        if kind == "linucb" and node == same_node:
            routers[kind] = routers["same"]  # the same learner: one router per rho
            continue
        routers[kind] = {rho: _router(node, problem, rho, kind) for rho in RHOS}
    utility: dict[str, dict[float, list[float]]] = {kind: {} for kind in routers}
    for i, (row, rho) in enumerate(zip(test, rhos)):
        x = features[row][None]
        served: dict[int, float] = {}  # id(router) -> utility of this request (shared refs)
        for kind, which in routers.items():
            for router_rho, router in [(rho, which)] if kind == "one" else which.items():
                if id(router) not in served:
                    own = rho if kind == "one" else None
                    (decision,) = router.route(embeddings=x, rho=own)
                    arm = router.arm_names.index(decision["model"])
                    score, cost = float(table.scores[row, arm]), float(table.costs[row, arm])
                    router.feedback([decision["request_id"]], [score], [cost])
                    served[id(router)] = min(1.0, max(0.0, score - router_rho * cost))
                if router_rho == rho:
                    utility[kind].setdefault(rho, []).append(served[id(router)])
        if (i + 1) % 150 == 0:
            print(f"{i + 1} queries", flush=True)
    return {k: {r: np.array(v) for r, v in per.items()} for k, per in utility.items()}


def _diff(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """The mean paired difference ``a - b`` and its standard error."""
    d = a - b
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learner", default="linucb", choices=RIDGE + RESIDUAL)
    parser.add_argument("--queries", type=int, default=600, help="test queries streamed")
    parser.add_argument("--seed", type=int, default=0, help="the order of the stream")
    parser.add_argument(
        "--cost-model", default="price", choices=("price", "ridge"), help="ridge learners' costs"
    )
    parser.add_argument("--base", default="mlp", help="the preset's static router (residual)")
    parser.add_argument("--lam", type=float, default=100.0, help="residual: prior precision")
    parser.add_argument("--alpha", type=float, default=1.0, help="residual: alpha (or v)")
    parser.add_argument(
        "--build-rho", type=float, default=0.0, help="the trial rho the one learner is built at"
    )
    parser.add_argument(
        "--warm-weight",
        type=float,
        default=None,
        help="ridge learners: the one learner's warm weight (default: the preset's, chosen "
        "on validation at --build-rho)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    utility = _stream(args)
    n = sum(len(v) for v in utility["one"].values())
    print(
        f"{args.learner} (cost_model {args.cost_model}, base {args.base}, built at rho "
        f"{args.build_rho:g}), {n} RouterBench test queries, seed {args.seed}"
    )
    print("rho   one     same    linucb  static  best    one-same (SE)     one-best (SE)")
    out = []
    for rho in RHOS:
        means = {kind: float(per[rho].mean()) for kind, per in utility.items()}
        best = "linucb" if means["linucb"] >= means["static"] else "static"
        same, se_same = _diff(utility["one"][rho], utility["same"][rho])
        vs_best, se_best = _diff(utility["one"][rho], utility[best][rho])
        print(
            f"{rho:<5g} {means['one']:.4f}  {means['same']:.4f}  {means['linucb']:.4f}  "
            f"{means['static']:.4f}  {best:<7} {same:+.4f} ({se_same:.4f})  "
            f"{vs_best:+.4f} ({se_best:.4f})"
        )
        out.append(
            {
                "rho": rho,
                **means,
                "best": best,
                "one_minus_same": same,
                "se_same": se_same,
                "one_minus_best": vs_best,
                "se_best": se_best,
            }
        )
    if args.json is not None:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": None}, "rhos": out}))


if __name__ == "__main__":
    main()
