"""The oracle math of ``torchroute.functional.oracle`` on hand-computed and closed-form cases."""

from __future__ import annotations

import math

import pytest
import torch

from torchroute.data.table import RoutingTable
from torchroute.functional.oracle import (
    affinity_from_accuracy,
    iqr_keep_mask,
    sample_graph,
    surrogate_utility,
)


def test_surrogate_utility_hand_computed():
    y = torch.tensor([[0.8]])  # [R=1, B=1]
    delta = torch.tensor([[[0.0, 0.5, -0.3, -0.9]]])  # [1, 1, K=4]
    cost = torch.tensor([[[1e-3, 1e-3, 2e-3, 0.0]]])
    s = surrogate_utility(y, delta, cost, torch.tensor([100.0]))
    # 0.8 - 0.1; 1.3 - 0.1 clipped; 0.5 - 0.2; -0.1 clipped
    torch.testing.assert_close(s, torch.tensor([[[0.7, 1.0, 0.3, 0.0]]]))


def test_surrogate_utility_uses_each_trials_rho():
    y = torch.tensor([[0.5, 0.2], [0.5, 0.2]])  # [R=2, B=2]
    delta = torch.tensor([[0.0, 0.1, 0.2]], dtype=torch.float64).expand(2, 2, 3)
    cost = torch.full((2, 2, 3), 1e-3, dtype=torch.float64)
    s = surrogate_utility(y, delta, cost, torch.tensor([0.0, 200.0]))
    assert s.shape == (2, 2, 3) and s.dtype == torch.float64
    expected = torch.tensor(
        [
            [[0.5, 0.6, 0.7], [0.2, 0.3, 0.4]],  # rho = 0
            [[0.3, 0.4, 0.5], [0.0, 0.1, 0.2]],  # rho = 200: minus 0.2
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(s, expected)


@pytest.mark.parametrize(
    ("row", "anchor", "kept"),
    [
        # |delta| off the anchor: .01 .02 .9 .015 -> Q1 .01375, Q3 .24, threshold .579375
        ([0.0, 0.01, 0.02, 0.9, 0.015], 0, [3]),
        # the anchor's own (largest) value is left out: .1 .2 .3 .4 -> threshold .55
        ([0.1, 0.2, 0.3, 0.4, 5.0], 4, []),
        # negative outlier: 2 .1 .1 .1 -> Q1 .1, Q3 .575, threshold 1.2875
        ([0.0, -2.0, 0.1, 0.1, 0.1], 0, [1]),
        # evenly spread: 1 2 3 4 -> Q1 1.75, Q3 3.25, threshold 5.5
        ([0.0, 1.0, 2.0, 3.0, 4.0], 0, []),
    ],
)
def test_iqr_keep_mask_hand_computed(row, anchor, kept):
    keep = iqr_keep_mask(torch.tensor(row, dtype=torch.float64), torch.tensor(anchor))
    assert keep.nonzero().flatten().tolist() == kept


def test_iqr_keep_mask_batched_rows_are_independent():
    rows = torch.tensor(
        [[[0.0, 0.01, 0.02, 0.9, 0.015], [0.0, -2.0, 0.1, 0.1, 0.1]]], dtype=torch.float64
    )  # [R=1, B=2, K=5]
    keep = iqr_keep_mask(rows.expand(3, 2, 5), torch.zeros(3, 2, dtype=torch.long))
    assert keep.shape == (3, 2, 5) and keep.dtype == torch.bool
    assert keep[:, 0].nonzero()[:, 1].tolist() == [3, 3, 3]
    assert keep[:, 1].nonzero()[:, 1].tolist() == [1, 1, 1]


def test_affinity_hand_computed():
    aff = affinity_from_accuracy(torch.tensor([0.9, 0.5, 0.8]))
    inf = float("-inf")
    expected = torch.tensor([[inf, 0.2, 0.8], [0.2, inf, 0.4], [0.8, 0.4, inf]])
    torch.testing.assert_close(aff, expected)
    batched = affinity_from_accuracy(torch.tensor([[0.9, 0.5, 0.8], [0.0, 1.0, 0.5]]))
    assert batched.shape == (2, 3, 3)
    torch.testing.assert_close(batched[0], expected)
    assert batched[1, 0, 1] == -1.0 and batched[1, 0, 2] == 0.0


def test_sample_graph_closed_form_probabilities():
    # R = 1 -> sigmoid(0) = 1/2; R = -1 -> sigmoid(1); R = +inf -> never; diagonal always.
    inf = float("inf")
    aff = torch.tensor([[-inf, 1.0, -1.0], [1.0, -inf, inf], [-1.0, inf, -inf]])
    draws = 40000
    graphs = sample_graph(aff.expand(draws, 1, 3, 3), torch.Generator().manual_seed(0))
    assert graphs.shape == (draws, 1, 3, 3) and graphs.dtype == torch.bool
    freq = graphs.double().mean(0)[0]  # [K, K]
    assert torch.equal(freq.diagonal(), torch.ones(3, dtype=torch.float64))
    assert freq[1, 2] == 0.0 and freq[2, 1] == 0.0
    sigmoid_one = 1.0 / (1.0 + math.exp(-1.0))
    # 40000 draws: standard error <= 0.0025
    assert freq[0, 1] == pytest.approx(0.5, abs=0.01)
    assert freq[0, 2] == pytest.approx(sigmoid_one, abs=0.01)
    again = sample_graph(aff.expand(draws, 1, 3, 3), torch.Generator().manual_seed(0))
    assert torch.equal(again, graphs)


def test_sample_graph_affinity_rule_edge_frequencies():
    """rule="affinity": P(A_ij) = (1 + R_ij) / 2 = 1 - |y_i - y_j|, within 4 standard errors."""
    y_bar = torch.tensor([0.9, 0.5, 0.1, 0.85], dtype=torch.float64)
    aff = affinity_from_accuracy(y_bar)
    draws = 20000
    graphs = sample_graph(aff.expand(draws, 1, 4, 4), torch.Generator().manual_seed(1),
                          rule="affinity")  # fmt: skip
    freq = graphs.double().mean(0)[0]
    expected = 1.0 - (y_bar[:, None] - y_bar[None, :]).abs()  # diagonal: 1
    se = (expected * (1 - expected) / draws).sqrt()
    assert ((freq - expected).abs() <= 4 * se + 1e-12).all()
    assert torch.equal(freq.diagonal(), torch.ones(4, dtype=torch.float64))
    # edge probability increases with the affinity; the paper rule decreases
    paper = sample_graph(aff.expand(draws, 1, 4, 4), torch.Generator().manual_seed(1))
    assert (
        freq[0, 3] > freq[0, 2]
        and paper.double().mean(0)[0, 0, 3] < paper.double().mean(0)[0, 0, 2]
    )
    with pytest.raises(ValueError, match="graph rule must be one of"):
        sample_graph(aff, rule="z")


def test_routing_table_utility_is_the_functional_one():
    table = RoutingTable(
        scores=[[0.9, 0.6], [0.2, 1.0]],
        costs=[[1e-3, 1e-4], [0.0, 2e-3]],
        arm_names=["a", "b"],
        query_ids=["q0", "q1"],
        split=["train", "test"],
    )
    expected = torch.tensor([[0.4, 0.55], [0.2, 0.0]], dtype=torch.float64)  # rho = 500
    torch.testing.assert_close(table.utility(500.0), expected)
    both = table.utility(torch.tensor([0.0, 500.0]))
    assert both.shape == (2, 2, 2)
    torch.testing.assert_close(both[0], table.scores)
    torch.testing.assert_close(both[1], expected)
    with pytest.raises(ValueError, match="rho must be >= 0"):
        table.utility(-1.0)
