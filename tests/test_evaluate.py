"""``torchroute evaluate`` end to end on logs written in the decision-log format."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from torchroute.cli import main
from torchroute.data import linear_contextual_table
from torchroute.data.decision_io import save_decisions
from torchroute.data.decisions import load_decisions
from torchroute.envs.single_choice import SingleChoiceEnv
from torchroute.learners import LinUCB, SquareCB
from torchroute.run.decision_logger import log_decisions
from torchroute.types import Context


def _env(rho, split="test"):
    table, _ = linear_contextual_table(300, 3, 4, seed=2)
    feats = table.embeddings.double()
    return SingleChoiceEnv(
        table, rho=rho, seeds=[0] * len(rho), split=split, features=feats, dtype=torch.float64
    )


@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> Path:
    env = _env([50.0])
    logs, _ = log_decisions(SquareCB.from_problem(env.problem(), gamma=5.0), env, seed=1)
    folder = tmp_path_factory.mktemp("log")
    save_decisions(logs[0], folder / "log.parquet")
    return save_decisions(logs[0], folder / "log.csv")


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_evaluate_writes_estimates_matching_a_hand_computation(logged, tmp_path, suffix):
    path = logged.with_suffix(suffix)
    out = tmp_path / "ope"
    code = main(
        [
            "evaluate",
            f"logs={path}",
            "targets=[arm:arm1,random]",
            "replay=[linucb]",
            "rhos=[0,100]",
            "bootstrap=50",
            f"out_dir={out}",
        ]
    )
    assert code == 0
    frame = pd.read_csv(out / "ope.csv")
    assert (out / "report.md").is_file() and (out / "ope.png").stat().st_size > 0
    log = load_decisions(path)
    for rho in (0.0, 100.0):
        u = (log.score - rho * log.cost).clamp(0, 1)
        arm1 = log.action == 1
        want = float((arm1 * u / log.propensity).mean())
        got = frame.query("target == 'arm:arm1' and estimator == 'ips' and rho == @rho")
        assert got["value"].item() == pytest.approx(want, abs=1e-10)
        w = arm1 / log.propensity
        want_snips = float((w * u).sum() / w.sum())
        got = frame.query("target == 'arm:arm1' and estimator == 'snips' and rho == @rho")
        assert got["value"].item() == pytest.approx(want_snips, abs=1e-10)
        lo, hi = got[["lower", "upper"]].iloc[0]
        assert lo <= want_snips <= hi
        logged_value = frame.query("estimator == 'on_policy' and rho == @rho")["value"].item()
        assert logged_value == pytest.approx(float(u.mean()), abs=1e-10)
    replayed = frame.query("mode == 'replay'")
    assert len(replayed) == 2 and (replayed["accepted"] > 0).all()
    assert set(frame["estimator"]) >= {"ips", "snips", "dm", "dr", "switch_dr", "clipped_dr"}


def _log_on_run_features(run: Path, table, rho: float, path: Path) -> Path:
    """A SquareCB decision log on ``table``'s test split, in the features of ``run``."""
    from torchroute.features import FeatureMap

    feats = FeatureMap.load(run)(table.embeddings).double()
    env = SingleChoiceEnv(
        table, rho=[rho], seeds=[0], split="test", features=feats, dtype=torch.float64
    )
    logs, _ = log_decisions(SquareCB.from_problem(env.problem(), gamma=5.0), env, seed=1)
    return save_decisions(logs[0], path)


def test_frozen_target_from_a_chunked_run(tmp_path):
    """The LinUCB of a real simulate run split into one-trial chunks is read from the chunk
    that holds the trial of rho=100 (its first seed) and judged on a log of the run's
    features; the value is IPS of that state, loaded by hand, acting on the log."""
    from tests.conftest import LINUCB_NODE, make_table, tiny_run_config
    from torchroute.checkpoint import load_checkpoint
    from torchroute.run import run_config

    run = tmp_path / "run"
    best = {"_target_": "torchroute.learners.BestSingleArm.from_problem", "_partial_": True}
    learners = {"linucb": {**LINUCB_NODE, "alpha": 0.3}, "best_single": best}
    cfg = tiny_run_config(run, learners, "trial_chunk=1", "rng=per_trial")
    run_config(cfg)
    table = make_table()
    logged = _log_on_run_features(run, table, 100.0, tmp_path / "log.parquet")
    out = tmp_path / "ope"
    args = ["targets=[linucb,best_single]", "rhos=[100]", "estimators=[ips]", "interval=normal"]
    code = main(["evaluate", f"logs={logged}", *args, f"checkpoint={run}", f"out_dir={out}"])
    assert code == 0
    # rho-major grid of rhos [0, 100] x seeds [0]: the trial of rho=100 is trial 1, chunk 1
    saved = load_checkpoint(run / "checkpoints" / "linucb.chunk1.pt")
    log = load_decisions(logged)
    x = log.features[None]  # [1, n, d]
    one = LinUCB(1, 4, x.shape[-1], alpha=0.3).double()
    one.load_state_dict(saved["learner"])
    probs = one.act(Context(x=x), torch.Generator().manual_seed(0)).probs[0]
    u = (log.score - 100 * log.cost).clamp(0, 1)
    want = float((probs[torch.arange(len(u)), log.action] * u / log.propensity).mean())
    frame = pd.read_csv(out / "ope.csv")
    assert frame.query("target == 'linucb'")["value"].item() == pytest.approx(want, abs=1e-10)
    assert not (run / "checkpoints" / "linucb.pt").exists()  # only the chunks were written
    # best_single routes every query to the model with the best mean train utility at rho=100
    train = table.rows("train")
    arm = int((table.scores[train] - 100 * table.costs[train]).clamp(0, 1).mean(0).argmax())
    want = float(((log.action == arm) * u / log.propensity).mean())
    got = frame.query("target == 'best_single'")["value"].item()
    assert got == pytest.approx(want, abs=1e-10)


