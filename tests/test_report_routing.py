"""The routing-metrics section (AIQ, APGR, CPT) and the per-arm columns it reads.

The section's numbers are worked out by hand from the frame built here; the env's per-arm
columns are checked against the routing table and a hand-rolled replay.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from torchroute.envs import SingleChoiceEnv
from torchroute.learners import RandomRouter
from torchroute.learners.simple import BestSingleArm
from torchroute.loop import simulate
from torchroute.report import write_report
from torchroute.report.routing import TITLE, routing_metrics, routing_section, weak_and_strong

# Two arms: arm 0 is cheap and weak (accuracy 0.5, cost 1), arm 1 strong (0.9, cost 3).
ARMS = {"arm_accuracy_0": 0.5, "arm_accuracy_1": 0.9, "arm_cost_0": 1.0, "arm_cost_1": 3.0}
# (learner, rho) -> per-seed (avg_cost, accuracy, share of arm 1)
POINTS = {
    ("a", 0.0): [(3.0, 0.9, 1.0), (3.0, 0.9, 1.0)],  # all strong
    ("a", 500.0): [(1.0, 0.5, 0.0), (1.0, 0.5, 0.0)],  # all weak
    ("b", 0.0): [(2.0, 0.78, 0.5), (2.0, 0.82, 0.5)],  # mean accuracy 0.8
    ("b", 500.0): [(1.5, 0.6, 0.2), (1.5, 0.6, 0.3)],  # mean share 0.25
}


def _results(arms: dict[str, float] | None = None) -> pd.DataFrame:
    rows = []
    for (learner, rho), seeds in POINTS.items():
        for seed, (cost, acc, share) in enumerate(seeds):
            row = {"learner": learner, "rho": rho, "seed": seed, "rounds": 10}
            row |= {"avg_utility": acc, "accuracy": acc, "avg_cost": cost}
            row |= {"share_0": 1.0 - share, "share_1": share, **(ARMS if arms is None else arms)}
            rows.append(row)
    return pd.DataFrame(rows)


def test_metrics_by_hand():
    table, info = routing_metrics(_results())
    assert list(table.index) == ["a", "b"]  # by AIQ, best first
    assert (info["c_min"], info["c_max"], info["weak"], info["strong"]) == (1.0, 3.0, 0, 1)
    # a: hull (1, 0.5)-(3, 0.9) over [1, 3]: 2 * 0.7 / 2.  PGR 0 at share 0 and 1 at share 1:
    # the diagonal, APGR 0.5, CPT(x) = x.
    expected_a = {"AIQ": 0.7, "APGR": 0.5, "CPT(50%)": 0.5, "CPT(80%)": 0.8}
    # b: 0 on [1, 1.5], 0.5 * (0.6 + 0.8) / 2 on [1.5, 2], 0.8 on [2, 3]: 1.15 / 2.
    #    PGR (0.6 - 0.5) / 0.4 = 0.25 at share 0.25 and 0.75 at share 0.5; APGR over
    #    (0, 0), (0.25, 0.25), (0.5, 0.75), (1, 1) = 0.03125 + 0.125 + 0.4375;
    #    CPT(50%) halfway from share 0.25 to 0.5; 80% never reached.
    expected_b = {"AIQ": 0.575, "APGR": 0.59375, "CPT(50%)": 0.375, "CPT(80%)": np.nan}
    for learner, expected in (("a", expected_a), ("b", expected_b)):
        for column, value in expected.items():
            assert table.loc[learner, column] == pytest.approx(value, nan_ok=True), column


def test_section_table_and_notes():
    lines = routing_section(_results(), pd.DataFrame(), None)
    text = "\n".join(lines)
    assert TITLE in lines
    assert "[1, 3]" in text and "strong model arm 1" in text and "weak model arm 0" in text
    assert "APGR above 1 means" in text  # a value past the usual range is explained
    rows = {line.split("|")[1].strip(): line for line in lines if line.startswith("| ")}
    cells = [c.strip() for c in rows["b"].split("|")[2:-1]]
    assert cells == ["0.5750", "0.5938", "37.5%", "not reached"]
    cells = [c.strip() for c in rows["a"].split("|")[2:-1]]
    assert cells == ["0.7000", "0.5000", "50.0%", "80.0%"]


def test_section_names_the_arms_by_model_when_the_run_folder_has_them(tmp_path):
    """The run folder's problem.pt names the models; the report uses the names."""
    from torchroute.checkpoint import save_checkpoint
    from torchroute.report import write_report

    results = _results()
    results.to_csv(tmp_path / "results.csv", index=False)
    problem = {"num_arms": 2, "arm_names": ["tiny-llm", "huge-llm"]}
    save_checkpoint(tmp_path / "problem.pt", {"format": 1, "problem": problem})
    text = write_report([tmp_path])
    assert "strong model huge-llm (arm 1)" in text and "weak model tiny-llm (arm 0)" in text


def test_section_needs_single_choice_results_and_handles_one_rho():
    results = _results()
    one = routing_section(results[results["rho"] == 500.0], pd.DataFrame(), None)
    assert "each learner is one point" in "\n".join(one)
    rows = {line.split("|")[1].strip(): line for line in one if line.startswith("| ")}
    # rho 500 alone: a at (cost 1, accuracy 0.5), b at (1.5, 0.6); common range [1, 1.5].
    # a: flat 0.5 over the range; b: 0 below its cost. b's PGR 0.25 at share 0.25 between
    # the anchors (0, 0) and (1, 1): APGR = 0.03125 + 0.75 * (0.25 + 1) / 2 = 0.5
    cells = [c.strip() for c in rows["a"].split("|")[2:-1]]
    assert cells[0] == "0.5000"
    cells = [c.strip() for c in rows["b"].split("|")[2:-1]]
    assert cells[:2] == ["0.0000", "0.5000"]
    subset = pd.DataFrame({"learner": ["a", "a"], "seed": [0, 1], "avg_reward": [0.1, 0.2]})
    assert routing_section(subset, pd.DataFrame(), None) == []


