"""Per-trial random streams against a pure-Python SplitMix64, scipy's distributions, and
torch's own samplers (the shared path).

The keys are fixed, so every statistic below is one deterministic number: the bounds are
chosen from theory with a wide margin (at least 6 standard errors, or p-values above
1e-4), and they cannot flake.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from torchroute.functional.gamma_sampler import FIRST, SECOND, budget, sample_gamma
from torchroute.functional.random import (
    TrialRNG,
    gamma,
    integers,
    mix64,
    normal,
    trial_keys,
    uniform,
)
from torchroute.functional.sampling import sample_categorical, sample_multinomial

stats = pytest.importorskip("scipy.stats")

F64 = torch.float64
KEYS = torch.tensor([3, -7, 2**62 + 11], dtype=torch.long)
N = 100_000
MASK = (1 << 64) - 1


def _mix(z: int) -> int:
    """SplitMix64's finaliser on Python integers (the published constants)."""
    z &= MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def _reference_words(key: int, counter: int, count: int) -> list[int]:
    """Element j of call ``counter``: the SplitMix64 stream seeded with
    ``mix(key ^ mix(counter + 1))``, as unsigned 64-bit integers."""
    base = _mix((key & MASK) ^ _mix(counter + 1))
    return [_mix(base + (j + 1) * 0x9E3779B97F4A7C15) for j in range(count)]


def test_words_are_splitmix64_of_key_counter_and_element():
    rng = TrialRNG(KEYS)
    for counter in range(3):
        words = rng.words((3, 2, 5))
        assert rng.counter == counter + 1
        for r, key in enumerate(KEYS.tolist()):
            got = [w & MASK for w in words[r].reshape(-1).tolist()]
            assert got == _reference_words(key, counter, 10)


def test_uniforms_are_the_top_bits_on_the_dtype_grid():
    rng = TrialRNG(KEYS)
    words = TrialRNG(KEYS).words((3, 50))
    u64, u32 = rng.uniform((3, 50), F64), TrialRNG(KEYS).uniform((3, 50), torch.float32)
    expect = [[(w & MASK) >> 11 for w in row] for row in words.tolist()]
    assert (u64 * 2.0**53).long().tolist() == expect
    assert u32.dtype == torch.float32 and ((u32 * 2**24) == (u32 * 2**24).floor()).all()
    assert ((u32 >= 0) & (u32 < 1)).all()


def test_uniform_moments_and_ks():
    u = TrialRNG(KEYS).uniform((3, N), F64)
    se_mean, se_var = math.sqrt(1 / 12 / N), math.sqrt(1 / 180 / N)  # Var(U) = 1/12
    assert ((u.mean(1) - 0.5).abs() < 6 * se_mean).all()
    assert ((u.var(1) - 1 / 12).abs() < 6 * se_var).all()
    assert ((u >= 0) & (u < 1)).all()
    for row in u:
        assert stats.kstest(row.numpy(), "uniform").pvalue > 1e-4


def test_normal_moments_and_ks():
    z = TrialRNG(KEYS).normal((3, N), F64)
    assert (z.mean(1).abs() < 6 / math.sqrt(N)).all()
    assert ((z.var(1) - 1).abs() < 6 * math.sqrt(2 / N)).all()
    assert ((z**3).mean(1).abs() < 6 * math.sqrt(15 / N)).all()  # E z^6 = 15
    for row in z:
        assert stats.kstest(row.numpy(), "norm").pvalue > 1e-4


@pytest.mark.parametrize("alpha", [0.3, 1.0, 5.0])
def test_gamma_mean_variance_and_ks(alpha):
    x = TrialRNG(KEYS).gamma(torch.full((3, N), alpha, dtype=F64))
    # Gamma(a): mean a, variance a, 4th central moment 3a^2 + 6a
    se_mean, se_var = math.sqrt(alpha / N), math.sqrt((2 * alpha**2 + 6 * alpha) / N)
    assert ((x.mean(1) - alpha).abs() < 6 * se_mean).all()
    assert ((x.var(1) - alpha).abs() < 8 * se_var).all()
    assert (x >= 0).all() and torch.isfinite(x).all()
    for row in x:
        assert stats.kstest(row.numpy(), "gamma", args=(alpha,)).pvalue > 1e-4


