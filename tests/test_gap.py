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
