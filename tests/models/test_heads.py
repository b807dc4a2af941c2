"""The propagation head's outputs, anchor conditionings and BCE loss against hand computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchroute.models import load_oracle, save_oracle
from torchroute.models.heads import MultiHeadOracle, PropagationHead
from torchroute.trainers import OracleModule


def _np(t):
    return t.detach().double().numpy()


def _gelu(v):
    from math import erf, sqrt

    return np.vectorize(lambda a: 0.5 * a * (1.0 + erf(a / sqrt(2.0))))(v)


def _mlp(net, v):
    """nn.Sequential(Linear, GELU, Dropout, Linear) in eval mode, in numpy."""
    h = _gelu(v @ _np(net[0].weight).T + _np(net[0].bias))
    return h @ _np(net[3].weight).T + _np(net[3].bias)


def _inputs(n=6, d=5, k=4):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=gen)
    anchor = torch.tensor([0, 1, 2, 3, 1, 2])[:n]
    y = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.5, 1.0])[:n]
    return x, anchor, y


def _hand_logits(head, x, anchor, y):
    x, a, yv = _np(x), anchor.numpy(), _np(y)
    n, k = x.shape[0], head.num_arms
    onehot = np.eye(k)[a]
    if head.conditioning == "concat":
        return _mlp(head.net, np.concatenate([x, onehot, yv[:, None]], 1))
    if head.conditioning == "split":
        m = _mlp(head.net, x).reshape(n, 2, k, k)
        return np.stack([(1 - yv[r]) * m[r, 0, a[r]] + yv[r] * m[r, 1, a[r]] for r in range(n)])
    film = np.concatenate([onehot, yv[:, None]], 1) @ _np(head.film.weight).T + _np(head.film.bias)
    g, b = film[:, : film.shape[1] // 2], film[:, film.shape[1] // 2 :]
    pre = x @ _np(head.inp.weight).T + _np(head.inp.bias)
    return _gelu(pre * (1 + g) + b) @ _np(head.out.weight).T + _np(head.out.bias)


@pytest.mark.parametrize("output", ["delta", "bce"])
@pytest.mark.parametrize("conditioning", ["concat", "film", "split"])
def test_propagation_head_forward_by_hand(output, conditioning):
    x, anchor, y = _inputs()
    head = PropagationHead(5, 4, hidden=7, output=output, conditioning=conditioning).eval()
    z = _hand_logits(head, x, anchor, y)
    np.testing.assert_allclose(_np(head.logits(x, anchor, y)), z, rtol=1e-5, atol=1e-6)
    off = 1.0 - np.eye(4)[anchor.numpy()]
    if output == "bce":
        want = (1.0 / (1.0 + np.exp(-z)) - _np(y)[:, None]) * off
    else:
        want = np.tanh(z) * off
    np.testing.assert_allclose(_np(head(x, anchor, y)), want, rtol=1e-5, atol=1e-6)


def test_split_conditioning_reads_the_row_of_the_anchor_value():
    """With 0/1 scores the split head's output is one row of a [2, K, K] table of MLP(x)."""
    x, anchor, _ = _inputs()
    head = PropagationHead(5, 4, hidden=7, conditioning="split").eval()
    table = _mlp(head.net, _np(x)).reshape(6, 2, 4, 4)
    for value in (0.0, 1.0):
        z = _np(head.logits(x, anchor, torch.full((6,), value)))
        want = table[np.arange(6), int(value), anchor.numpy()]
        np.testing.assert_allclose(z, want, rtol=1e-5, atol=1e-6)


def test_bce_propagation_loss_by_hand():
    torch.manual_seed(0)
    oracle = MultiHeadOracle(5, 3, feature_dim=4, hidden=8, dropout=0.0, propagation="bce")
    module = OracleModule(oracle)
    x = torch.randn(4, 5)
    scores = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    costs = torch.rand(4, 3)
    oracle.cost_head.set_normalization(costs)
    got = module.losses({"x": x, "scores": scores, "costs": costs})["propagation_loss"]
    phi = oracle.features(x)
    terms = []
    for q in range(4):
        for i in range(3):
            z = oracle.propagation_head.logits(
                phi[q : q + 1], torch.tensor([i]), scores[q, i : i + 1]
            )
            for j in range(3):
                if j != i:
                    p = 1.0 / (1.0 + np.exp(-float(z[0, j].detach())))
                    t = float(scores[q, j])
                    terms.append(-(t * np.log(p) + (1 - t) * np.log(1 - p)))
    assert float(got.detach()) == pytest.approx(np.mean(terms), rel=1e-5)


def test_options_round_trip_and_old_artifacts_load(tmp_path):
    oracle = MultiHeadOracle(5, 3, feature_dim=4, hidden=8, propagation="bce", conditioning="film")
    back = load_oracle(save_oracle(oracle, tmp_path / "new.pt"))
    assert back.propagation_output == "bce" and back.conditioning == "film"
    # an artifact written before the options existed: its config lacks both keys
    old = MultiHeadOracle(5, 3, feature_dim=4, hidden=8)
    path = save_oracle(old, tmp_path / "old.pt")
    payload = torch.load(path, weights_only=True)
    for key in ("propagation", "conditioning"):
        payload["config"].pop(key)
    torch.save(payload, path)
    loaded = load_oracle(path)
    assert loaded.propagation_output == "delta" and loaded.conditioning == "concat"
    e = torch.randn(2, 5)
    a, y = torch.tensor([0, 2]), torch.tensor([1.0, 0.0])
    torch.testing.assert_close(loaded.propagation(e, a, y), old.eval().propagation(e, a, y))


def test_bad_option_is_named():
    with pytest.raises(ValueError, match="conditioning must be one of"):
        PropagationHead(5, 3, conditioning="gate")


def test_cooccurrence_head_and_median_point_by_hand(tmp_path):
    gen = torch.Generator().manual_seed(2)
    e = torch.cat([torch.randn(20, 3, generator=gen) + 8, torch.randn(20, 3, generator=gen) - 8])
    scores = (torch.rand(40, 3, generator=gen) > 0.5).double()
    oracle = MultiHeadOracle(3, 3, feature_dim=4, hidden=8, propagation="cooccurrence", clusters=2)
    oracle.propagation_head.fit(e, scores, prior=0.0, seed=0)
    y = scores.numpy()
    q, i = 25, 2  # a query of the second blob, anchor arm 2
    same = (np.arange(40) >= 20) & (y[:, i] == y[q, i])
    want = y[same].mean(0) - y[q, i]  # prior 0: the raw conditional frequency
    want[i] = 0.0
    a, yq = torch.tensor([i]), scores[q : q + 1, i].float()
    got = oracle.propagation(e[q : q + 1], a, yq)[0].double().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    oracle.point = "median"
    med = oracle.propagation(e[q : q + 1], a, yq)[0].double().numpy()
    want_med = ((y[q, i] + want) > 0.5).astype(float) - y[q, i]
    want_med[i] = 0.0
    np.testing.assert_allclose(med, want_med)
    back = load_oracle(save_oracle(oracle, tmp_path / "cooc.pt"))  # buffers round-trip
    anchor0 = torch.zeros(40, dtype=torch.long)
    y0 = scores[:, 0].float()
    torch.testing.assert_close(back.propagation(e, anchor0, y0), oracle.propagation(e, anchor0, y0))