def test_gamma_failure_bound_of_the_docstring():
    """One Marsaglia–Tsang proposal at shape 1 (the worst case) is accepted with probability
    ~0.9515, so all FIRST + SECOND = 12 proposals fail with probability below 3e-16."""
    g = torch.Generator().manual_seed(0)
    x, u = torch.randn(10**6, generator=g, dtype=F64), torch.rand(10**6, generator=g, dtype=F64)
    d = 2.0 / 3.0
    v = (1 + x / math.sqrt(9 * d)) ** 3
    ok = (v > 0) & (u.log() < 0.5 * x * x + d * (1 - v + v.clamp_min(1e-300).log()))
    accept = float(ok.double().mean())
    assert accept > 0.95
    assert (1 - accept) ** (FIRST + SECOND) < 3e-16
    assert all(budget(n) >= n / 16 for n in range(1, 1000))


def _reference_gamma(key: int, counter: int, alphas: list[float]) -> list[float]:
    """One gamma draw call of one trial, element by element in plain Python, as the
    sampler's module docstring states it: uniform ``i`` of the call is
    ``((word_i >> 11) + 1) 2^-53``; element ``j``'s first proposals read uniforms
    ``k n + j`` (Box–Muller radius and angle, two acceptance uniforms, the boost), the first
    ``budget(n)`` elements rejected twice read ``(2 FIRST + 1) n + 2 SECOND j + k``; the first
    accepted proposal wins; none accepted: ``d``."""
    n, width = len(alphas), 2 * FIRST + 1
    base = _mix((key & MASK) ^ _mix(counter + 1))

    def u(i: int) -> float:
        return ((_mix(base + (i + 1) * 0x9E3779B97F4A7C15) >> 11) + 1) * 2.0**-53

    def first_accepted(d: float, xs: list[float], us: list[float]) -> float | None:
        for x, v_u in zip(xs, us):
            v = (1 + x / math.sqrt(9 * d)) ** 3
            if v > 0 and math.log(v_u) < 0.5 * x * x + d * (1 - v + math.log(v)):
                return v
        return None

    def normals(us: list[float]) -> list[float]:
        m = len(us) // 2
        radii = [math.sqrt(-2 * math.log(a)) for a in us[:m]]
        angles = [2 * math.pi * a for a in us[m:]]
        return [r * math.cos(a) for r, a in zip(radii, angles)] + [
            r * math.sin(a) for r, a in zip(radii, angles)
        ]

    out, second = [], 0
    for j, alpha in enumerate(alphas):
        d = (alpha + 1 if alpha < 1 else alpha) - 1 / 3
        first = [u(k * n + j) for k in range(width)]
        v = first_accepted(d, normals(first[:FIRST]), first[FIRST : 2 * FIRST])
        if v is None and second < budget(n):
            second += 1
            more = [u(width * n + 2 * SECOND * j + k) for k in range(2 * SECOND)]
            v = first_accepted(d, normals(more[:SECOND]), more[SECOND:])
        value = d * (1.0 if v is None else v)
        out.append(value * first[-1] ** (1 / alpha) if alpha < 1 else value)
    return out


