"""Every ``[..., *]`` function of torchroute.functional on an unbatched input.

An unbatched instance must give the row that the same instance gets inside a batch (the
batched results are checked against independent references in the other test files), and
the halfspace projection's fallback path is checked against cvxpy directly.
"""

from __future__ import annotations

from collections.abc import Callable

import cvxpy as cp
import numpy as np
import pytest
import torch

from torchroute.functional import (
    graph_program,
    hypentropy,
    oracle,
    projections,
    ridge,
    sampling,
    squarecb,
    subset,
)
from torchroute.functional.utility import utility as utility_fn

D = torch.float64
K = 4


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _probs(*lead: int, seed: int = 0) -> torch.Tensor:
    p = torch.rand(*lead, K, generator=_gen(seed), dtype=D) + 0.1
    return p / p.sum(-1, keepdim=True)


def _spd(*lead: int, d: int = 3, seed: int = 0) -> torch.Tensor:
    m = torch.randn(*lead, d, d, generator=_gen(seed), dtype=D)
    return m @ m.transpose(-1, -2) + torch.eye(d, dtype=D)


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed), dtype=D)


def _orthonormal(*lead: int, d: int = 5, k: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.linalg.qr(_randn(*lead, d, k, seed=seed))[0]


# name -> (function, inputs of a batch of 3 instances); the unbatched input is instance 1.
# Every argument that is a tensor carries the batch dim first; other arguments are shared.
Case = tuple[Callable[..., object], Callable[[], tuple[object, ...]]]
CASES: dict[str, Case] = {
    "project_capped_simplex": (
        projections.project_capped_simplex,
        lambda: (_randn(3, K), torch.tensor([0.0, 0.05, 0.1], dtype=D)),
    ),
    "project_capped_simplex_halfspace": (
        projections.project_capped_simplex_halfspace,
        lambda: (
            _randn(3, K, seed=1) * 5,
            torch.full((3,), 0.05, dtype=D),
            _randn(3, K, seed=2),
            torch.tensor([0.1, -0.2, 0.3], dtype=D),
        ),
    ),
    "safe_box": (
        lambda lo, hi, c: projections.safe_box(lo, hi, 3, c),
        lambda: (
            torch.tensor([[-np.inf, 0.1], [0.2, -np.inf], [0.0, 0.3]], dtype=D),
            torch.tensor([[np.inf, 0.9], [np.inf, 0.6], [0.5, np.inf]], dtype=D),
            torch.ones(3, 2, dtype=D),
        ),
    ),
    "support_function": (
        projections.support_function,
        lambda: (_randn(3, K), -torch.rand(3, K, dtype=D), torch.rand(3, K, dtype=D)),
    ),
    "support_maximiser": (
        projections.support_maximiser,
        lambda: (_randn(3, K), -torch.rand(3, K, dtype=D), torch.rand(3, K, dtype=D)),
    ),
    "box_distance": (
        projections.box_distance,
        lambda: (_randn(3, K), torch.full((3, K), -0.5, dtype=D), torch.full((3, K), 0.5, dtype=D)),
    ),
    "project_unit_ball": (projections.project_unit_ball, lambda: (_randn(3, K) * 2,)),
    "graph_squarecb_probs": (
        graph_program.graph_squarecb_probs,
        lambda: (
            torch.rand(3, K, generator=_gen(3), dtype=D),
            torch.rand(3, K, K, generator=_gen(4)) > 0.5,
            torch.tensor([2.0, 4.0, 8.0], dtype=D),
        ),
    ),
    "graph_squarecb_value": (
        graph_program.graph_squarecb_value,
        lambda: (
            _probs(3),
            torch.rand(3, K, generator=_gen(3), dtype=D),
            torch.rand(3, K, K, generator=_gen(4)) > 0.5,
            torch.tensor([2.0, 4.0, 8.0], dtype=D),
        ),
    ),
    "mirror_map": (hypentropy.mirror_map, lambda: (_randn(3, K), torch.rand(3, 1, dtype=D) + 0.5)),
    "inverse_mirror_map": (
        hypentropy.inverse_mirror_map,
        lambda: (_randn(3, K), torch.rand(3, 1, dtype=D) + 0.5),
    ),
    "quadratic_form": (
        hypentropy.quadratic_form,
        lambda: (_orthonormal(3), _randn(3, 3), torch.rand(3, dtype=D) + 0.5, _randn(3, 2, 5)),
    ),
    "low_rank_eig_update": (
        hypentropy.low_rank_eig_update,
        lambda: (
            _orthonormal(3),
            _randn(3, 3),
            torch.ones(3, 3, dtype=torch.bool),
            _randn(3, 2, 5, seed=5),
            _randn(3, 2, seed=6),
        ),
    ),
    "rank_one_eig_update": (
        hypentropy.rank_one_eig_update,
        lambda: (
            _orthonormal(3),
            _randn(3, 3),
            torch.ones(3, 3, dtype=torch.bool),
            _randn(3, 5, seed=5),
            _randn(3, seed=6),
        ),
    ),
    "nuclear_projection": (
        hypentropy.nuclear_projection,
        lambda: (_randn(3, K) * 3, torch.tensor([0.5, 1.0, 2.0], dtype=D), 1.0),
    ),
    "compact": (
        lambda u, t, m: hypentropy.compact(u, t, m, 2),
        lambda: (
            _orthonormal(3),
            _randn(3, 3),
            torch.tensor([[1, 0, 1], [1, 1, 1], [0, 1, 1]]) > 0,
        ),
    ),
    "mirror_step": (
        lambda u, t, m, q, c: hypentropy.mirror_step(u, t, m, q, c, 1.0, 1.0, 3),
        lambda: (
            _orthonormal(3),
            _randn(3, 3) * 0.1,
            torch.ones(3, 3, dtype=torch.bool),
            _randn(3, 2, 5, seed=5),
            _randn(3, 2, seed=6),
        ),
    ),
    "dense_mirror_step": (
        lambda t, q, c: hypentropy.dense_mirror_step(t, q, c, 1.0, 1.0),
        lambda: (_spd(3, d=5) * 0.1, _randn(3, 2, 5, seed=5), _randn(3, 2, seed=6)),
    ),
    "sherman_morrison": (
        ridge.sherman_morrison,
        lambda: (
            torch.linalg.inv(_spd(3)),
            _randn(3, 3),
            _randn(3, 3, seed=1),
            _randn(3),
            torch.tensor([1.0, 0.0, 2.5], dtype=D),
        ),
    ),
    "woodbury": (
        ridge.woodbury,
        lambda: (
            torch.linalg.inv(_spd(3)),
            _randn(3, 3),
            _randn(3, 2, 3, seed=1),
            _randn(3, 2, seed=2),
            torch.rand(3, 2, dtype=D),
        ),
    ),
    "one_hot_probs": (
        lambda a: sampling.one_hot_probs(a, K, D),
        lambda: (torch.tensor([0, 3, 1]),),
    ),
    "probability_floor": (lambda p: sampling.probability_floor(p, 0.05), lambda: (_probs(3),)),
    "squarecb_probs": (lambda r: squarecb.squarecb_probs(r, 4.0), lambda: (_randn(3, K),)),
    "utility": (
        utility_fn,
        lambda: (torch.rand(3, K, dtype=D), torch.rand(3, K, dtype=D) * 1e-3, 200.0),
    ),
    "iqr_keep_mask": (oracle.iqr_keep_mask, lambda: (_randn(3, 6), torch.tensor([0, 2, 5]))),
    "affinity_from_accuracy": (oracle.affinity_from_accuracy, lambda: (torch.rand(3, K, dtype=D),)),
    "draw_counts": (
        lambda a: subset.draw_counts(a, K, D),
        lambda: (torch.tensor([[0, 0, 2], [1, 3, 3], [2, 2, 2]]),),
    ),
    "subset_mask": (
        lambda a: subset.subset_mask(a, K),
        lambda: (torch.tensor([[0, 0, 2], [1, 3, 3], [2, 2, 2]]),),
    ),
    "sum_max_reward": (
        subset.sum_max_reward,
        lambda: (
            torch.rand(3, 5, K, dtype=D),
            torch.tensor([[1, 0, 1, 0], [0, 1, 1, 1], [1] * 4]) > 0,
        ),
    ),
    "expected_sum_max": (
        lambda q, v: subset.expected_sum_max(q, v, 3),
        lambda: (_probs(3), torch.rand(3, 5, K, dtype=D)),
    ),
    "inclusion_probs": (lambda q: subset.inclusion_probs(q, 3), lambda: (_probs(3),)),
}


def _pick(arg: object, i: int) -> object:
    return arg[i] if isinstance(arg, torch.Tensor) else arg


def _close(got: object, want: object) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w)
        return
    assert isinstance(got, torch.Tensor) and got.shape == want.shape, (got, want)
    if want.dtype == torch.bool or not want.is_floating_point():
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", sorted(CASES))
def test_unbatched_equals_its_row_in_a_batch(name: str) -> None:
    fn, inputs = CASES[name]
    args = inputs()
    batched = fn(*args)
    for i in range(3):
        row = fn(*[_pick(a, i) for a in args])
        want = tuple(b[i] for b in batched) if isinstance(batched, tuple) else batched[i]
        _close(row, want)


