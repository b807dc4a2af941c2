"""Paired differences with standard errors, and the paper relations judged over runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from torchroute.checkpoint import save_checkpoint
from torchroute.report import load_results, write_report
from torchroute.report.cabs import PAPER_MODELS
from torchroute.report.paired import paired_differences
from torchroute.report.verdicts import relation_verdicts, verdict, verdict_lines

RHOS = (0.0, 300.0, 301.0, 799.0, 800.0, 1000.0)  # the regime boundaries on both sides
SEEDS = (0, 1, 2)


def _run(offsets: dict[str, float], seed: int = 0, shuffle: bool = True) -> pd.DataFrame:
    """Results of one run: per learner an offset plus trial noise shared by every learner
    (the part pairing removes) and the learner's own noise."""
    rng = np.random.default_rng(seed)
    shared = {(s, r): rng.normal() for s in SEEDS for r in RHOS}
    rows = [
        {"learner": name, "seed": s, "rho": r, "avg_utility": base + shared[s, r]
         + 0.05 * rng.normal(), "trial": i}
        for name, base in offsets.items()
        for i, (r, s) in enumerate((r, s) for r in RHOS for s in SEEDS)
    ]  # fmt: skip
    frame = pd.DataFrame(rows)
    return frame.sample(frac=1.0, random_state=seed) if shuffle else frame


def test_paired_differences_match_a_hand_computation():
    frame = _run({"cabs_d": 0.6, "linucb": 0.5})
    out = paired_differences(frame, "cabs_d", "linucb")
    # by hand: line the trials up, difference, mean and sd / sqrt(n) per regime
    a = frame[frame.learner == "cabs_d"].sort_values(["seed", "rho"])
    b = frame[frame.learner == "linucb"].sort_values(["seed", "rho"])
    rho = a["rho"].to_numpy()
    d = a["avg_utility"].to_numpy() - b["avg_utility"].to_numpy()
    masks = {"low": rho <= 300, "medium": (rho > 300) & (rho < 800), "high": rho >= 800,
             "all": np.ones_like(rho, dtype=bool)}  # fmt: skip
    assert list(out.index) == ["low", "medium", "high", "all"]
    for regime, mask in masks.items():
        part = d[mask]
        assert out.loc[regime, "n"] == mask.sum()
        assert out.loc[regime, "mean"] == pytest.approx(part.mean(), abs=1e-12)
        se = np.sqrt(np.sum((part - part.mean()) ** 2) / (len(part) - 1) / len(part))
        assert out.loc[regime, "se"] == pytest.approx(se, abs=1e-12)
    # pairing: the shared trial noise (sd 1) cancels, the SE reflects the own noise only
    assert out.loc["all", "se"] < 0.05


def test_paired_differences_refuse_mixed_runs_and_missing_learners():
    two = pd.concat([_run({"a": 0.1, "b": 0.0}, 0), _run({"a": 0.1, "b": 0.0}, 1)])
    with pytest.raises(ValueError, match="several rows for one"):
        paired_differences(two, "a", "b")
    with pytest.raises(ValueError, match="no rows of learner 'c'"):
        paired_differences(_run({"a": 0.1, "b": 0.0}), "a", "c")


def test_verdict_rule():
    assert verdict([0.02, 0.01, 0.03], [0.01, 0.01, 0.01], ">")
    assert not verdict([-0.01, -0.02, -0.01], [0.1, 0.1, 0.1], ">")  # wrong sign of the mean
    assert not verdict([0.05, 0.05, -0.03], [0.01, 0.01, 0.01], ">")  # one run reverses it
    assert verdict([0.05, 0.05, -0.015], [0.01, 0.01, 0.01], ">")  # within 2 SE: no reversal
    assert verdict([0.0, 0.0], [0.01, 0.01], ">=") and not verdict([0.0, 0.0], [0.01, 0.01], ">")