def test_gamma_follows_the_documented_scheme_element_by_element():
    """Against a plain-Python reading of the scheme (shapes near 1, where proposals are
    rejected most: about 0.2% of them, so the second stage is used too)."""
    alpha = torch.linspace(0.5, 1.5, 2000, dtype=F64).reshape(1, -1).repeat(3, 1)
    alpha[1] = alpha[1].flip(0)
    rng = TrialRNG(KEYS)
    rng.uniform((3, 2))  # a later call: the counter is part of the stream
    got = rng.gamma(alpha)
    for r in range(3):
        want = torch.tensor(_reference_gamma(int(KEYS[r]), 1, alpha[r].tolist()), dtype=F64)
        torch.testing.assert_close(got[r], want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("alpha", [0.3, 1.0, 5.0])
def test_second_stage_alone_draws_the_gamma(alpha):
    """First-stage acceptance uniforms forced to 1 reject (almost) every first proposal; the
    second stage must then give the whole distribution."""
    r, n = 20_000, 8  # budget(8) = 8: every element has second-stage slots
    base = torch.randint(-(2**62), 2**62, (r,), generator=torch.Generator().manual_seed(1))

    def uniforms(pos, rows=None):
        seeds = base[:, None] if rows is None else base[rows, None]
        u = (mix64(seeds + (pos + 1) * -7046029254386353131) >> 11) & ((1 << 53) - 1)
        u = (u + 1).to(F64) * 2.0**-53
        first_accept = (pos >= FIRST * n) & (pos < 2 * FIRST * n)
        return torch.where(first_accept, 1.0, u)

    for sparse in (True, False):
        x = sample_gamma(torch.full((r, n), alpha, dtype=F64), uniforms, sparse).reshape(-1)
        assert stats.kstest(x.numpy(), "gamma", args=(alpha,)).pvalue > 1e-4


@pytest.mark.parametrize("alpha", [0.3, 1.0, 5.0])
def test_sparse_and_dense_second_stages_give_the_same_values(alpha):
    """Trials with every element rejected at first (more than the budget: the rest keep
    ``d``), with a few rejected, and with none: both forms of the second stage agree bit for
    bit, and the elements over the budget are ``d`` (times the boost)."""
    r, n = 300, 40  # budget(40) = 10
    base = torch.randint(-(2**62), 2**62, (r,), generator=torch.Generator().manual_seed(2))
    kind = torch.arange(r) % 3  # 0: all rejected, 1: every 7th rejected, 2: as drawn

    def uniforms(pos, rows=None):
        trial = torch.arange(r)[:, None] if rows is None else rows[:, None]
        seeds = base[trial]
        u = (mix64(seeds + (pos + 1) * -7046029254386353131) >> 11) & ((1 << 53) - 1)
        u = (u + 1).to(F64) * 2.0**-53
        acceptance = (pos >= FIRST * n) & (pos < 2 * FIRST * n)
        forced = acceptance & ((kind[trial] == 0) | ((kind[trial] == 1) & (pos % n % 7 == 0)))
        return torch.where(forced, 1.0, u)

    alphas = torch.full((r, n), alpha, dtype=F64)
    sparse = sample_gamma(alphas, uniforms, sparse=True)
    dense = sample_gamma(alphas, uniforms, sparse=False)
    assert torch.equal(sparse, dense)
    d = (alpha + (alpha < 1)) - 1 / 3
    over = sparse[kind == 0][:, budget(n) :]  # no second-stage slot: d (times the boost)
    if alpha >= 1:
        assert torch.equal(over, torch.full_like(over, d))
    else:
        assert (over <= d).all() and (over > 0).all()
    assert (sparse[kind != 0] != d).all()  # every other element got a proposal accepted


def test_categorical_frequencies_follow_probs():
    probs = torch.tensor([[0.5, 0.0, 0.2, 0.3], [0.1, 0.1, 0.1, 0.7], [0.0, 1.0, 0.0, 0.0]])
    draws = sample_categorical(probs[:, None].expand(3, N, 4).to(F64), TrialRNG(KEYS))
    for r in range(3):
        counts = torch.bincount(draws[r], minlength=4).double()
        keep = probs[r] > 0
        assert counts[~keep].sum() == 0  # never an arm without mass
        if keep.sum() > 1:
            expected = (probs[r][keep].double() * N).numpy()
            assert stats.chisquare(counts[keep].numpy(), expected).pvalue > 1e-4


def test_integers_are_uniform_on_the_range():
    x = TrialRNG(KEYS).integers(7, (3, N))
    assert x.dtype == torch.long and x.min() >= 0 and x.max() <= 6
    for row in x:
        assert stats.chisquare(torch.bincount(row, minlength=7).numpy()).pvalue > 1e-4


def test_a_trials_stream_ignores_the_other_trials_and_its_position():
    full = TrialRNG(KEYS)
    alone = TrialRNG(KEYS[2:])
    moved = TrialRNG(KEYS[[2, 0]])
    for _ in range(3):
        a, b, c = (s.normal((s.num_trials, 4, 3), F64) for s in (full, alone, moved))
        assert torch.equal(a[2], b[0]) and torch.equal(a[2], c[0]) and torch.equal(a[0], c[1])
    sub = full.select([1])
    assert sub.counter == 3
    assert torch.equal(sub.uniform((1, 5)), TrialRNG(KEYS[1:2], counter=3).uniform((1, 5)))


def test_state_dict_continues_the_streams():
    rng = TrialRNG(KEYS)
    rng.uniform((3, 2))
    state = rng.state_dict()
    after = rng.gamma(torch.full((3, 4), 2.0))
    again = TrialRNG(KEYS)
    again.load_state_dict(state)
    assert torch.equal(again.gamma(torch.full((3, 4), 2.0)), after)
    with pytest.raises(ValueError, match="saved trial keys differ"):
        TrialRNG(KEYS + 1).load_state_dict(state)


def test_bad_shapes_and_keys_are_one_line_errors():
    with pytest.raises(ValueError, match=r"R=3 trials; a draw's shape must start with R"):
        TrialRNG(KEYS).uniform((2, 4))
    with pytest.raises(ValueError, match=r"keys must be a non-empty \[R\] int64"):
        TrialRNG(torch.zeros(3))


def test_trial_keys_follow_labels_seed_and_stream_not_position():
    labels = pd.DataFrame({"rho": [0.0, 500.0, 0.0], "seed": [1, 2, 1]})
    keys = trial_keys(labels, seed=0)
    assert keys[0] == keys[2] and keys[0] != keys[1]
    flipped = trial_keys(labels.iloc[::-1].reset_index(drop=True), seed=0)
    assert flipped.tolist() == keys.flip(0).tolist()
    as_ints = trial_keys(pd.DataFrame({"seed": [1, 2, 1], "rho": [0, 500, 0]}), seed=0)
    assert as_ints.tolist() == keys.tolist()  # 500 and 500.0, column order: the same trial
    assert trial_keys(labels, seed=1)[0] != keys[0]
    assert trial_keys(labels, seed=0, stream="init")[0] != keys[0]


def test_a_torch_generator_gives_torchs_own_numbers():
    """The shared path: each entry point is the plain torch sampler, draw for draw."""
    alpha = torch.tensor([[0.5, 2.0, 7.0]], dtype=F64)
    probs = torch.tensor([[[0.2, 0.5, 0.3]]], dtype=F64)
    ours, theirs = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    assert torch.equal(
        uniform(ours, (2, 3), dtype=F64), torch.rand(2, 3, generator=theirs, dtype=F64)
    )
    assert torch.equal(normal(ours, (5,)), torch.randn(5, generator=theirs))
    assert torch.equal(gamma(ours, alpha), torch._standard_gamma(alpha, generator=theirs))
    assert torch.equal(integers(ours, 9, (4,)), torch.randint(9, (4,), generator=theirs))
    want = torch.multinomial(probs.reshape(1, 3), 1, generator=theirs).reshape(1, 1)
    assert torch.equal(sample_multinomial(probs, ours), want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_streams_match_the_cpu():
    cpu, gpu = TrialRNG(KEYS), TrialRNG(KEYS, device="cuda")
    assert torch.equal(cpu.words((3, 1000)), gpu.words((3, 1000)).cpu())
    assert torch.equal(cpu.uniform((3, 1000), F64), gpu.uniform((3, 1000), F64).cpu())
    assert torch.equal(cpu.integers(5, (3, 100)), gpu.integers(5, (3, 100)).cpu())
    probs = torch.full((3, 50, 4), 0.25, dtype=F64)
    assert torch.equal(sample_categorical(probs, cpu), sample_categorical(probs.cuda(), gpu).cpu())
    # log / cos / sqrt may differ in the last bits between devices
    torch.testing.assert_close(cpu.normal((3, 1000), F64), gpu.normal((3, 1000), F64).cpu(),
                               rtol=1e-13, atol=1e-13)  # fmt: skip
    alpha = torch.full((3, 1000), 0.7, dtype=F64)
    torch.testing.assert_close(cpu.gamma(alpha), gpu.gamma(alpha.cuda()).cpu(), rtol=1e-12, atol=0)
