"""The policy-class gap table (docs/papers/hpg.md, paper 000 Table 2)."""

from __future__ import annotations

import pytest
import torch

from torchroute.cli import build_parser
from torchroute.gap import fit_policies, gap, relative_improvements

F64 = torch.float64


def _data(n=300, d=5, k=4, seed=0):
    """Utilities that are quadratic in ``x`` (XOR-like): no linear policy is optimal."""
    g = torch.Generator().manual_seed(seed)
    z = torch.nn.functional.normalize(torch.randn(n, d, generator=g, dtype=F64), dim=-1)
    x = torch.cat([z, torch.ones(n, 1, dtype=F64)], 1)
    a = torch.randn(k, d, d, generator=g, dtype=F64)
    u = torch.einsum("nd,kde,ne->nk", z, a, z) + 0.3 * torch.randn(k, generator=g, dtype=F64)
    return x, (u - u.min()) / (u.max() - u.min())


def test_gap_equals_a_direct_computation():
    _, u = _data(n=7)
    probs = torch.softmax(torch.randn(7, 4, dtype=F64), -1)
    expected = sum(float(u[i].max() - probs[i] @ u[i]) for i in range(7)) / 7
    assert abs(float(gap(probs, u)) - expected) < 1e-12


def test_classes_are_ordered_on_train_and_improve_on_a_quadratic_world():
    x, u = _data()
    policies = fit_policies(x, u, steps=60, lr=0.1, rank=4)
    gaps = {c: float(gap(p(x), u)) for c, p in policies.items() if p is not None}
    best_const = float(u.amax(-1).mean() - u.mean(0).max())
    assert abs(gaps["const"] - best_const) < 1e-12  # brute force over the arms
    assert gaps["quad"] <= gaps["lin"] <= gaps["const"]
    assert gaps["quad"] < 0.8 * gaps["lin"]  # the quadratic class captures the structure


def test_fits_start_at_the_smaller_class():
    """With zero steps, lin is the constant policy and quad equals lin (nesting)."""
    x, u = _data(seed=1)
    policies = fit_policies(x, u, steps=0)
    torch.testing.assert_close(policies["lin"](x), policies["const"](x), rtol=0, atol=1e-15)
    torch.testing.assert_close(policies["quad"](x), policies["lin"](x), rtol=0, atol=1e-15)


def test_bias_column_required_and_cli_registered():
    x, u = _data(n=10)
    with pytest.raises(ValueError, match="constant 1"):
        fit_policies(x[:, :-1], u)
    args = build_parser().parse_args(["gap", "experiment=hpg_gap_routerbench"])
    assert args.command == "gap"


def test_relative_improvements():
    import pandas as pd

    frame = pd.DataFrame(
        [("t", "train", 0.0, c, g) for c, g in (("const", 0.4), ("lin", 0.3), ("quad", 0.15))],
        columns=["table", "split", "rho", "policy_class", "gap"],
    )
    out = relative_improvements(frame)
    assert abs(float(out["lin_vs_const"][0]) - 0.25) < 1e-12
    assert abs(float(out["quad_vs_lin"][0]) - 0.5) < 1e-12


@pytest.mark.parametrize("preset", ["hpg_gap_routerbench", "hpg_gap_routerdc"])
def test_gap_presets_compose(preset):
    from torchroute.cli import compose_config

    cfg = compose_config("simulate", [f"experiment={preset}", "out_dir=x"])
    assert cfg.data._target_ and list(cfg.gap.rhos) and cfg.features.bias
    assert cfg.gap.held_out == "test" and cfg.gap.steps > 0


_SMALL = ["experiment=hpg_gap_simulator", "data.num_queries=240", "gap.steps=5", "gap.rank=2"]