def test_without_per_arm_columns_only_aiq():
    results = _results().drop(columns=["share_0", "share_1", *ARMS])
    table, _ = routing_metrics(results)
    assert table.loc["b", "AIQ"] == pytest.approx(0.575)
    assert table[["APGR", "CPT(50%)", "CPT(80%)"]].isna().all().all()
    assert "lack" in "\n".join(routing_section(results, pd.DataFrame(), None))


def test_weak_and_strong_arms_and_their_ties():
    # arm 2 is as cheap as arm 0 but more accurate (weak); arms 1 and 3 tie on accuracy,
    # arm 3 is cheaper (strong).
    arms = {f"arm_accuracy_{k}": v for k, v in enumerate([0.3, 0.9, 0.5, 0.9])}
    arms |= {f"arm_cost_{k}": v for k, v in enumerate([1.0, 4.0, 1.0, 2.0])}
    weak, strong, means = weak_and_strong(pd.DataFrame([arms, arms]))
    assert (weak, strong) == (2, 3)
    assert means["accuracy"].tolist() == [0.3, 0.9, 0.5, 0.9]
    # the cheapest arm is also the most accurate: no gap to recover
    same = ARMS | {"arm_accuracy_0": 0.95}
    table, _ = routing_metrics(_results(same))
    assert table["APGR"].isna().all()
    assert "no gap" in "\n".join(routing_section(_results(same), pd.DataFrame(), None))


def test_env_reports_shares_and_per_arm_references(tiny_table):
    """Trial r always plays arm r: its share is one-hot and its accuracy is arm r's."""
    env = SingleChoiceEnv(tiny_table, rho=[0.0] * 4, seeds=[0, 1, 2, 3], dtype=torch.float64)
    learner = BestSingleArm(4, 4, torch.eye(4, dtype=torch.float64)).double()
    s = simulate(learner, env, seed=0, log_every=5, progress=False).summary
    test = torch.as_tensor(tiny_table.rows("test"))
    arm_acc = tiny_table.scores[test].double().mean(0)  # the whole split is replayed
    arm_cost = tiny_table.costs[test].double().mean(0)
    for k in range(4):
        np.testing.assert_allclose(s[f"share_{k}"], np.eye(4)[k])
        np.testing.assert_allclose(s[f"arm_accuracy_{k}"], arm_acc[k].item())
        np.testing.assert_allclose(s[f"arm_cost_{k}"], arm_cost[k].item())
    np.testing.assert_allclose(s["accuracy"], arm_acc.numpy())
    np.testing.assert_allclose(s["avg_cost"], arm_cost.numpy())


def test_env_shares_count_the_played_arms(tiny_table):
    """A random router over part of the stream, replayed by hand with the same generator."""
    env = SingleChoiceEnv(
        tiny_table, rho=[0.0, 500.0, 0.0], seeds=[0, 1, 1], horizon=12, dtype=torch.float64
    )
    s = simulate(RandomRouter(3, 4).double(), env, seed=3, log_every=5, progress=False).summary
    learner, g = RandomRouter(3, 4).double(), torch.Generator().manual_seed(3)
    counts = torch.zeros(3, 4, dtype=torch.float64)
    scores = torch.zeros(3, 4, dtype=torch.float64)
    for t in range(12):
        ctx = env.context(t)
        dec = learner.act(ctx, g)
        fb, _ = env.step(ctx, dec, g)
        learner.update(ctx, dec, fb, g)
        counts[torch.arange(3), dec.action[:, 0]] += 1
        scores += tiny_table.scores[ctx.index[:, 0]].double()
    for k in range(4):
        np.testing.assert_allclose(s[f"share_{k}"], (counts[:, k] / 12).numpy())
        np.testing.assert_allclose(s[f"arm_accuracy_{k}"], (scores[:, k] / 12).numpy())
    assert counts.sum(1).eq(12).all() and (counts > 0).sum() > 4


def test_write_report_has_the_section(tmp_path):
    _results().to_csv(tmp_path / "results.csv", index=False)
    text = write_report([tmp_path])
    assert TITLE in text
    assert TITLE in (tmp_path / "report.md").read_text()


def test_summarize_mid_run_covers_only_the_rounds_played(tiny_table):
    env = SingleChoiceEnv(tiny_table, rho=[0.0, 0.0], seeds=[4, 5], dtype=torch.float64)
    rows = torch.cat([env.context(t).index for t in range(3)], 1)  # [R, 3] first rows
    sums = {k: torch.zeros(2, dtype=torch.float64) for k in ("utility", "regret", "score")}
    sums |= {"cost": torch.zeros(2, dtype=torch.float64)}
    sums["share"] = torch.tensor([[3.0, 0, 0, 0], [1, 1, 0, 1]], dtype=torch.float64)
    out = env.summarize(sums, rounds=3)
    torch.testing.assert_close(out["share"], sums["share"] / 3)
    torch.testing.assert_close(out["arm_accuracy"], tiny_table.scores[rows].double().mean(1))
    torch.testing.assert_close(out["arm_cost"], tiny_table.costs[rows].double().mean(1))
