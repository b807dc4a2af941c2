"""The device check (:mod:`torchroute.devicecheck`, run by ``benchmarks/gpu_check.py``): CPU
dry run, its pieces, and CUDA runs.

Tests marked ``gpu`` run the checks on CUDA (small) and are skipped without a CUDA device;
the others run anywhere.
"""

from __future__ import annotations

import math

import pytest
import torch

from torchroute.devicecheck import cases, check, problems, throughput
from torchroute.devicecheck.compare import (
    EXACT,
    Tol,
    comparable_state,
    compare_states,
    placement_failures,
)
from torchroute.devicecheck.main import main
from torchroute.devicecheck.randomness import CpuRandomness
from torchroute.learners import LinUCB

needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)"
)
SMALL = ["--rounds", "6", "--workers", "1", "--linucb-trials", "8", "--linucb-dim", "8"]
SMALL += ["--graph-instances", "16", "--hpg-trials", "4", "--hpg-dim", "16", "--bench-rounds", "2"]


# ---------------------------------------------------------------- CPU dry run
@pytest.mark.slow  # every case (minutes); make test dry-runs one case (tests/test_extension.py)
def test_cpu_dry_run_checks_every_case_and_passes(capsys):
    assert main(["--device", "cpu", *SMALL]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    for name in cases.CASES:
        assert lines[name].endswith("ok"), lines[name]
    assert out.count("trial-rounds/s") == 3 and "all checks passed" in out


def test_redirected_draws_are_those_of_a_cpu_generator_with_the_same_seed():
    g = torch.Generator().manual_seed(5)
    torch.manual_seed(3)
    with CpuRandomness("cpu") as mode:
        a = torch.rand(4, generator=g, dtype=torch.float64)
        b = torch.multinomial(torch.ones(3, 5), 2, generator=g)
        g.manual_seed(5)  # re-seeded with the same seed: the stream restarts
        c = torch.rand(4, generator=g, dtype=torch.float64)
        x = torch.empty(6)
        x.uniform_(generator=g)
        d = torch.nn.functional.dropout(torch.ones(8), 0.5, training=True)  # default RNG
    assert mode.redirected == 5
    ref = torch.Generator().manual_seed(5)
    assert torch.equal(a, torch.rand(4, generator=ref, dtype=torch.float64))
    assert torch.equal(b, torch.multinomial(torch.ones(3, 5), 2, generator=ref))
    ref.manual_seed(5)
    assert torch.equal(c, torch.rand(4, generator=ref, dtype=torch.float64))
    assert torch.equal(x, torch.empty(6).uniform_(generator=ref))
    torch.manual_seed(3)
    assert torch.equal(d, torch.nn.functional.dropout(torch.ones(8), 0.5, training=True))


def test_comparisons_flag_values_outside_the_tolerance():
    tol = Tol(rtol=1e-9, atol=1e-12)
    base = {"a_inv": torch.tensor([3.0, 0.0, -4.0], dtype=torch.float64), "n": torch.tensor([4])}
    near = {"a_inv": base["a_inv"] * (1 + 1e-11), "n": torch.tensor([4])}
    far = {"a_inv": torch.tensor([3.0, 1e-6, -4.0], dtype=torch.float64), "n": base["n"]}
    assert compare_states(near, base, tol) == []
    assert compare_states(far, base, tol) == ["state.a_inv (rel err 2e-07)"]  # 1e-6/5
    inf = {"a_inv": torch.tensor([3.0, torch.inf, -4.0], dtype=torch.float64), "n": base["n"]}
    assert compare_states(inf, base, tol) == ["state.a_inv (rel err inf)"]
    assert compare_states({**base, "n": torch.tensor([5])}, base, tol) == ["state.n (rel err inf)"]
    assert compare_states({"a_inv": base["a_inv"]}, base, tol)[0].startswith("state keys")


def _eigen_state(basis: torch.Tensor, theta: list[float]) -> dict:
    learner = LinUCB(1, 2, 3)
    learner.register_buffer("basis", basis[None])
    learner.register_buffer("theta", torch.tensor([theta]))
    return comparable_state(learner)


def test_eigen_pairs_are_compared_through_their_matrix():
    state = _eigen_state(torch.eye(3), [2.0, 0.0, 1.0])
    key = "basis·diag(theta)·basisᵀ"
    assert torch.equal(state[key], torch.diag(torch.tensor([2.0, 0.0, 1.0]))[None])
    flipped = _eigen_state(-torch.eye(3), [2.0, 0.0, 1.0])  # other eigenvector signs
    assert compare_states(flipped, state, EXACT) == []
    other = _eigen_state(torch.eye(3), [2.0, 0.0, 1.5])
    assert compare_states(other, state, EXACT)[0].startswith(f"state.{key}")


def test_coverage_flags_a_config_that_is_neither_checked_nor_skipped():
    stems = cases.packaged_config_stems()
    assert cases.coverage_failures(stems) == []
    assert cases.coverage_failures([*stems, "new_router"]) == [
        "coverage: configs/learner/new_router.yaml is neither in CASES nor skipped"
    ]
    without = [s for s in stems if s != "linucb"]
    assert any("'linucb', not a config" in f for f in cases.coverage_failures(without))


def test_placement_lists_the_tensors_off_the_device():
    learner = LinUCB(2, 3, 4)
    assert placement_failures(learner, torch.device("cpu"), "x") == []
    bad = placement_failures(learner, torch.device("meta"), "after .to(device)")
    assert bad[0].startswith("after .to(device): ") and "a_inv on cpu" in bad[0]
    assert placement_failures(learner.to("meta"), torch.device("meta"), "x") == []


# ------------------------------------------------------------------------- CUDA
@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("name", sorted(cases.CASES))
def test_case_matches_the_cpu_and_stays_on_cuda(name):
    result = check.check_case(name, torch.device("cuda"), 40, seed=0)
    assert result.failures == []


@pytest.mark.gpu
@needs_cuda
def test_cuda_draws_are_fed_from_the_cpu_stream():
    cuda = torch.Generator(device="cuda").manual_seed(7)
    with CpuRandomness("cuda") as mode:
        a = torch.rand(5, generator=cuda, device="cuda", dtype=torch.float64)
        b = torch._standard_gamma(torch.full((4,), 2.0, device="cuda"), generator=cuda)
        c = torch.multinomial(torch.ones(3, 6, device="cuda"), 1, generator=cuda)
    assert mode.redirected == 3 and a.is_cuda and b.is_cuda and c.is_cuda
    ref = torch.Generator().manual_seed(7)
    assert torch.equal(a.cpu(), torch.rand(5, generator=ref, dtype=torch.float64))
    assert torch.equal(b.cpu(), torch._standard_gamma(torch.full((4,), 2.0), generator=ref))
    assert torch.equal(c.cpu(), torch.multinomial(torch.ones(3, 6), 1, generator=ref))


@pytest.mark.gpu
@needs_cuda
def test_throughput_runs_on_cuda():
    rates = [
        throughput.linucb_rate("cuda", trials=64, dim=16, rounds=2),
        throughput.graph_program_rate("cuda", instances=64, rounds=1),
        throughput.hpg_rate("cuda", trials=4, dim=32, rounds=2),
    ]
    assert all(math.isfinite(r) and r > 0 for r in rates)


@pytest.mark.gpu
@needs_cuda
def test_small_envs_live_on_cuda():
    for name, build in problems.ENVS.items():
        env = build("cuda", 5)
        assert env.device.type == "cuda", name
        assert env.context(0).x.is_cuda, name
