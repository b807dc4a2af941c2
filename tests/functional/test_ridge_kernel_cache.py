"""Building, caching and falling back from the fused kernel, each case in a fresh process.

The compiler is taken away by pointing ``CXX`` at a binary that does not exist; the kernel
cache is a temporary folder (``TORCHROUTE_KERNEL_CACHE``), planted with a whole, a truncated
or no library.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from torchroute.functional import ridge_kernel as rk

MISSING_CXX = "/nonexistent/bin/c++"

# The probes: each returns a JSON-able dict. ``linucb``: the learner's kernel, the warnings,
# and one round's scores of the fused kernel against a float64 numpy LinUCB score (or the
# one-line error). ``graph``: the SquareCB-G solver, "auto" (the default) or "fused": whether
# the result is the eager path's bit for bit, the warnings, or the one-line error.
PROBES = r"""
import json, os, sys, warnings
import numpy as np
import torch
from torchroute.functional import ridge_kernel as rk
from torchroute.functional.graph_program import graph_squarecb_probs
from torchroute.learners import LinUCB


def linucb(kernel):
    out = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            learners = [LinUCB(2, 3, 5, kernel=kernel).double() for _ in range(2)]
        except rk.KernelUnavailableError as err:
            out["error"] = str(err)
            learners = []
    out["warnings"] = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    if learners:
        out["kernel"] = learners[0].kernel
        if learners[0].kernel != "torch":
            g = torch.Generator().manual_seed(0)
            a = torch.randn(2, 3, 5, 5, generator=g, dtype=torch.float64)
            a_inv = torch.linalg.inv(a @ a.transpose(-1, -2) + torch.eye(5, dtype=torch.float64))
            theta = torch.randn(2, 3, 5, generator=g, dtype=torch.float64)
            x = torch.randn(2, 1, 5, generator=g, dtype=torch.float64)
            got = rk.linucb_scores(a_inv.contiguous(), theta, x, 0.7).numpy()
            A, T, X = a_inv.numpy(), theta.numpy(), x.numpy()
            want = np.einsum("rkd,rbd->rbk", T, X) + 0.7 * np.sqrt(
                np.einsum("rbd,rkde,rbe->rbk", X, A, X)
            )
            out["max_err"] = float(np.abs(got - want).max())
    return out


def graph(kernel):
    g = torch.Generator().manual_seed(0)
    f = torch.rand(30, 11, generator=g)
    edges = torch.rand(30, 11, 11, generator=g) < 0.3
    out = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            runs = [graph_squarecb_probs(f, edges, 2.0, kernel=kernel) for _ in range(3)]
            eager = graph_squarecb_probs(f, edges, 2.0, kernel="torch")
            out["equals_eager"] = all(torch.equal(p, eager) for p in runs)
            out["max_gap"] = max(float((p - eager).abs().max()) for p in runs)
        except rk.KernelUnavailableError as err:
            out["error"] = str(err)
    out["warnings"] = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    return out


# Each case runs in a child forked after the imports (nothing of the kernel is loaded yet),
# so it starts as a fresh process would, without paying the imports again.
children = {}
for name, case in json.loads(sys.argv[1]).items():
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.environ["TORCHROUTE_KERNEL_CACHE"] = case["cache"]
            if case["cxx"] is not None:
                os.environ["CXX"] = case["cxx"]
            result = {"linucb": linucb, "graph": graph}[case["probe"]](case["kernel"])
            with open(case["out"], "w") as f:
                json.dump(result, f)
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    children[pid] = name
status = {}
for pid, name in children.items():
    _, code = os.waitpid(pid, 0)
    status[name] = os.waitstatus_to_exitcode(code)  # -7 would be SIGBUS
print(json.dumps(status))
"""


def _run_probes(cases: dict[str, dict], tmp: Path) -> dict[str, dict]:
    """Run ``{name: {cache, kernel, cxx, probe}}``, each case as a fresh process (forked from
    one that did the imports), all at once: ``name -> the probe's JSON``."""
    for name, case in cases.items():
        case["cache"], case["out"] = str(case["cache"]), str(tmp / f"{name}.json")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PROBES, json.dumps(cases)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    status = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(code == 0 for code in status.values()), (status, done.stderr[-3000:])
    return {name: json.loads((tmp / f"{name}.json").read_text()) for name in cases}


def _probe(cache: Path, kernel: str, cxx: str | None = None, probe: str = "linucb") -> dict:
    """One case in its own process."""
    tmp = cache.parent
    case = {"cache": cache, "kernel": kernel, "cxx": cxx, "probe": probe}
    return _run_probes({"probe": case}, tmp)["probe"]


@pytest.fixture(scope="module")
def built() -> Path:
    """A whole library built in this process (the user's cache), to plant elsewhere."""
    try:
        rk.kernel_library()
    except rk.KernelUnavailableError as err:
        pytest.skip(f"no C++ compiler to build the kernel: {err}")
    path = rk.library_path()
    assert rk.cached_library_ok(path)
    return path


def _plant(built: Path, cache: Path, keep: int | None = None) -> Path:
    """Copy the built library (its first ``keep`` bytes) and its manifest into ``cache``."""
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / built.name
    data = built.read_bytes()
    target.write_bytes(data if keep is None else data[:keep])
    shutil.copy(built.with_name(built.name + ".sha256"), target.with_name(target.name + ".sha256"))
    return target


