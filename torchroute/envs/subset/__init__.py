"""Multinomial subset routing (docs/papers/subset.md): the env, its instances, its ``OPT``.

- :mod:`~torchroute.envs.subset.base`: :class:`SubsetProblem` (what subset learners know up
  front) and :class:`SubsetEnv` (sum-max rewards, long-run cost targets, the metrics);
- :mod:`~torchroute.envs.subset.opt`: the benchmark ``OPT`` policy (cvxpy, set-up only);
- :mod:`~torchroute.envs.subset.trec`: the TREC 2010 crowdsourcing instances;
- :mod:`~torchroute.envs.subset.table`: best-of-M LLM routing on a routing table.

Before this package the four modules were ``torchroute.envs.subset``,
``subset_opt``, ``subset_instances`` and ``subset_table``; a saved run naming one of the
old paths still loads (:data:`torchroute.run.trust.MOVED_TARGETS`).
"""

from torchroute.envs.subset.base import (
    FEASIBLE_TOL,
    FEASIBLE_TOL_LOOSE,
    SubsetEnv,
    SubsetProblem,
    check_subset_inputs,
)
from torchroute.envs.subset.opt import UnreachableTargetError, solve_opt
from torchroute.envs.subset.table import TableSubsetEnv, table_subset_env
from torchroute.envs.subset.trec import load_trec_pool, trec_subset_env

__all__ = [
    "FEASIBLE_TOL",
    "FEASIBLE_TOL_LOOSE",
    "SubsetEnv",
    "SubsetProblem",
    "TableSubsetEnv",
    "UnreachableTargetError",
    "check_subset_inputs",
    "load_trec_pool",
    "solve_opt",
    "table_subset_env",
    "trec_subset_env",
]
