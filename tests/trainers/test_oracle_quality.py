"""Surrogate-quality figures of ``metrics.json`` against hand-written numpy loops."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.trainers.test_pretrain import _cfg, tiny_table
from torchroute.data.splits import carve_validation
from torchroute.functional.cooccurrence import assign_clusters, kmeans
from torchroute.models.oracles import load_oracle
from torchroute.trainers.oracle_quality import CooccurrenceTable, surrogate_quality
from torchroute.trainers.pretrain import run_pretrain


def _numpy_quality(preds, scores, costs, cost_used, rhos):
    """One loop per (query, anchor, neighbour): the figures the docstring defines."""
    n, k = scores.shape
    out = {"score_mae": {}, "utility_mae": {}, "best_arm_rate": {}}
    for name, y in preds.items():
        errs = [
            abs(y[q, i, j] - scores[q, j])
            for q in range(n)
            for i in range(k)
            for j in range(k)
            if j != i
        ]
        out["score_mae"][name] = np.mean(errs)
    for rho in rhos:
        key = f"rho={rho:g}"
        out["utility_mae"][key], out["best_arm_rate"][key] = {}, {}
        for name, y in preds.items():
            errs, hits = [], []
            for q in range(n):
                true_u = np.clip(scores[q] - rho * costs[q], 0, 1)
                for i in range(k):
                    others = [j for j in range(k) if j != i]
                    s = {j: min(max(y[q, i, j] - rho * cost_used[q, j], 0.0), 1.0) for j in others}
                    errs += [abs(s[j] - true_u[j]) for j in others]
                    pick = others[int(np.argmax([s[j] for j in others]))]
                    hits.append(true_u[pick] >= max(true_u[j] for j in others))
            out["utility_mae"][key][name] = np.mean(errs)
            out["best_arm_rate"][key][name] = np.mean(hits)
    return out


def test_surrogate_quality_matches_a_numpy_loop():
    rng = np.random.default_rng(0)
    n, k = 7, 4
    scores = (rng.random((n, k)) > 0.5).astype(float)
    costs = rng.random((n, k)) * 1e-3
    cost_used = costs * rng.uniform(0.5, 1.5, (n, k))
    preds = {"oracle": rng.random((n, k, k)), "anchor_copy": np.repeat(scores[:, :, None], k, 2)}
    rhos = [0, 300, 1000]
    got = surrogate_quality(
        {name: torch.as_tensor(p) for name, p in preds.items()},
        torch.as_tensor(scores),
        torch.as_tensor(costs),
        torch.as_tensor(cost_used),
        rhos,
    )
    want = _numpy_quality(preds, scores, costs, cost_used, rhos)
    for section in ("score_mae", "utility_mae", "best_arm_rate"):
        flat_got = json.dumps(got[section], sort_keys=True)
        assert json.loads(flat_got).keys() == want[section].keys()
        for key in want[section]:
            for name, value in (
                want[section][key].items()
                if section != "score_mae"
                else [(None, want[section][key])]
            ):
                g = got[section][key] if name is None else got[section][key][name]
                assert g == pytest.approx(value, abs=1e-12), (section, key, name)
    for rho in rhos:
        key = f"rho={rho:g}"
        assert got["oracle_beats_trivial"][key] == (
            want["utility_mae"][key]["oracle"] < want["utility_mae"][key]["anchor_copy"]
        )


def test_kmeans_finds_separated_blobs_and_cooccurrence_counts():
    gen = torch.Generator().manual_seed(1)
    centers = torch.tensor([[10.0, 0.0], [-10.0, 0.0]])
    x = torch.cat(
        [
            centers[0] + torch.randn(30, 2, generator=gen),
            centers[1] + torch.randn(20, 2, generator=gen),
        ]
    )
    label = assign_clusters(x, kmeans(x, 2, seed=3))
    assert len(set(label[:30].tolist())) == 1 and len(set(label[30:].tolist())) == 1
    assert label[0] != label[30]
    scores = (torch.rand(50, 3, generator=gen) > 0.4).double()
    prior = 2.0
    table = CooccurrenceTable(x, scores, clusters=2, prior=prior, seed=3)
    y = scores.numpy()
    lab = assign_clusters(x, table.centroids).numpy()
    # hand count for the query 0 (cluster of the first blob), anchor 1, its observed bit
    i, q = 1, 0
    b = y[q, i] > 0.5
    m = y.mean(0)
    same_bit = (y[:, i] > 0.5) == b
    g = (y[same_bit].sum(0) + prior * m) / (same_bit.sum() + prior)
    cell = same_bit & (lab == lab[q])
    want = (y[cell].sum(0) + prior * g) / (cell.sum() + prior)
    got = table.predict(x[:1], scores[:1])[0, i].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize(
    "oracle", [{}, {"propagation": "cooccurrence", "point": "median", "clusters": 2}]
)
def test_metrics_json_against_a_hand_computation(tmp_path, oracle):
    table = tiny_table(n=120, k=3)
    rhos = [0.0, 200.0]
    cfg = _cfg(table, tmp_path, metrics={"rhos": rhos, "clusters": 2}, oracle=oracle)
    metrics = run_pretrain(cfg)
    on_disk = json.loads((tmp_path / "metrics.json").read_text())
    assert on_disk == metrics
    sur = metrics["surrogates"]
    assert set(sur) >= {"cost", "rhos", "val", "test"} and sur["rhos"] == rhos
    oracle = load_oracle(tmp_path / "oracle.pt")
    split = np.asarray(table.split)
    # the early-stopping rows: the packaged 10% of train (seed 0); the mean uses the rest
    carved = np.asarray(carve_validation(table.split, 0.1, 0))
    fit = (split == "train") & (carved == "train")
    assert metrics["num_train"] == fit.sum() and metrics["num_early_stopping"] == 6
    train_mean = table.scores.numpy()[fit].mean(0)
    for name in ("val", "test"):
        rows = np.flatnonzero(split == name)
        e = table.embeddings[rows].float()
        y = table.scores[rows].numpy()
        c = table.costs[rows].numpy()
        n, k = y.shape
        with torch.no_grad():
            c_hat = oracle.cost(e).double().numpy()
            y_bar = oracle.accuracy(e).double().numpy()
            deltas = np.stack(
                [
                    oracle.propagation(e, torch.full((n,), i), torch.as_tensor(y[:, i]).float())
                    .double()
                    .numpy()
                    for i in range(k)
                ],
                axis=1,
            )  # [n, i, j]
        preds = {
            "oracle": y[:, :, None] + deltas,
            "anchor_copy": np.repeat(y[:, :, None], k, 2),
            "context_head": np.repeat(y_bar[:, None, :], k, 1),
            "train_mean": np.broadcast_to(train_mean, (n, k, k)),
        }
        want = _numpy_quality(preds, y, c, c_hat, rhos)
        got = sur[name]
        assert got["num_queries"] == len(rows)
        for pred in preds:
            assert got["score_mae"][pred] == pytest.approx(want["score_mae"][pred], abs=1e-6)
            for rho in rhos:
                key = f"rho={rho:g}"
                assert got["utility_mae"][key][pred] == pytest.approx(
                    want["utility_mae"][key][pred], abs=1e-6
                )
                assert got["best_arm_rate"][key][pred] == pytest.approx(
                    want["best_arm_rate"][key][pred], abs=1e-9
                )
        for key in got["utility_mae"]:
            assert set(got["utility_mae"][key]) == {
                "oracle",
                "anchor_copy",
                "context_head",
                "train_mean",
                "cooccurrence",
            }
