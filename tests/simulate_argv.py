"""The command line of a small ``simulate`` run (the default preset on 60 queries, one rho,
one seed, no report, no logger), shared by the tests of refused inputs."""

from __future__ import annotations

from pathlib import Path


def small_simulate(out: str | Path, *extra: str) -> list[str]:
    """``simulate experiment=default`` into ``out`` on 60 queries with ``extra`` overrides."""
    return [
        "simulate",
        "experiment=default",
        f"out_dir={out}",
        "data.num_queries=60",
        "rhos=[0]",
        "seeds=[0]",
        "progress=false",
        "report=false",
        "~logger",
        *extra,
    ]
