"""``torchroute simulate ... log_decisions=true``: each learner's decisions as logs."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import make_table
from torchroute.cli import compose_config
from torchroute.data.decisions import load_decisions
from torchroute.loop import simulate
from torchroute.run import ConfigError, RunOptions, run_config
from torchroute.run.build import build_env, learner_for

LEARNER = {"_target_": "torchroute.learners.SquareCB.from_problem", "_partial_": True}


def _config(out, *extra):
    cfg = compose_config(
        "simulate",
        [
            f"out_dir={out}",
            "rhos=[0,100]",
            "seeds=[0]",
            "features.pca_dim=3",
            "rng=per_trial",
            "trial_chunk=1",
            "progress=false",
            "report=false",
            "~logger",
            *extra,
        ],
    )
    OmegaConf.set_struct(cfg, False)
    cfg.data = OmegaConf.create({"_target_": "tests.conftest.make_table"})
    cfg.encoder = None
    cfg.learners = OmegaConf.create({"squarecb": LEARNER})
    return cfg


def test_logged_decisions_are_the_learners_and_leave_results_alone(tmp_path):
    plain, logged = tmp_path / "plain", tmp_path / "logged"
    run_config(_config(plain))
    cfg = _config(logged, "log_decisions=true")
    run_config(cfg)
    assert (plain / "results.csv").read_bytes() == (logged / "results.csv").read_bytes()
    assert not (plain / "decisions").exists()

    # the same learner on the same trials, its probabilities captured by hand
    opts = RunOptions.from_config(cfg)
    env = build_env(opts, torch.device("cpu")).env
    seen = {r: ([], []) for r in range(env.num_trials)}
    for r in range(env.num_trials):
        piece_env = env.select_trials([r])

        def capture(t, context, decision, feedback, r=r):
            chosen = decision.action[0, 0]
            seen[r][0].append(float(decision.probs[0, 0, chosen]))
            seen[r][1].append(int(context.index[0, 0]))

        learner = learner_for(opts, "squarecb", piece_env)
        simulate(learner, piece_env, seed=0, rng="per_trial", on_round=capture, progress=False)

    table = make_table()
    test_rows = [i for i, s in enumerate(table.split) if s == "test"]
    for r, rho in enumerate((0.0, 100.0)):
        log = load_decisions(logged / "decisions" / "squarecb" / f"trial{r}.parquet")
        assert len(log.request_ids) == len(test_rows) == len(seen[r][0])
        assert log.arm_names == tuple(table.arm_names)
        assert log.propensity.tolist() == pytest.approx(seen[r][0], abs=1e-7)
        rows = [table.query_ids.index(q) for q in log.query_ids]
        assert rows == seen[r][1] and sorted(rows) == test_rows
        want = table.scores[rows, log.action].double()
        torch.testing.assert_close(log.score, want)
        assert log.rho.tolist() == [rho] * len(rows)
        assert set(log.learner) == {"squarecb"}


def test_a_log_names_seed_and_trial_and_keeps_contexts_only_when_asked(tmp_path):
    """By default a run's log has no features or embedding; ``log_contexts=true`` writes
    the features the learner saw (the run's feature map of each logged query)."""
    lean, full = tmp_path / "lean", tmp_path / "full"
    grid = ("rhos=[0,100]", "seeds=[5,7]", "log_decisions=true")
    run_config(_config(lean, *grid))
    cfg = _config(full, *grid, "log_contexts=true")
    run_config(cfg)
    features = build_env(RunOptions.from_config(cfg), torch.device("cpu")).features
    table = make_table()
    # trials are rhos x seeds, rho first: (0, 5), (0, 7), (100, 5), (100, 7)
    for trial, (rho, seed) in enumerate(((0.0, 5), (0.0, 7), (100.0, 5), (100.0, 7))):
        name = f"trial{trial}.parquet"
        small = load_decisions(lean / "decisions" / "squarecb" / name)
        big = load_decisions(full / "decisions" / "squarecb" / name)
        assert small.features is None and small.embedding is None
        assert small.seed.tolist() == [seed] * small.num_decisions
        assert small.trial.tolist() == [trial] * small.num_decisions
        assert small.rho.tolist() == [rho] * small.num_decisions
        rows = [table.query_ids.index(q) for q in big.query_ids]
        torch.testing.assert_close(big.features, features[rows].double())
        assert big.query_ids == small.query_ids and big.action.tolist() == small.action.tolist()
    size = (lean / "decisions" / "squarecb" / "trial0.parquet").stat().st_size
    assert size < (full / "decisions" / "squarecb" / "trial0.parquet").stat().st_size


def test_evaluate_and_warm_start_name_the_option_a_lean_log_lacks(tmp_path, capsys):
    from torchroute.cli import main
    from torchroute.learners.warm_start import logged_rows

    out = tmp_path / "lean"
    cfg = _config(out, "log_decisions=true")
    run_config(cfg)
    path = out / "decisions" / "squarecb" / "trial0.parquet"
    capsys.readouterr()
    args = ["evaluate", f"logs={path}", "targets=[random]", f"out_dir={tmp_path / 'ope'}"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "log_contexts=true" in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "ope" / "ope.csv").exists()
    problem = build_env(RunOptions.from_config(cfg), torch.device("cpu")).env.problem()
    with pytest.raises(ValueError, match=r"features' column .*log_contexts=true"):
        logged_rows(problem, load_decisions(path), 10.0, "learners.linucb", str(path))


def test_log_decisions_with_resume_is_refused(tmp_path):
    cfg = _config(tmp_path / "x", "log_decisions=true", f"resume={tmp_path / 'c.pt'}")
    with pytest.raises(ConfigError, match="log_decisions=true cannot go with resume"):
        RunOptions.from_config(cfg)
    with pytest.raises(ConfigError, match="log_decisions must be true or false"):
        RunOptions.from_config(_config(tmp_path / "x", "log_decisions=yes"))


def test_low_rank_experts_log_their_decisions(tmp_path):
    """LowRankExperts declares single_choice: its rounds become logs with the features the
    learner saw (its only context, kept without log_contexts) and, as score, the chosen
    expert's exact quality (R_a(q) + 1) / 2."""
    out = tmp_path / "lre"
    cfg = _config(out, "log_decisions=true", "env=low_rank_experts", "rounds=6")
    cfg.data = None
    run_config(cfg)
    opts = RunOptions.from_config(cfg)
    env = build_env(opts, torch.device("cpu")).env
    assert env.single_choice
    for r in range(env.num_trials):
        log = load_decisions(out / "decisions" / "squarecb" / f"trial{r}.parquet")
        piece_env = env.select_trials([r])
        seen = []

        def capture(t, context, decision, feedback, seen=seen):
            a = int(decision.action[0, 0])
            seen.append((context.x[0, 0].double().clone(), a, float(decision.probs[0, 0, a])))

        learner = learner_for(opts, "squarecb", piece_env)
        simulate(learner, piece_env, seed=0, rng="per_trial", on_round=capture, progress=False)
        assert log.num_decisions == len(seen) == 6
        for i, (x, a, prob) in enumerate(seen):
            assert log.action[i] == a
            assert float(log.propensity[i]) == pytest.approx(prob, abs=1e-7)
            torch.testing.assert_close(log.features[i], x)
            # the well-specified expert reward z^T A_a z of the latent query z = x E, by hand
            z = (x @ piece_env.embed[0].double()).numpy()
            a_mat = piece_env.reward_matrix[0, a].double().numpy()
            want = (float(z @ a_mat @ z) + 1) / 2
            assert float(log.score[i]) == pytest.approx(want, abs=1e-6)
            assert float(log.cost[i]) == 0.0


def test_log_decisions_needs_a_single_choice_env(tmp_path, monkeypatch):
    """An env that does not declare single_choice (every subset env) is refused, by the run
    before anything is written and by the recorder itself."""
    from torchroute.envs import LowRankExperts
    from torchroute.envs.subset import SubsetEnv
    from torchroute.run.decision_logger import DecisionRecorder

    assert SubsetEnv.single_choice is False
    monkeypatch.setattr(LowRankExperts, "single_choice", False)
    cfg = _config(tmp_path / "lre", "log_decisions=true", "env=low_rank_experts", "rounds=5")
    cfg.data = None
    with pytest.raises(ConfigError, match=r"needs an env that routes each decision to one arm"):
        run_config(cfg)
    assert not (tmp_path / "lre" / "decisions").exists()
    env = build_env(RunOptions.from_config(cfg), torch.device("cpu")).env
    with pytest.raises(ValueError, match="LowRankExperts does not route each decision"):
        DecisionRecorder(env, "squarecb")