def test_frozen_targets_of_every_rho_read_the_run_once(tmp_path, monkeypatch):
    """Two rhos of a plain run's LinUCB: its checkpoint and problem.pt are read once, and
    each rho's value is IPS of that trial's rows of the checkpoint, sliced by hand."""
    import torchroute.run.folder as folder
    from tests.conftest import LINUCB_NODE, make_table, tiny_run_config
    from torchroute.checkpoint import load_checkpoint
    from torchroute.run import run_config

    run = tmp_path / "run"
    run_config(tiny_run_config(run, {"linucb": {**LINUCB_NODE, "alpha": 0.3}}))
    logged = _log_on_run_features(run, make_table(), 0.0, tmp_path / "log.parquet")
    reads: list[str] = []
    real = folder.load_checkpoint

    def counted(path, *args, **kwargs):
        reads.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(folder, "load_checkpoint", counted)
    args = ["targets=[linucb]", "rhos=[0,100]", "estimators=[ips]", "interval=normal"]
    out = tmp_path / "ope"
    assert main(["evaluate", f"logs={logged}", *args, f"checkpoint={run}", f"out_dir={out}"]) == 0
    assert sorted(reads) == ["linucb.pt", "problem.pt"]
    saved = load_checkpoint(run / "checkpoints" / "linucb.pt")["learner"]
    log = load_decisions(logged)
    x = log.features[None]  # [1, n, d]
    frame = pd.read_csv(out / "ope.csv")
    for trial, rho in enumerate((0.0, 100.0)):  # rho-major grid, one seed
        one = LinUCB(1, 4, x.shape[-1], alpha=0.3).double()
        one.load_state_dict({k: v[trial : trial + 1] for k, v in saved.items()})
        probs = one.act(Context(x=x), torch.Generator().manual_seed(0)).probs[0]
        u = (log.score - rho * log.cost).clamp(0, 1)
        want = float((probs[torch.arange(len(u)), log.action] * u / log.propensity).mean())
        got = frame.query("target == 'linucb' and rho == @rho")["value"].item()
        assert got == pytest.approx(want, abs=1e-10)


