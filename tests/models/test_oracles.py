"""Contracts of the oracle heads, the reward/affinity oracles and the oracle artifact."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import Tensor, nn

import torchroute.models as models
from torchroute.functional import oracle as functional_oracle
from torchroute.models import (
    AffinityOracle,
    OracleArtifactError,
    RewardOracle,
    affinity_from_accuracy,
    iqr_keep_mask,
    load_oracle,
    sample_graph,
    save_oracle,
)
from torchroute.models.heads import CostHead, MultiHeadOracle, PropagationHead


class _Fixed(nn.Module):
    """A stand-in oracle with given accuracy, cost and propagation outputs."""

    def __init__(self, y_bar: Tensor, cost: Tensor, delta: Tensor) -> None:
        super().__init__()
        self.y_bar, self.c, self.delta = y_bar, cost, delta  # [n, K] each

    def accuracy(self, e: Tensor) -> Tensor:
        return self.y_bar[e[:, 0].long()]

    def cost(self, e: Tensor) -> Tensor:
        return self.c[e[:, 0].long()]

    def propagation(self, e: Tensor, anchor: Tensor, y_anchor: Tensor) -> Tensor:
        return self.delta[e[:, 0].long()]


@pytest.mark.parametrize(
    "name", ["affinity_from_accuracy", "iqr_keep_mask", "sample_graph", "surrogate_utility"]
)
def test_oracle_math_is_defined_once_in_functional(name):
    assert getattr(models, name) is getattr(functional_oracle, name)
    assert getattr(models, name).__module__ == "torchroute.functional.oracle"


def test_affinity_values_and_diagonal():
    y_bar = torch.tensor([[0.9, 0.5, 0.8]])
    aff = affinity_from_accuracy(y_bar)[0]
    assert torch.isneginf(aff.diagonal()).all()
    assert aff[0, 1] == pytest.approx(1 - 2 * 0.4)
    assert aff[1, 2] == pytest.approx(1 - 2 * 0.3)
    assert torch.equal(aff, aff.T)
    oracle = AffinityOracle(_Fixed(y_bar, y_bar, y_bar))
    e = torch.zeros(2, 5, 4)  # [R, B, d]; row 0 of the stand-in for every context
    assert oracle(e).shape == (2, 5, 3, 3)
    assert oracle.sample(e, torch.Generator().manual_seed(0)).dtype == torch.bool


def test_graph_self_loops_and_edge_frequencies():
    gen = torch.Generator().manual_seed(0)
    y_bar = torch.rand(3, 4, generator=gen)  # three contexts, K = 4
    aff = affinity_from_accuracy(y_bar)  # [3, K, K]
    draws = 20000
    graphs = sample_graph(aff[None].expand(draws, 3, 4, 4), gen)  # [R, B, K, K]
    assert graphs.shape == (draws, 3, 4, 4)
    assert graphs.diagonal(dim1=-2, dim2=-1).all()
    freq = graphs.double().mean(0)  # [3, K, K]
    expected = torch.sigmoid((1 - aff.double()) / 2)
    off = ~torch.eye(4, dtype=torch.bool)
    # 20000 Bernoulli draws: standard error <= 0.0036
    assert (freq - expected)[:, off].abs().max() < 0.015
    again = sample_graph(aff[None].expand(draws, 3, 4, 4), torch.Generator().manual_seed(0))
    first = sample_graph(aff[None].expand(draws, 3, 4, 4), torch.Generator().manual_seed(0))
    assert torch.equal(again, first)


def _numpy_keep(delta: np.ndarray, anchor: int) -> np.ndarray:
    values = np.abs(np.delete(delta, anchor))
    q1, q3 = np.percentile(values, [25, 75])
    keep = np.abs(delta) > q3 + 1.5 * (q3 - q1)
    keep[anchor] = False
    return keep


def test_iqr_pruning_matches_numpy_percentile():
    rows = [
        ([0.0, 0.01, -0.02, 0.015, 0.6, -0.01, 0.02], 0),  # one clear outlier (arm 4)
        ([0.3, 0.0, -0.31, 0.29, 0.3, -0.3, 0.28], 1),  # no outlier
        ([0.05, 0.04, -0.9, 0.0, 0.03, 0.02, 0.01], 3),  # a negative outlier
        ([0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1], 6),  # all equal: nothing strictly above
    ]
    delta = torch.tensor([r for r, _ in rows], dtype=torch.float64)
    anchor = torch.tensor([a for _, a in rows])
    keep = iqr_keep_mask(delta, anchor)
    for i, (row, a) in enumerate(rows):
        np.testing.assert_array_equal(keep[i].numpy(), _numpy_keep(np.array(row), a))
    assert keep[0].tolist() == [False, False, False, False, True, False, False]
    assert keep[2].nonzero().flatten().tolist() == [2]
    assert not keep[1].any() and not keep[3].any()
    gen = torch.Generator().manual_seed(1)
    big = torch.randn(2, 5, 9, generator=gen, dtype=torch.float64) ** 3  # heavy tails
    anc = torch.randint(0, 9, (2, 5), generator=gen)
    keep = iqr_keep_mask(big, anc)
    for r in range(2):
        for b in range(5):
            expected = _numpy_keep(big[r, b].numpy(), int(anc[r, b]))
            np.testing.assert_array_equal(keep[r, b].numpy(), expected)


def test_reward_oracle_surrogates():
    y_bar = torch.zeros(1, 4)
    cost = torch.tensor([[0.001, 0.002, 0.0, 0.004]])
    delta = torch.tensor([[0.0, 0.5, -0.9, 0.01]])
    oracle = RewardOracle(_Fixed(y_bar, cost, delta), prune=False)
    e = torch.zeros(2, 1, 3)
    anchor = torch.tensor([[0], [0]])
    y = torch.tensor([[0.8], [0.8]])
    rho = torch.tensor([0.0, 100.0])
    s, keep = oracle(e, anchor, y, rho)
    assert s.shape == keep.shape == (2, 1, 4)
    expected0 = (0.8 + delta[0]).clamp(0, 1)
    expected1 = (0.8 + delta[0] - 100.0 * cost[0]).clamp(0, 1)
    torch.testing.assert_close(s[0, 0], expected0)
    torch.testing.assert_close(s[1, 0], expected1)
    assert keep[:, 0].tolist() == [[False, True, True, True]] * 2
    pruned = RewardOracle(_Fixed(y_bar, cost, delta), prune=True)
    s_pruned, keep = pruned(e, anchor, y, rho)
    torch.testing.assert_close(s_pruned, s)  # pruning only masks
    expected_keep = _numpy_keep(delta[0].double().numpy(), 0)
    for r in range(2):
        np.testing.assert_array_equal(keep[r, 0].numpy(), expected_keep)


def test_reward_oracle_prunes_per_row_like_numpy():
    gen = torch.Generator().manual_seed(2)
    n, k = 6, 7
    delta = torch.randn(n, k, generator=gen, dtype=torch.float64) ** 3  # heavy tails
    oracle = RewardOracle(_Fixed(torch.zeros(n, k), torch.zeros(n, k), delta))
    e = torch.arange(n, dtype=torch.float64).reshape(2, 3, 1)  # [R, B, 1]: row index
    anchor = torch.randint(0, k, (2, 3), generator=gen)
    s, keep = oracle(e, anchor, torch.full((2, 3), 0.5), torch.zeros(2))
    for r in range(2):
        for b in range(3):
            i = int(e[r, b, 0])
            expected = _numpy_keep(delta[i].numpy(), int(anchor[r, b]))
            np.testing.assert_array_equal(keep[r, b].numpy(), expected)
            np.testing.assert_allclose(s[r, b].numpy(), np.clip(0.5 + delta[i].numpy(), 0, 1))


def test_cost_head_denormalises():
    gen = torch.Generator().manual_seed(0)
    costs = torch.rand(50, 3, generator=gen) * torch.tensor([1e-3, 1e-2, 0.0]) + 1e-4
    head = CostHead(dim_in=5, num_arms=3, hidden=4, dropout=0.0)
    head.set_normalization(costs)
    z = head.normalize(costs)
    torch.testing.assert_close(z[:, :2].mean(0), torch.zeros(2), atol=1e-5, rtol=0)
    torch.testing.assert_close(z[:, :2].std(0, unbiased=False), torch.ones(2), atol=1e-4, rtol=0)
    assert head.std[2] == 1.0  # a constant arm keeps std 1
    with torch.no_grad():  # make the network output a fixed z = (1, -0.5, 0)
        head.net[-1].weight.zero_()
        head.net[-1].bias.copy_(torch.tensor([1.0, -0.5, 0.0]))
    out = head(torch.randn(4, 5, generator=gen))
    expected = (torch.tensor([1.0, -0.5, 0.0]) * head.std + head.mean).clamp_min(0)
    torch.testing.assert_close(out, expected.expand(4, 3))
    torch.testing.assert_close(head.normalized(torch.zeros(1, 5)), torch.tensor([[1.0, -0.5, 0.0]]))


def test_heads_shapes_and_anchor_zero():
    oracle = MultiHeadOracle(embed_dim=12, num_arms=5, feature_dim=8, hidden=16)
    e = torch.randn(7, 12)
    out = oracle(e)
    assert out["features"].shape == (7, 8) and out["accuracy"].shape == (7, 5)
    assert ((out["accuracy"] >= 0) & (out["accuracy"] <= 1)).all()
    assert (out["cost"] >= 0).all()
    anchor = torch.randint(0, 5, (7,))
    delta = oracle.propagation(e, anchor, torch.rand(7))
    assert delta.shape == (7, 5) and (delta.abs() <= 1).all()
    assert (delta.gather(1, anchor[:, None]) == 0).all()
    prop = PropagationHead(8, 5)
    assert prop(torch.randn(3, 8), torch.tensor([0, 1, 4]), torch.rand(3)).shape == (3, 5)


def test_artifact_round_trip_and_mismatch(tmp_path):
    arms = ["a", "b", "c"]
    oracle = MultiHeadOracle(6, 3, feature_dim=4, hidden=8, arm_names=arms, encoder_name="enc")
    oracle.cost_head.set_normalization(torch.rand(10, 3))
    path = save_oracle(oracle, tmp_path / "oracle.pt", extra={"note": "x"})
    raw = torch.load(path, weights_only=True)
    assert raw["format"] == 1 and raw["arm_names"] == arms and raw["embed_dim"] == 6
    assert not list(tmp_path.glob(".*tmp"))  # the temporary file was renamed
    loaded = load_oracle(path, arm_names=arms, embed_dim=6)
    e = torch.randn(4, 6)
    oracle.eval()
    for key, value in oracle(e).items():
        torch.testing.assert_close(loaded(e)[key], value)
    with pytest.raises(OracleArtifactError, match="arms"):
        load_oracle(path, arm_names=["a", "b", "z"])
    with pytest.raises(OracleArtifactError, match="6-d embeddings"):
        load_oracle(path, embed_dim=384)
    torch.save({"weights": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(OracleArtifactError, match="not a torchroute oracle"):
        load_oracle(tmp_path / "other.pt")
    with pytest.raises(OracleArtifactError, match="no oracle artifact"):
        load_oracle(tmp_path / "missing.pt")
