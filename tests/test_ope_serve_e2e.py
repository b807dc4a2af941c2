"""serve -> traffic -> export -> evaluate: a router's own log judged by ``torchroute evaluate``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import torch

from tests.conftest import LINUCB_NODE, make_table, tiny_run_config
from torchroute.cli import main
from torchroute.run import run_config
from torchroute.serve import load_router


def _simulate(out):
    squarecb = {"_target_": "torchroute.learners.SquareCB.from_problem", "_partial_": True}
    run_config(tiny_run_config(out, {"squarecb": squarecb}))


def test_a_served_routers_exported_log_is_evaluated(tmp_path):
    run_dir = tmp_path / "run"
    _simulate(run_dir)
    table = make_table()
    router = load_router(run_dir, rho=100, seed=0)
    gen = torch.Generator().manual_seed(3)
    rows = torch.randint(0, table.embeddings.shape[0], (60,), generator=gen)
    truth_score, truth_cost = table.scores, table.costs
    for chunk in rows.split(10):
        decisions = router.route(embeddings=table.embeddings[chunk])
        arms = [router.arm_names.index(d["model"]) for d in decisions]
        router.feedback(
            [d["request_id"] for d in decisions],
            [float(truth_score[i, a]) for i, a in zip(chunk.tolist(), arms)],
            [float(truth_cost[i, a]) for i, a in zip(chunk.tolist(), arms)],
        )
    router.close()

    log = tmp_path / "log.parquet"
    assert (
        main(["serve", str(run_dir), "--rho", "100", "--seed", "0", "--export-log", str(log)]) == 0
    )
    frame = pq.read_table(log).to_pandas()
    assert len(frame) == 60 and frame["score"].notna().all()

    out = tmp_path / "ope"
    arm = table.arm_names[0]
    fixed = f"arm:{arm}"
    code = main(
        [
            "evaluate",
            f"logs={log}",
            f"targets=[{fixed},squarecb]",
            f"checkpoint={run_dir}",
            "rhos=[0,100]",
            "bootstrap=20",
            f"out_dir={out}",
        ]
    )
    assert code == 0
    ope = pd.read_csv(out / "ope.csv")
    for target in (fixed, "squarecb"):
        for rho in (0.0, 100.0):
            got = ope.query("target == @target and rho == @rho")
            assert len(got) >= 6 and np.isfinite(got["value"]).all(), (target, rho)
    score = frame["score"].to_numpy()
    cost = frame["cost"].to_numpy()
    prop = frame["propensity"].to_numpy()
    chose = (frame["arm"] == arm).to_numpy()
    for rho in (0.0, 100.0):
        u = np.clip(score - rho * cost, 0, 1)
        on_policy = ope.query("estimator == 'on_policy' and rho == @rho")["value"]
        assert abs(on_policy.iloc[0] - u.mean()) < 1e-12  # summation order only
        ips = ope.query("target == @fixed and estimator == 'ips' and rho == @rho")
        assert abs(ips["value"].item() - (chose * u / prop).mean()) < 1e-10


def test_an_exploration_floor_makes_a_deterministic_routers_log_evaluable(tmp_path):
    """LinUCB (an argmax rule) served with ``explore=0.5``: every logged propensity is the
    mixture's, at least eps / K, and the IPS estimate of always routing to one model (a
    router that is not the serving one) covers that model's true mean utility on the
    routed queries, computed from the table."""
    run_dir = tmp_path / "run"
    run_config(tiny_run_config(run_dir, {"linucb": LINUCB_NODE}))
    table = make_table()
    router = load_router(run_dir, rho=0, seed=0)
    eps, k = 0.5, len(router.arm_names)
    router.configure(explore=eps)
    gen = torch.Generator().manual_seed(5)
    rows = torch.randint(0, table.embeddings.shape[0], (400,), generator=gen)
    for chunk in rows.split(50):
        decisions = router.route(embeddings=table.embeddings[chunk])
        arms = [router.arm_names.index(d["model"]) for d in decisions]
        router.feedback(
            [d["request_id"] for d in decisions],
            [float(table.scores[i, a]) for i, a in zip(chunk.tolist(), arms)],
            [float(table.costs[i, a]) for i, a in zip(chunk.tolist(), arms)],
        )
    router.close()
    log = tmp_path / "log.parquet"
    assert main(["serve", str(run_dir), "--rho", "0", "--seed", "0", "--export-log", str(log)]) == 0
    frame = pq.read_table(log).to_pandas()
    prop = frame["propensity"].to_numpy()
    assert (prop >= eps / k - 1e-12).all() and (prop <= 1.0 + 1e-12).all()
    assert len(set(frame["arm"])) == k  # the floor reached every model
    out = tmp_path / "ope"
    arm = 2
    fixed = f"arm:{table.arm_names[arm]}"
    argv = ["evaluate", f"logs={log}", f"targets=[{fixed}]", "rhos=[0]", f"out_dir={out}"]
    assert main([*argv, "estimators=[ips,snips]", "interval=normal"]) == 0
    ope = pd.read_csv(out / "ope.csv").query("target == @fixed")
    truth = float(table.scores[rows, arm].clamp(0, 1).mean())  # utility at rho = 0
    for row in ope.itertuples():
        assert row.lower <= truth <= row.upper, (row.estimator, row.lower, truth, row.upper)
        assert abs(row.value - truth) < 0.1
    report = (out / "report.md").read_text()
    assert "propensity 1" not in report  # nothing deterministic to warn about