def test_a_plugin_target_needs_its_config_folder_and_trust(tmp_path, logged, monkeypatch, capsys):
    """A learner config in a --config-dir folder is a target; a class outside torchroute
    is built only with --trust."""
    package = tmp_path / "pkg"
    (package / "my_targets").mkdir(parents=True)
    (package / "my_targets" / "__init__.py").write_text(
        "from torchroute.learners import LinUCB\n\n\nclass MyLinUCB(LinUCB):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(package))
    configs = tmp_path / "configs"
    (configs / "learner").mkdir(parents=True)
    (configs / "learner" / "my_linucb.yaml").write_text(
        "_target_: my_targets.MyLinUCB.from_problem\n_partial_: true\nalpha: 0.5\n"
    )
    base = [f"logs={logged}", "targets=[my_linucb]", "rhos=[0]", "bootstrap=10"]
    folder = ["--config-dir", str(configs)]
    assert main(["evaluate", *base, f"out_dir={tmp_path / 'a'}"]) == 2
    assert "no learner config 'my_linucb'" in capsys.readouterr().err
    assert main(["evaluate", *folder, *base, f"out_dir={tmp_path / 'b'}"]) == 2
    err = capsys.readouterr().err
    assert "my_linucb.yaml" in err and "my_targets.MyLinUCB" in err  # named, not built
    trusted = [*folder, "--trust", "my_targets"]
    assert main(["evaluate", *trusted, *base, f"out_dir={tmp_path / 'c'}"]) == 0
    frame = pd.read_csv(tmp_path / "c" / "ope.csv")
    assert np.isfinite(frame.query("target == 'my_linucb'")["value"]).all()


def test_forward_crossfit_dr_matches_a_hand_computation(logged, tmp_path):
    """crossfit=forward: block j of the log (in row order) gets the ridge per arm fitted on
    blocks < j; DR of a fixed arm then follows by hand."""
    out = tmp_path / "fwd"
    args = ["targets=[arm:arm1]", "rhos=[0]", "estimators=[dr]", "folds=4", "lam=0.7"]
    code = main(["evaluate", f"logs={logged}", *args, "crossfit=forward", f"out_dir={out}"])
    assert code == 0
    log = load_decisions(logged)
    x = log.features.numpy()
    a = log.action.numpy()
    u = log.score.clamp(0, 1).numpy()
    n, d = x.shape
    block = np.arange(n) * 4 // n
    q = np.zeros((n, log.num_arms))
    for i in range(n):
        for arm in range(log.num_arms):
            rows = (block < block[i]) & (a == arm)
            theta = np.linalg.solve(x[rows].T @ x[rows] + 0.7 * np.eye(d), x[rows].T @ u[rows])
            q[i, arm] = np.clip(x[i] @ theta, 0, 1)
    w = (a == 1) / log.propensity.numpy()
    want = float(np.mean(q[:, 1] + w * (u - q[:, 1])))
    got = pd.read_csv(out / "ope.csv").query("target == 'arm:arm1' and estimator == 'dr'")
    assert got["value"].item() == pytest.approx(want, abs=1e-10)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["targets=[arm:arm0]"], "logs=<file> is required"),
        (["logs=X", "targets=[arm:nope]"], "unknown model"),
        (["logs=X", "targets=[nolearner]"], "no learner config 'nolearner'"),
        (["logs=X", "targets=[arm:arm0]", "colour=red"], r"unknown key\(s\) \['colour'\]"),
        (["logs=X"], "nothing to evaluate"),
        (["logs=X", "targets=[arm:arm0]", "estimators=[magic]"], "estimators: unknown"),
        (["logs=X", "targets=[arm:arm0]", "crossfit=sorted"], "crossfit must be random or"),
    ],
)
def test_bad_options_give_one_line_errors(logged, tmp_path, capsys, args, message):
    args = [a.replace("logs=X", f"logs={logged}") for a in args]
    code = main(["evaluate", *args, f"out_dir={tmp_path / 'o'}"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("torchroute evaluate: error:") and err.count("\n") == 1
    assert re.search(message, err)
    assert not (tmp_path / "o").exists()


def _tensor_state(module) -> dict:
    return {k: v for k, v in module.state_dict().items() if isinstance(v, torch.Tensor)}


def test_a_fresh_target_is_built_by_the_runs_factory_with_its_seed():
    """A fresh target is the learner the runner would build: initial weights drawn under the
    given seed (a run's ``loop_seed``), not always under 0."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from torchroute.configs_path import config_dir
    from torchroute.ope.targets import build_target
    from torchroute.types import Problem

    problem = Problem(2, 3, 4, rho=torch.zeros(2), arm_names=("a", "b", "c"))
    from torchroute.learners.warm_options import WARM_KEYS

    node = OmegaConf.load(config_dir() / "learner" / "neural_ucb.yaml")
    for key in WARM_KEYS:  # a frozen target is built cold
        node.pop(key, None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        expected = _tensor_state(instantiate(node)(problem).double())
    built = _tensor_state(build_target("neural_ucb", problem, seed=3))
    assert built.keys() == expected.keys()
    assert all(torch.equal(built[k], expected[k]) for k in expected)
    other = _tensor_state(build_target("neural_ucb", problem, seed=0))
    assert not all(torch.equal(other[k], expected[k]) for k in expected)


def test_a_deterministic_small_log_is_warned_about_and_intervals_are_clipped(tmp_path, caplog):
    """LinUCB (argmax) logs propensity 1 on (almost) every row of a 90-row log: the report
    and the console say so and name dm and on_policy; every interval lies in [0, 1] and is
    marked when clipped; no ``-0.0000`` or ``nan`` cell is printed."""
    env = _env([50.0])
    logs, _ = log_decisions(LinUCB.from_problem(env.problem(), alpha=0.0), env, seed=1)
    log = save_decisions(logs[0], tmp_path / "log.parquet")
    n = load_decisions(log).num_decisions
    ones = int((load_decisions(log).propensity >= 1 - 1e-9).sum())
    assert n < 100 and ones > 0
    out = tmp_path / "ope"
    args = ["targets=[arm:arm0,arm:arm2]", "interval=normal", f"out_dir={out}"]
    with caplog.at_level("WARNING"):
        assert main(["evaluate", f"logs={log}", *args]) == 0
    report = (out / "report.md").read_text()
    said = "\n".join(r.getMessage() for r in caplog.records)
    for text in (report, said):
        assert "propensity 1" in text and "dm, on_policy" in text
        assert f"the log has {n} decisions with feedback" in text
    ope = pd.read_csv(out / "ope.csv")
    inside = (ope["lower"] >= 0) & (ope["upper"] <= 1)
    assert (inside | ope["value"].isna()).all()  # n/a: snips of a target never logged
    wide = ope["clipped"].sum()
    assert f"({wide} were wider, marked *)" in report if wide else "(none was wider)" in report
    assert "-0.0000" not in report and "nan" not in report.lower()
