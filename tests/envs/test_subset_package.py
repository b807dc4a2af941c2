"""The subset envs live in the package ``torchroute.envs.subset``; the old module paths of a
saved config (``torchroute.envs.subset_table``, ``subset_instances``, ``subset_opt``) still
build, through :data:`torchroute.run.trust.MOVED_TARGETS`."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

import torchroute.envs
from tests.conftest import make_priced_table
from torchroute.envs.subset import TableSubsetEnv, solve_opt, table_subset_env, trec_subset_env
from torchroute.run.build import instantiate_node
from torchroute.run.trust import check_trusted, current_target


def test_the_public_names_are_the_packages():
    assert torchroute.envs.table_subset_env is table_subset_env
    assert torchroute.envs.trec_subset_env is trec_subset_env


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("torchroute.envs.subset_table.table_subset_env", "torchroute.envs.subset.table."),
        ("torchroute.envs.subset_instances.trec_subset_env", "torchroute.envs.subset.trec."),
        ("torchroute.envs.subset_opt.solve_opt", "torchroute.envs.subset.opt."),
    ],
)
def test_an_old_module_path_maps_to_its_new_module(old, new):
    assert current_target(old) == new + old.rsplit(".", 1)[1]
    if old.endswith("_env"):  # an env factory read from a saved run still builds
        check_trusted({"_target_": old}, "env", "config.yaml")


def test_a_saved_config_with_an_old_path_builds_the_env():
    node = OmegaConf.create(
        {"_target_": "torchroute.envs.subset_table.table_subset_env", "draws": 2, "budget": 0.5}
    )
    factory = instantiate_node(node, "env", _partial_=True)
    env = factory(table=make_priced_table(), rho=[0.0], seeds=[3], dtype=torch.float64)
    assert isinstance(env, TableSubsetEnv) and env.draws == 2
    plain = {"_target_": "torchroute.envs.subset_opt.solve_opt", "_partial_": True}
    assert instantiate_node(plain, "x").func is solve_opt
    assert current_target("torchroute.envs.subset_tables.x") == "torchroute.envs.subset_tables.x"