def test_relation_verdicts_over_runs():
    offsets = {"cabs_d": 0.6, "linucb": 0.5, "lints": 0.7, "cabs_d_identity": 0.59}
    runs = {f"seed{k}": _run({**offsets, "cabs_d_nosurrogates": 0.62}, k) for k in range(3)}
    table = relation_verdicts(runs)
    rel = table.set_index(["relation", "regime"])
    assert rel.loc[("`cabs_d` > `linucb`", "low"), "verdict"] == "PASS"
    assert rel.loc[("`cabs_d` > `lints`", "high"), "verdict"] == "FAIL"
    hand = np.mean(
        [paired_differences(f, "cabs_d", "linucb").loc["all", "mean"] for f in runs.values()]
    )
    assert rel.loc[("`cabs_d` > `linucb`", "all"), "mean"] == pytest.approx(hand)
    assert "± " in rel.loc[("`cabs_d` > `linucb`", "all"), "seed1"]
    assert "surrogates: `cabs_d` - `cabs_d_identity`" in set(table["relation"])
    nosur = "surrogates: `cabs_d` - `cabs_d_nosurrogates`"
    pairs = [paired_differences(f, "cabs_d", "cabs_d_nosurrogates") for f in runs.values()]
    assert rel.loc[(nosur, "high"), "mean"] == pytest.approx(
        np.mean([p.loc["high", "mean"] for p in pairs])
    )
    assert rel.loc[(nosur, "all"), "verdict"] == "FAIL"  # cabs_d is 0.02 below it
    assert not any("cabs_c" in r for r in table["relation"])  # absent learners: no row
    assert (table["runs"] == 3).all()
    text = "\n".join(verdict_lines(runs))
    assert "- `cabs_d` > `linucb`: PASS in every regime" in text
    assert "- `cabs_d` > `lints`: FAIL (low, medium, high)" in text


def test_relations_judged_on_the_runs_that_have_their_learners():
    runs = {"o0": _run({"cabs_d": 0.6, "linucb": 0.5, "lints": 0.7}, 0)}
    runs.update({f"o{k}": _run({"cabs_d": 0.6, "linucb": 0.5}, k) for k in (1, 2)})
    rel = relation_verdicts(runs).set_index(["relation", "regime"])
    lints = rel.loc[("`cabs_d` > `lints`", "all")]
    assert lints["runs"] == 1 and lints["o1"] == lints["o2"] == "-"
    assert lints["mean"] == pytest.approx(
        paired_differences(runs["o0"], "cabs_d", "lints").loc["all", "mean"]
    )
    assert rel.loc[("`cabs_d` > `linucb`", "all"), "runs"] == 3
    assert "nan" not in "\n".join(verdict_lines(runs))


def test_report_over_several_runs(tmp_path):
    offsets = {"cabs_d": 0.6, "linucb": 0.5, "cabs_c": 0.55}
    dirs = []
    for k in range(3):
        d = tmp_path / f"oracle{k}"
        d.mkdir()
        results = _run(offsets, k, shuffle=False).assign(accuracy=0.5, avg_cost=0.1)
        results.to_csv(d / "results.csv", index=False)
        # a run on the paper's table: RouterBench's models in its problem.pt
        save_checkpoint(d / "problem.pt", {"problem": {"arm_names": sorted(PAPER_MODELS)}})
        dirs.append(d)
    results, _ = load_results(dirs)
    assert sorted(results["run"].unique()) == ["oracle0", "oracle1", "oracle2"]
    text = write_report(dirs, out_dir=tmp_path / "out")
    assert "Paper relations over 3 run(s) (`oracle0`, `oracle1`, `oracle2`)" in text
    assert "- `cabs_d` > `linucb`: PASS in every regime" in text
    single = write_report(dirs[:1], out_dir=tmp_path / "one")
    assert "Paper relations over 1 run(s)" in single and "`cabs_d` > `linucb`: low: holds" in single
