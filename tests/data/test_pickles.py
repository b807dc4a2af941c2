"""Pickles are read only with an explicit trust_pickle=True (the leaderboard's with a restricted
unpickler instead), and nothing in them runs before."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from torchroute.data import TableError, load_openllm_leaderboard, load_routerbench, load_table
from torchroute.data.generic import read_frame

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "data"
REFUSAL = (
    r"refusing to unpickle .*arbitrary code.*"
    r"pass trust_pickle=True \(data.trust_pickle=true\) only for a file you trust"
)


class _Payload:
    """Unpickling this creates ``marker``: proof that the file's code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def _malicious(tmp_path: Path, name: str) -> tuple[Path, Path]:
    marker = tmp_path / "pwned"
    path = tmp_path / name
    path.write_bytes(pickle.dumps(_Payload(marker)))
    return path, marker


@pytest.mark.parametrize("suffix", [".pkl", ".pickle", ".PKL"])
def test_generic_refuses_untrusted_pickle_before_running_it(tmp_path: Path, suffix: str):
    path, marker = _malicious(tmp_path, f"table{suffix}")
    with pytest.raises(TableError, match=f"table{suffix}: {REFUSAL}, or convert it to Parquet"):
        load_table(path)
    with pytest.raises(TableError, match=REFUSAL):
        read_frame(path)
    assert not marker.exists()


def test_routerbench_refuses_untrusted_pickle_file_and_directory(tmp_path: Path):
    path, marker = _malicious(tmp_path, "routerbench_0shot.pkl")
    with pytest.raises(TableError, match=f"routerbench_0shot.pkl: {REFUSAL}"):
        load_routerbench(path)
    with pytest.raises(TableError, match=f"routerbench_0shot.pkl: {REFUSAL}"):
        load_routerbench(tmp_path)  # a directory holding the pickle
    assert not marker.exists()


@pytest.mark.parametrize("trust", [False, True])
def test_openllm_refuses_a_pickle_of_code_even_trusted(tmp_path: Path, trust: bool):
    path, marker = _malicious(tmp_path, "leaderboard.pickle")
    with pytest.raises(TableError, match=r"leaderboard.pickle: .*names posix\.mkdir"):
        load_openllm_leaderboard(path, trust_pickle=trust)
    assert not marker.exists()
    with pytest.raises(TableError, match=r"nope\.pickle: no such file"):
        load_openllm_leaderboard(tmp_path / "nope.pickle", trust_pickle=True)


def test_trusted_pickles_load(tmp_path: Path):
    frame = pd.DataFrame(
        {"query_id": ["q0", "q1"], "score:a": [1.0, 0.0], "cost:a": [0.1, 0.2], "split": "test"}
    )
    frame.to_pickle(tmp_path / "t.pkl")
    assert load_table(tmp_path / "t.pkl", trust_pickle=True).query_ids == ("q0", "q1")
    data = {"bench": {"correctness": np.array([[1.0, 0.0], [0.0, 1.0]]), "models": ["a", "b"]}}
    with open(tmp_path / "lb.pickle", "wb") as fh:
        pickle.dump(data, fh)
    table = load_openllm_leaderboard(tmp_path / "lb.pickle", trust_pickle=True)
    assert table.arm_names == ("a", "b") and table.num_queries == 2


def test_csv_and_parquet_need_no_trust(tmp_path: Path):
    frame = pd.DataFrame({"query_id": ["q0"], "score:a": [1.0], "cost:a": [0.1]})
    frame.to_csv(tmp_path / "t.csv", index=False)
    frame.to_parquet(tmp_path / "t.parquet")
    assert load_table(tmp_path / "t.csv").num_queries == 1
    assert load_table(tmp_path / "t.parquet").num_queries == 1


@pytest.mark.parametrize("config", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_data_configs_declare_trust_pickle_false(config: Path):
    import importlib
    import inspect

    cfg = yaml.safe_load(config.read_text())
    for base in cfg.get("defaults", []):  # a config extending another takes its target
        if isinstance(base, str) and base != "_self_":
            cfg = {**yaml.safe_load((CONFIGS / f"{base}.yaml").read_text()), **cfg}
    module, _, name = cfg["_target_"].rpartition(".")
    target = getattr(importlib.import_module(module), name)
    if "trust_pickle" in inspect.signature(target).parameters:
        assert cfg.get("trust_pickle") is False, f"{config.name}: declare trust_pickle: false"
    else:
        assert "trust_pickle" not in cfg, f"{config.name}: {name} takes no trust_pickle"
