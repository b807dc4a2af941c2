"""Per-learner cost of a CABS preset at its full trial count, projected to the whole stream.

Builds the preset's env once (all its trials: ``len(seeds) x len(rhos)``, the first
``--rounds`` rounds of each), then runs every learner (or ``--learners``) through
:func:`torchroute.loop.simulate` exactly as ``torchroute simulate`` does (same logging
interval, no checkpoint until the end) and measures its CPU seconds per round with
``time.process_time`` (robust to other jobs on a shared machine when torch runs one
thread: run it with ``OMP_NUM_THREADS=1``). The projection multiplies by the preset's full
horizon (``--horizon``, default the test split's length).

    OMP_NUM_THREADS=1 python benchmarks/cabs_profile.py experiment=cabs_table2_openllm \\
        oracle_ckpt=<oracle dir> cache_dir=<cache> --rounds 60 --learners linucb cabs_d

Prints a Markdown table: learner, CPU s/round, projected minutes for the full stream.
"""

from __future__ import annotations

import argparse
import logging
import time

import pandas as pd

from torchroute.configs_path import compose_config
from torchroute.loop import simulate
from torchroute.run import RunOptions
from torchroute.run.build import build_env, learner_for
from torchroute.tracking import NullTracker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="simulate overrides (experiment=...)")
    parser.add_argument("--rounds", type=int, default=60, help="rounds timed per learner")
    parser.add_argument("--learners", nargs="*", default=None, help="default: all of the preset")
    parser.add_argument("--horizon", type=int, default=None, help="full rounds per trial")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    full = RunOptions.from_config(compose_config("simulate", args.overrides))
    cfg = compose_config("simulate", [*args.overrides, f"rounds={args.rounds}", "progress=false"])
    opts = RunOptions.from_config(cfg)
    start = time.perf_counter()
    built = build_env(opts)
    env = built.env
    horizon = args.horizon or len(built.table.rows(full.split))
    print(
        f"env: R={env.num_trials} trials, K={env.num_arms}, d={env.problem().dim}, "
        f"{args.rounds} rounds timed, full horizon {horizon} "
        f"(built in {time.perf_counter() - start:.0f} s)"
    )
    rows = []
    for name in args.learners or list(opts.run_learners):
        learner = learner_for(opts, name, env)
        cpu, wall = time.process_time(), time.perf_counter()
        simulate(learner, env, seed=opts.loop_seed, rng=opts.rng, log_every=opts.log_every,
                 tracker=NullTracker(), progress=False)  # fmt: skip
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        per_round = cpu / args.rounds
        projected = per_round * horizon / 60
        rows.append(
            {
                "learner": name,
                "cpu_s_per_round": per_round,
                "wall_s": wall,
                "projected_min": projected,
            }
        )
        print(f"{name}: {per_round:.4f} CPU s/round ({wall:.1f} s wall)", flush=True)
    table = pd.DataFrame(rows).set_index("learner").sort_values("projected_min", ascending=False)
    print(table.to_markdown(floatfmt=".4f"))
    print(f"total projected: {table['projected_min'].sum():.1f} CPU min for {horizon} rounds")


if __name__ == "__main__":
    main()