def test_gap_uses_the_map_of_features_source(tmp_path):
    """``features.source=raw`` keeps the embeddings (``pca_dim`` is not applied): the gaps are
    those of the policies fitted on unit-norm queries plus a constant 1, built here by hand."""
    import pandas as pd

    from torchroute.cli import main
    from torchroute.envs.low_rank_experts import low_rank_experts_table

    overrides = [*_SMALL, "features.pca_dim=8"]
    assert main(["gap", *overrides, "features.source=raw", f"out_dir={tmp_path / 'raw'}"]) == 0
    assert main(["gap", *overrides, f"out_dir={tmp_path / 'pca'}"]) == 0
    raw = pd.read_csv(tmp_path / "raw" / "gap.csv")
    pca = pd.read_csv(tmp_path / "pca" / "gap.csv")

    table = low_rank_experts_table(num_queries=240, seed=0, dim=64, num_experts=8, rank=4)
    e = table.embeddings.double()
    x = torch.cat([e / e.norm(dim=1, keepdim=True), torch.ones(len(e), 1, dtype=F64)], 1)
    x = x.float().double()  # the bandit features are float32
    assert x.shape[1] == 65  # d + 1, not pca_dim + 1
    u = table.utility(0.0).double()
    train, test = (torch.as_tensor(table.rows(s)) for s in ("train", "test"))
    policies = fit_policies(x[train], u[train], steps=5, lr=0.05, rank=2, seed=0)
    for split, idx in (("train", train), ("test", test)):
        for cls in ("const", "lin", "quad"):
            expected = float(gap(policies[cls](x[idx]), u[idx]))
            got = raw[(raw["split"] == split) & (raw["policy_class"] == cls)]["gap"].item()
            assert abs(got - expected) < 1e-9, (split, cls, got, expected)
    quad = (raw["policy_class"] == "quad") & (raw["split"] == "train")
    assert abs(raw[quad]["gap"].item() - pca[quad]["gap"].item()) > 1e-3  # pca_dim=8 differs


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("features.source=bogus", "features.source must be one of"),
        ("features.bias=false", "features.bias must be true for torchroute gap"),
    ],
)
def test_gap_refuses_bad_features_in_one_line(tmp_path, capsys, override, expected):
    from torchroute.cli import main

    out = tmp_path / "gap"
    assert main(["gap", *_SMALL, override, f"out_dir={out}"]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_gap_on_oracle_features_uses_the_feature_head(tmp_path):
    """``features.source=oracle``: the queries are the oracle's feature head (unit rows plus
    a constant 1), computed here from the saved oracle itself."""
    from tests.conftest import make_table
    from torchroute.features import oracle_features
    from torchroute.gap import run_gap
    from torchroute.models import MultiHeadOracle, load_oracle, save_oracle
    from torchroute.run import RunOptions

    table = make_table()
    torch.manual_seed(0)
    oracle = MultiHeadOracle(6, 4, feature_dim=5, hidden=8, arm_names=table.arm_names).eval()
    path = save_oracle(oracle, tmp_path / "oracle.pt")
    node = {"_target_": "torchroute.trainers.load_or_pretrain", "checkpoint": str(path)}
    config = {
        "data": {"_target_": "tests.conftest.make_table"},
        "encoder": None,
        "out_dir": str(tmp_path / "gap"),
        "rhos": [0.0],
        "seeds": [0],
        "log_every": 1,
        "features": {"source": "oracle", "oracle": node, "pca_dim": 3},
        "gap": {"rhos": [0.0], "steps": 5, "rank": 2},
    }
    out = run_gap(RunOptions.from_config(config, need_learners=False))

    x = oracle_features(table.embeddings, load_oracle(path)).double()
    assert x.shape[1] == 6  # feature_dim + 1, not pca_dim + 1
    u = table.utility(0.0).double()
    train, test = (torch.as_tensor(table.rows(s)) for s in ("train", "test"))
    policies = fit_policies(x[train], u[train], steps=5, lr=0.05, rank=2, seed=0)
    for split, idx in (("train", train), ("test", test)):
        for cls in ("const", "lin", "quad"):
            expected = float(gap(policies[cls](x[idx]), u[idx]))
            got = out[(out["split"] == split) & (out["policy_class"] == cls)]["gap"].item()
            assert abs(got - expected) < 1e-9, (split, cls, got, expected)
