"""The real-data presets: files found under the data root (never from the current folder), and
the leaderboard pickle read without running any of its code and without trust."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from torchroute.configs_path import compose_config, group_configs
from torchroute.data import TableError, load_openllm_leaderboard
from torchroute.data.safe_pickle import load_data_pickle
from torchroute.data_root import DATA_ROOT_ENV

REPO = Path(__file__).resolve().parents[2]
PICKLE = "openllm_lb_v2/new_leaderboard_processed_20241205.pickle"
COSTS = "openllm_lb_v2/costs_from_paper.csv"


class _Payload:
    """Unpickling this creates ``marker``: proof that the file's code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def _plant(root: Path, marker: Path) -> Path:
    """A leaderboard pickle under ``root`` whose unpickling makes ``marker``."""
    path = root / PICKLE
    path.parent.mkdir(parents=True)
    data = {"leaderboard_x": {"correctness": _Payload(marker), "models": ["org/a", "org/b"]}}
    path.write_bytes(pickle.dumps(data))
    (root / COSTS).write_text("model,avg_cost_usd\na,0.1\nb,0.2\n")
    return path


@pytest.mark.parametrize("trust", [False, True])
def test_a_planted_leaderboard_pickle_is_refused_before_it_runs(tmp_path: Path, trust: bool):
    marker = tmp_path / "pwned"
    path = _plant(tmp_path, marker)
    with pytest.raises(TableError, match=r"processed_20241205\.pickle: .*names posix\.mkdir"):
        load_openllm_leaderboard(path, trust_pickle=trust)
    assert not marker.exists()


def test_the_preset_run_from_a_planted_parent_refuses_and_runs_nothing(tmp_path: Path):
    """The attack of the report: a pickle planted at ``<parent>/shared/data/...`` and the
    preset run from ``<parent>/sub`` (the data root named there too, explicitly)."""
    marker = tmp_path / "pwned"
    root = tmp_path / "shared" / "data"
    _plant(root, marker)
    (tmp_path / "sub").mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), DATA_ROOT_ENV: str(root)}
    argv = [sys.executable, "-m", "torchroute", "simulate", "experiment=openllm_leaderboard"]
    argv += ["rounds=5", "seeds=[0]", "rhos=[0]", f"out_dir={tmp_path / 'run'}"]
    done = subprocess.run(
        argv, cwd=tmp_path / "sub", env=env, capture_output=True, text=True, timeout=240
    )
    assert not marker.exists(), "the planted pickle's code ran"
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "processed_20241205.pickle" in line and "posix.mkdir" in line, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


def test_presets_name_their_files_under_the_data_root_whatever_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path / "root"))
    seen = {}
    for cwd in (tmp_path, REPO):
        monkeypatch.chdir(cwd)
        for name in ("openllm_leaderboard", "cabs_table2_openllm", "routerbench_baselines"):
            data = compose_config("simulate", [f"experiment={name}"]).data
            paths = [str(data.get(k)) for k in ("path", "pickle_path", "costs_csv") if data.get(k)]
            assert paths and all(p.startswith(str(tmp_path / "root") + "/") for p in paths), paths
            seen.setdefault(name, paths)
            assert seen[name] == paths


@pytest.mark.parametrize("preset", sorted(group_configs("experiment")))
def test_no_preset_trusts_a_pickle(preset: str):
    text = group_configs("experiment")[preset].read_text()
    assert not re.search(r"trust_pickle:\s*(true|yes|on)", text, re.IGNORECASE)


def test_the_real_pickle_loads_without_trust_as_the_full_unpickler_reads_it(shared_data: Path):
    with (shared_data / PICKLE).open("rb") as fh:
        expected = pickle.load(fh)  # the reference: the standard, unrestricted unpickler
    got = load_data_pickle(shared_data / PICKLE)
    assert list(got) == list(expected)
    for bench, entry in expected.items():
        assert list(got[bench]) == list(entry)
        assert got[bench]["models"] == entry["models"]
        corr, want = got[bench]["correctness"], entry["correctness"]
        if isinstance(want, dict):
            assert {k: np.asarray(v).tolist() for k, v in corr.items()} == {
                k: np.asarray(v).tolist() for k, v in want.items()
            }
        else:
            assert corr.dtype == want.dtype and np.array_equal(corr, want, equal_nan=True)
    bench = expected["leaderboard_gpqa_main"]
    table = load_openllm_leaderboard(
        shared_data / PICKLE, shared_data / COSTS, benchmarks=["leaderboard_gpqa_main"]
    )
    names = [m.split("__", 1)[1].removesuffix("-details") for m in bench["models"]]
    rows = [names.index(arm) for arm in table.arm_names]
    want = np.asarray(bench["correctness"], dtype=np.float64)[rows].T  # [n_questions, K]
    assert np.array_equal(np.asarray(table.scores, dtype=np.float64), want)


def test_the_trec_env_reads_its_default_folder_under_the_data_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from torchroute.envs.subset.trec import trec_subset_env

    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path / "root"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "root" / "trec_crowd"))):
        trec_subset_env(seeds=[0])