@pytest.fixture(scope="module")
def probes(built: Path, tmp_path_factory) -> dict[str, dict]:
    """The fast cases, each in a fresh process, all at once: ``name -> the probe's JSON``."""
    root = tmp_path_factory.mktemp("kernel_caches")
    whole = root / "whole"
    _plant(built, whole)
    truncated = root / "truncated"
    _plant(built, truncated, keep=built.stat().st_size // 3)
    blocker = root / "file"
    blocker.write_text("not a folder")

    def case(cache: Path, kernel: str, cxx: str | None, probe: str) -> dict:
        return {"cache": cache, "kernel": kernel, "cxx": cxx, "probe": probe}

    cases = {
        "no_cxx_fused": case(root / "empty1", "fused", MISSING_CXX, "linucb"),
        "no_cxx_auto": case(root / "empty2", "auto", MISSING_CXX, "linucb"),
        "solver_no_cxx_auto": case(root / "empty3", "auto", MISSING_CXX, "graph"),
        "solver_no_cxx_fused": case(root / "empty4", "fused", MISSING_CXX, "graph"),
        "solver_cached": case(whole, "auto", MISSING_CXX, "graph"),
        "cached": case(whole, "fused", MISSING_CXX, "linucb"),
        "truncated": case(truncated, "fused", MISSING_CXX, "linucb"),
        "unwritable": case(blocker / "cache", "fused", None, "linucb"),  # the compiler is there
    }
    out = _run_probes(cases, root)
    out["truncated"]["target_ok"] = rk.cached_library_ok(truncated / built.name)
    out["unwritable"]["blocker"] = str(blocker)
    return out


def test_no_compiler_explicit_fused_is_a_one_line_error(probes):
    out = probes["no_cxx_fused"]
    assert "kernel" not in out
    assert "\n" not in out["error"] and "could not be built or loaded" in out["error"]
    assert MISSING_CXX in out["error"]


def test_no_compiler_auto_falls_back_to_eager_with_one_warning(probes):
    out = probes["no_cxx_auto"]
    assert out["kernel"] == "torch"
    assert len(out["warnings"]) == 1  # two learners built, one warning
    assert "using the eager torch path" in out["warnings"][0]


def test_solver_without_compiler_is_eager_with_one_warning(probes):
    out = probes["solver_no_cxx_auto"]
    assert out["equals_eager"]  # three calls, one build attempt, one warning
    assert len(out["warnings"]) == 1 and "using the eager torch path" in out["warnings"][0]


def test_solver_without_compiler_explicit_fused_is_a_one_line_error(probes):
    out = probes["solver_no_cxx_fused"]
    assert "\n" not in out["error"] and "could not be built or loaded" in out["error"]
    assert MISSING_CXX in out["error"]


def test_solver_uses_a_cached_library_without_a_compiler(probes):
    out = probes["solver_cached"]
    assert out["warnings"] == [] and out["max_gap"] < 1e-5  # fused: eager's up to rounding


def test_cached_library_is_loaded_without_a_compiler(probes):
    out = probes["cached"]
    assert out["kernel"] == "fused" and out["warnings"] == []
    assert out["max_err"] < 1e-12


def test_truncated_cache_entry_is_never_loaded(probes):
    out = probes["truncated"]
    assert not out["target_ok"]
    assert "could not be built or loaded" in out["error"]  # cannot rebuild: not a SIGBUS


def test_unwritable_cache_is_a_one_line_error(probes):
    out = probes["unwritable"]
    assert "\n" not in out["error"] and out["blocker"] in out["error"]


@pytest.mark.slow
def test_truncated_cache_entry_without_compiler_auto_is_eager(built, tmp_path):
    cache = tmp_path / "cache"
    _plant(built, cache, keep=built.stat().st_size // 3)
    out = _probe(cache, "auto", MISSING_CXX)
    assert out["kernel"] == "torch" and len(out["warnings"]) == 1


@pytest.mark.slow
def test_truncated_cache_entry_is_rebuilt(built, tmp_path):
    cache = tmp_path / "cache"
    target = _plant(built, cache, keep=4096)
    out = _probe(cache, "fused")  # a real build (tens of seconds)
    assert out["kernel"] == "fused" and out["max_err"] < 1e-12
    assert rk.cached_library_ok(target)
    assert target.stat().st_size > 4096


@pytest.mark.slow
def test_cli_kernel_fused_without_compiler_exits_2_with_one_line(tmp_path):
    env = {
        **os.environ,
        "TORCHROUTE_KERNEL_CACHE": str(tmp_path / "kernels"),
        "CXX": MISSING_CXX,
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    args = [
        "simulate",
        "experiment=default",
        f"out_dir={tmp_path / 'out'}",
        f"cache_dir={tmp_path / 'cache'}",
        "data.num_queries=60",
        "seeds=[0]",
        "rhos=[0]",
        "run_learners=[linucb]",
        "+learners.linucb.kernel=fused",
        "progress=false",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "torchroute", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("torchroute simulate: error")]
    assert len(lines) == 1 and "could not be built or loaded" in lines[0]
    assert not (tmp_path / "out" / "results.csv").exists()
    np.testing.assert_equal(len(list((tmp_path / "kernels").glob("*.so"))), 0)
