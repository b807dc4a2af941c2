"""distinct_rows: the distinct table rows of a round, against a Python dict of first
occurrences; the kNN router predicts on them what it predicts row by row (its neighbours by
a numpy sort), and a context whose index disagrees with its features is computed row by row."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchroute.functional.distinct_rows import distinct_rows
from torchroute.learners.anchors import KNNScoreRouter
from torchroute.types import Context, TrainSplit


def _table(n: int, d: int, seed: int) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


def test_first_positions_and_inverse_against_a_dict():
    table = _table(20, 5, 0)
    index = torch.tensor([7, 3, 7, 7, 12, 3, 0, 12])
    found = distinct_rows(table[index], index)
    assert found is not None
    first, inverse = found
    seen: dict[int, int] = {}
    for position, row in enumerate(index.tolist()):
        seen.setdefault(row, position)
    assert sorted(first.tolist()) == sorted(seen.values())
    rows = index[first]
    for position, row in enumerate(index.tolist()):
        assert int(rows[inverse[position]]) == row
        assert int(first[inverse[position]]) == seen[row]
    assert torch.equal(table[index][first][inverse], table[index])


def test_nothing_to_share_gives_every_row_in_order_and_no_index_gives_none():
    table = _table(10, 3, 1)
    every = torch.arange(4)
    found = distinct_rows(table[:4], torch.tensor([5, 1, 8, 2]))  # every row differs
    assert found is not None and all(torch.equal(t, every) for t in found)
    assert distinct_rows(table[[1, 1]], None) is None  # no index: no rows to name
    x = table[[2, 5, 2]].clone()
    x[2] += 1.0  # row 2 named twice with two feature vectors
    found = distinct_rows(x, torch.tensor([2, 5, 2]))
    assert found is not None and all(torch.equal(t, torch.arange(3)) for t in found)
    with pytest.raises(ValueError, match="index names 2 rows, x has 3"):
        distinct_rows(table[[1, 1, 1]], torch.tensor([1, 1]))


def _knn(trials: int) -> tuple[KNNScoreRouter, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(80, 4, generator=g)
    scores = torch.rand(80, 3, generator=g)
    costs = torch.tensor([1e-4, 5e-4, 2e-3]).expand(80, 3).clone()
    train = TrainSplit(x, scores, costs)
    rho = torch.linspace(0, 400, trials)
    router = KNNScoreRouter(trials, 3, 4, rho, train, None, k=[1, 5, 20])
    return router, _table(30, 4, 3)


def test_knn_predicts_per_distinct_row_what_numpy_neighbours_give():
    """Six trials reading three rows (as seeds shared across rhos do): the scores of each
    trial's k are the numpy means of its row's k nearest train rows; the same round without
    an index (every row computed) predicts the same."""
    router, table = _knn(6)
    index = torch.tensor([4, 9, 4, 17, 9, 4])[:, None]  # [R, 1]
    context = Context(x=table[index], index=index)
    calls = []
    search = router.candidate_scores
    router.candidate_scores = lambda x: calls.append(x.shape[0]) or search(x)
    scores, _ = router.predict(context)
    assert calls == [3]  # three distinct rows searched, not six
    unit = router.train_unit.numpy()
    for t in range(6):
        q = table[index[t, 0]].numpy()
        order = np.argsort(-(unit @ (q / np.linalg.norm(q))), kind="stable")
        k = router.ks[int(router.choice[t])]
        expected = router.train_scores.numpy()[order[:k]].mean(0)
        np.testing.assert_allclose(scores[t, 0].numpy(), expected, atol=1e-6)
    every, _ = router.predict(Context(x=table[index]))
    assert calls == [3, 6]
    torch.testing.assert_close(every, scores, rtol=0, atol=1e-6)


def test_knn_router_neighbours_per_distinct_row_and_never_trusting_a_wrong_index():
    """KNNRouter (k = 4): a round whose trials share rows finds each trial's numpy nearest
    rows; a context whose index names one row for two different feature vectors still gets
    each vector's own neighbours."""
    from torchroute.learners.static import KNNRouter

    g = torch.Generator().manual_seed(4)
    train_x, table = torch.randn(50, 6, generator=g), _table(12, 6, 5)
    scores, costs = torch.rand(50, 3, generator=g), torch.rand(50, 3, generator=g)
    router = KNNRouter(5, 3, torch.zeros(5), train_x, scores, costs, k=4)
    unit = torch.nn.functional.normalize(train_x, dim=-1).numpy()

    def expected(x: torch.Tensor) -> list[set[int]]:
        return [
            set(np.argsort(-(unit @ (q / np.linalg.norm(q))), kind="stable")[:4].tolist())
            for q in x.numpy()
        ]

    index = torch.tensor([3, 3, 8, 3, 8])[:, None]
    found = router.neighbours(Context(x=table[index], index=index))
    assert found.shape == (5, 1, 4)
    assert [set(row.tolist()) for row in found[:, 0]] == expected(table[index[:, 0]])
    wrong = table[[3, 3, 8, 5, 8]][:, None]  # trial 3 names row 3 but carries row 5
    found = router.neighbours(Context(x=wrong, index=index))
    assert [set(row.tolist()) for row in found[:, 0]] == expected(wrong[:, 0])
