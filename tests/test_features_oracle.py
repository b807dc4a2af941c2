"""Feature sources: ``oracle`` (the pre-trained feature head), ``raw`` and ``pca``."""

from __future__ import annotations

import pytest
import torch

from torchroute.features import oracle_features, project_features
from torchroute.models import MultiHeadOracle, save_oracle
from torchroute.run import ConfigError, RunOptions, load_features


def _cfg(tmp_path, **features):
    config = {
        "data": {"_target_": "tests.conftest.make_table"},
        "encoder": None,
        "split": "test",
        "rhos": [0.0],
        "seeds": [0],
        "log_every": 1,
        "features": {"bias": True, "normalize": True, **features},
    }
    return RunOptions.from_config(config, need_learners=False)


def _oracle(arms, embed_dim=6):
    torch.manual_seed(0)
    return MultiHeadOracle(embed_dim, len(arms), feature_dim=5, hidden=8, arm_names=arms).eval()


def test_oracle_features_are_the_feature_head_normalised_with_bias(tiny_table):
    oracle = _oracle(tiny_table.arm_names)
    feats = oracle_features(tiny_table.embeddings, oracle, chunk=7)
    with torch.no_grad():
        phi = oracle.feature(tiny_table.embeddings).double()
    phi = phi / phi.norm(dim=1, keepdim=True)
    expected = torch.cat([phi, torch.ones(len(phi), 1, dtype=phi.dtype)], 1).float()
    torch.testing.assert_close(feats, expected)


def test_load_features_sources(tiny_table, tmp_path):
    table, default = load_features(_cfg(tmp_path, pca_dim=3))
    _, pca = load_features(_cfg(tmp_path, source="pca", pca_dim=3))
    assert torch.equal(default, pca) and pca.shape == (60, 4)  # default unchanged: pca
    _, raw = load_features(_cfg(tmp_path, source="raw", pca_dim=3))  # pca_dim ignored
    fit = table.rows("train")
    assert torch.equal(raw, project_features(table.embeddings, fit, None))
    path = save_oracle(_oracle(table.arm_names), tmp_path / "oracle.pt")
    node = {"_target_": "torchroute.trainers.load_or_pretrain", "checkpoint": str(path)}
    _, feats = load_features(_cfg(tmp_path, source="oracle", oracle=node))
    assert feats.shape == (60, 6)
    with pytest.raises(ConfigError, match=r"features\.source must be one of"):
        load_features(_cfg(tmp_path, source="bogus"))
    with pytest.raises(ConfigError, match=r"needs a features\.oracle node"):
        load_features(_cfg(tmp_path, source="oracle"))
    other = save_oracle(_oracle(["a", "b", "c", "d"]), tmp_path / "other.pt")
    node = {"_target_": "torchroute.trainers.load_or_pretrain", "checkpoint": str(other)}
    with pytest.raises(ConfigError, match=r"features\.oracle"):
        load_features(_cfg(tmp_path, source="oracle", oracle=node))
