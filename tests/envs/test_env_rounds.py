"""Every env config honours the run's ``rounds=`` key: the built env plays that many rounds."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from torchroute.cli import compose_config, config_dir
from torchroute.run import ConfigError, RunOptions, build_env
from torchroute.run.build import env_takes_table

ENV_CONFIGS = sorted(p.stem for p in (config_dir() / "env").glob("*.yaml"))
#: a small table with embeddings (no encoder) for the table-based envs
TABLE = ["data=low_rank_experts", "data.num_queries=200", "~encoder"]
#: overrides that shrink an env config (optional: any other config runs with its defaults)
SHRINK: dict[str, list[str]] = {
    "low_rank_experts": ["env.dims=[16]"],
    "trec_subset": ["env.constraints=[tight]"],
}


def _node(env: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(config_dir() / "env" / f"{env}.yaml"))


def _overrides(env: str, shared_data) -> list[str]:
    """A table env on :data:`TABLE`; a self-contained env without ``data``, a data file it
    names under the shared data folder read from there."""
    base = [f"env={env}", "out_dir=x", "seeds=[0]", "rhos=[0.0]", "features.pca_dim=null"]
    node = _node(env)
    if env_takes_table(node):
        return [*base, *TABLE, *SHRINK.get(env, [])]
    # a path names a folder under the data root (``${data_root:<name>}``): read it from there
    name = str(node.get("path", "")).removeprefix("${data_root:").removesuffix("}")
    path = [f"env.path={shared_data / Path(name).name}"] if "path" in node else []
    return [*base, "~data", *path, *SHRINK.get(env, [])]


@pytest.mark.parametrize("env", ENV_CONFIGS)
def test_every_env_config_honours_rounds(env, request):
    shared = request.getfixturevalue("shared_data") if "path" in _node(env) else None
    cfg = compose_config("simulate", [*_overrides(env, shared), "rounds=7"])
    resolved = OmegaConf.to_container(cfg.env, resolve=True)
    assert resolved.get("rounds", resolved.get("horizon")) == 7
    if env == "table_subset":  # horizon: ${rounds}, passed as is (its budget targets need
        return  # a priced table; tests/envs/test_subset.py builds it with a horizon)
    assert build_env(RunOptions.from_config(cfg)).env.horizon == 7
    cfg = compose_config("simulate", [*_overrides(env, shared), "rounds=0"])
    with pytest.raises(ConfigError, match=r"rounds|horizon"):
        build_env(RunOptions.from_config(cfg))