def _cvxpy_halfspace(y: np.ndarray, gamma: float, a: np.ndarray, b: float) -> np.ndarray:
    q = cp.Variable(len(y))
    cons = [cp.sum(q) == 1, q >= gamma, a @ q <= b]
    cp.Problem(cp.Minimize(cp.sum_squares(q - y)), cons).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-12
    )
    return q.value


def test_halfspace_projection_unbatched_fallback_instance() -> None:
    # This instance needs the bisection fallback (the Newton support does not settle).
    y = torch.tensor([-20.2, -2.32], dtype=D)
    a = torch.tensor([-0.865, 3.32], dtype=D)
    got = projections.project_capped_simplex_halfspace(y, 0.05, a, torch.tensor(1.25, dtype=D))
    assert got.shape == (2,)
    want = _cvxpy_halfspace(y.numpy(), 0.05, a.numpy(), 1.25)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-6)
    # a float32 [K] input and a scalar b as a float work too
    got32 = projections.project_capped_simplex_halfspace(y.float(), 0.05, a.float(), 1.25)
    np.testing.assert_allclose(got32.numpy(), want, atol=1e-5)


def test_random_draws_unbatched_have_the_batched_shape_and_support() -> None:
    p = torch.tensor([0.0, 0.3, 0.0, 0.7], dtype=D)
    for fn in (sampling.sample_categorical, sampling.sample_multinomial):
        draws = torch.stack([fn(p, _gen(s)) for s in range(50)])
        assert draws.shape == (50,) and set(draws.tolist()) <= {1, 3}
    scores = torch.tensor([0.5, 1.0, 1.0, 0.2], dtype=D)
    ties = {int(sampling.argmax_random_ties(scores, _gen(s))) for s in range(50)}
    assert ties == {1, 2}
    multiset = subset.draw_multiset(p, 5, _gen(0))
    assert multiset.shape == (5,) and set(multiset.tolist()) <= {1, 3}
    graph = oracle.sample_graph(oracle.affinity_from_accuracy(torch.rand(K, dtype=D)), _gen(0))
    assert graph.shape == (K, K) and graph.dtype == torch.bool
