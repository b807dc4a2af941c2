"""End-to-end: the CLI in-process on the default preset (tiny sizes, wandb offline)."""

from __future__ import annotations

import pandas as pd
import pytest

from torchroute.checkpoint import load_checkpoint
from torchroute.cli import main


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


#: the default experiment's baselines (its CABS-D, HPG and companion run: tests/test_first_run.py)
BASELINES = "random,best_single,linucb,linucb_full,lints,epsilon_greedy,squarecb"


def _args(out_dir, cache_dir, *extra):
    return [
        "simulate",
        "experiment=default",
        f"out_dir={out_dir}",
        f"cache_dir={cache_dir}",
        "data.num_queries=120",
        "rhos=[0,400,900]",
        "seeds=[0,1]",
        "log_every=10",
        "progress=false",
        "jobs=1",
        f"run_learners=[{BASELINES}]",
        *extra,
    ]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory, cache_dir):
    out = tmp_path_factory.mktemp("default")
    assert main(_args(out, cache_dir)) == 0
    return out


def test_simulate_writes_results_curves_config_checkpoints_and_wandb(default_run):
    results = pd.read_csv(default_run / "results.csv")
    expected = {
        "random",
        "best_single",
        "linucb",
        "linucb_full",
        "lints",
        "epsilon_greedy",
        "squarecb",
    }
    assert set(results["learner"]) == expected
    assert len(results) == len(expected) * 6  # 3 rho x 2 seeds per learner
    for column in (
        "learner",
        "seed",
        "rho",
        "rounds",
        "avg_utility",
        "avg_regret",
        "accuracy",
        "avg_cost",
    ):
        assert column in results
    assert (results["avg_regret"] >= -1e-9).all()
    curves = pd.read_csv(default_run / "curves.csv")
    assert {"learner", "rho", "seed", "round", "cum_regret"} <= set(curves)
    assert (default_run / "config.yaml").is_file()
    for name in expected:
        ckpt = load_checkpoint(default_run / "checkpoints" / f"{name}.pt")
        assert ckpt["round"] == results["rounds"].iloc[0]
    assert list((default_run / "wandb").glob("offline-run-*"))
    for name in (
        "report.md",
        "summary.csv",
        "pareto.png",
        "regret_curves.png",
        "relative_regret.png",
    ):
        assert (default_run / name).stat().st_size > 0


def test_report_prints_regimes(default_run, capsys):
    assert main(["report", str(default_run)]) == 0
    out = capsys.readouterr().out
    assert "low" in out and "medium" in out and "high" in out and "linucb" in out


def test_interrupted_run_resumes_to_the_same_results(default_run, tmp_path, cache_dir, monkeypatch):
    """Ctrl-C at round 15 of a run checkpointing every 10 rounds; resume runs rounds 10.."""
    from torchroute.envs import SingleChoiceEnv

    context = SingleChoiceEnv.context
    seen: list[int] = []
    armed = [True]

    def interrupt_at_15(self, t):
        seen.append(t)
        if t == 15 and armed:  # once: the resumed run passes round 15 again
            armed.clear()
            raise KeyboardInterrupt
        return context(self, t)

    monkeypatch.setattr(SingleChoiceEnv, "context", interrupt_at_15)
    out = tmp_path / "resumed"
    common = ("run_learners=[squarecb]", "~logger", "ckpt_every=10")
    with pytest.raises(KeyboardInterrupt):
        main(_args(out, cache_dir, *common))
    ckpt = out / "checkpoints" / "squarecb.pt"
    assert load_checkpoint(ckpt)["round"] == 10
    assert not (out / "results.csv").exists()
    seen.clear()
    assert main(_args(out, cache_dir, *common, f"resume={ckpt}")) == 0
    before = pd.read_csv(default_run / "results.csv")
    after = pd.read_csv(out / "results.csv")
    assert seen[0] == 10 and len(seen) == after["rounds"].iloc[0] - 10
    mine = before[before["learner"] == "squarecb"].reset_index(drop=True)
    others = [c for c in mine.columns if c not in after.columns]  # other learners' columns
    assert mine[others].isna().all().all()
    pd.testing.assert_frame_equal(after.reset_index(drop=True), mine[list(after.columns)])


def test_a_stopped_run_prints_the_report_of_the_learners_that_finished(
    tmp_path, cache_dir, monkeypatch, capsys
):
    """Ctrl-C in the second learner: the first one's results are reported, the second is
    named as without results, and ``torchroute report`` says the same afterwards."""
    from torchroute.learners import SquareCB

    def stop(self, context, generator=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(SquareCB, "act", stop)
    out = tmp_path / "stopped"
    with pytest.raises(KeyboardInterrupt):
        main(_args(out, cache_dir, "run_learners=[random,squarecb]", "~logger"))
    printed = capsys.readouterr().out
    assert not (out / "results.csv").exists()
    assert "the learners that finished (random); without results: squarecb." in printed
    random = pd.read_csv(out / "runs" / "random" / "summary.csv")
    summary = pd.read_csv(out / "summary.csv").set_index("learner")
    assert list(summary.index) == ["random"]
    assert summary.loc["random", "avg_utility"] == pytest.approx(random["avg_utility"].mean())
    assert main(["report", str(out)]) == 0
    assert "without results: squarecb." in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["rhos=[-5]"], "rhos must be finite and >= 0"),
        (["run_learners=[linucb,nope]"], "unknown learners ['nope']"),
        (["rounds=100000"], "rounds=100000"),
        (["rounds=0"], "rounds must be an integer >= 1"),
        (["learners.linucb._target_=torchroute.learners.Nope"], "learners.linucb"),
        (["dtype=bogus"], "dtype must be one of ['float32', 'float64'], got 'bogus'"),
        (["device=tpu"], "device='tpu'"),
        (["+learners.linucb.alphaa=1"], "learners.linucb"),
        (["seeds=[a]"], "seeds must hold int values, got 'a'"),
        (["learners.linucb.alpha=nan"], "LinUCB: alpha must be a finite number >= 0, got nan"),
        (["learners.squarecb.gamma=-1"], "SquareCB: gamma must be a finite number > 0"),
        (["learners.epsilon_greedy.eps0=2"], "EpsilonGreedy: eps0 must be a finite number"),
        (["log_every=0"], "log_every must be an integer >= 1"),
    ],
)
def test_bad_config_is_a_clear_error_and_writes_nothing(
    tmp_path, cache_dir, capsys, extra, message
):
    out = tmp_path / "bad"
    assert main(_args(out, cache_dir, "~logger", *extra)) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len([line for line in err.splitlines() if "error" in line]) == 1
    assert "Traceback" not in err
    assert not out.exists()


def test_out_dir_that_is_a_file_is_refused(tmp_path, cache_dir, capsys):
    target = tmp_path / "a_file"
    target.write_text("keep me")
    assert main(_args(target, cache_dir, "~logger")) == 2
    assert "exists and is not a folder" in capsys.readouterr().err
    assert target.read_text() == "keep me"


def test_debug_shows_the_traceback(tmp_path, cache_dir):
    from torchroute.run import ConfigError

    with pytest.raises(ConfigError, match="dtype"):
        main(["--debug", *_args(tmp_path / "x", cache_dir, "~logger", "dtype=bogus")])


def _small(out, cache_dir, *extra):
    return _args(out, cache_dir, "~logger", "rounds=20", "seeds=[0]", *extra)


def _snapshot(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_failed_run_leaves_the_previous_results_untouched(tmp_path, cache_dir):
    """Repro: `rhos=[0]`, then the same with `gamma=-1`: exit 2, nothing rewritten."""
    out = tmp_path / "x"
    assert main(_small(out, cache_dir, "rhos=[0]")) == 0
    before = _snapshot(out)
    assert main(_small(out, cache_dir, "rhos=[0]", "learners.squarecb.gamma=-1")) == 2
    assert _snapshot(out) == before
    # the checkpoints still resume
    ckpt = out / "checkpoints" / "squarecb.pt"
    assert main(_small(out, cache_dir, "rhos=[0]", f"resume={ckpt}")) == 0


def test_a_refused_run_prints_no_report_and_keeps_the_companion_section(
    tmp_path, cache_dir, capsys
):
    """Repro: the default preset with its companion subset run, then the same with
    ``gamma=-1``: refused before it starts, so no partial report is printed or written."""
    out = tmp_path / "x"
    argv = ["simulate", "experiment=default", f"out_dir={out}", f"cache_dir={cache_dir}"]
    argv += ["data.num_queries=120", "rounds=20", "seeds=[0]", "rhos=[0]", "~logger"]
    argv += ["~learners.cabs_d", "~learners.hpg"]  # the rest as `make run`, companion included
    assert main(argv) == 0
    assert "## Companion run default_subset" in (out / "report.md").read_text()
    before = _snapshot(out)
    capsys.readouterr()
    assert main([*argv, "learners.squarecb.gamma=-1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        f"torchroute simulate: error: out_dir='{out}' holds the results of another "
        "configuration; choose another out_dir, or pass overwrite=true to replace them"
    ]
    assert _snapshot(out) == before


def test_results_of_another_configuration_are_never_mixed_in(tmp_path, cache_dir, capsys):
    """Repro: `rhos=[0]`; `rhos=[500]` with three learners; resume -> no row at rho=0."""
    out = tmp_path / "x"
    subset = "run_learners=[random,best_single,linucb]"
    assert main(_small(out, cache_dir, "rhos=[0]")) == 0
    before = _snapshot(out)
    assert main(_small(out, cache_dir, "rhos=[500]", subset)) == 2
    assert "another configuration" in capsys.readouterr().err
    assert _snapshot(out) == before
    # told to overwrite: the three learners run at rho=500; the others' rho=0 results are
    # refused on resume (their fingerprint differs) and run again
    assert main(_small(out, cache_dir, "rhos=[500]", subset, "overwrite=true")) == 0
    ckpt = out / "checkpoints" / "linucb.pt"
    assert main(_small(out, cache_dir, "rhos=[500]", f"resume={ckpt}")) == 0
    results = pd.read_csv(out / "results.csv")
    assert len(results) == 7 and (results["rho"] == 500).all()


def test_resume_with_another_config_is_refused(default_run, tmp_path, cache_dir, capsys):
    ckpt = default_run / "checkpoints" / "linucb.pt"
    out = tmp_path / "other"
    assert main(_args(out, cache_dir, "learners.linucb.alpha=3.0", f"resume={ckpt}")) == 2
    assert "another configuration" in capsys.readouterr().err
    assert not out.exists()


def test_only_user_errors_are_one_line(tmp_path, cache_dir, capsys, monkeypatch):
    """A user error (an option out of range) is one line and exit 2; a bug (here a plain
    ValueError raised inside a learner's ``act``) keeps its traceback: it propagates."""
    import errno

    from torchroute.errors import InputError, OptionError, UserError, is_user_error
    from torchroute.learners.linear import SquareCB

    only = "run_learners=[squarecb]"
    assert (
        main(_small(tmp_path / "a", cache_dir, "rhos=[0]", only, "learners.squarecb.gamma=-1")) == 2
    )
    err = capsys.readouterr().err
    assert "SquareCB: gamma must be a finite number > 0, got -1" in err and "Traceback" not in err

    def broken(self, context, generator=None):
        raise ValueError("internal: the scores and the arms disagree")

    monkeypatch.setattr(SquareCB, "act", broken)
    with pytest.raises(ValueError, match="internal: the scores"):
        main(_small(tmp_path / "b", cache_dir, "rhos=[0]", only))

    assert issubclass(OptionError, UserError) and issubclass(OptionError, ValueError)
    assert issubclass(InputError, UserError) and issubclass(InputError, ValueError)
    for exc in (OptionError("x"), FileNotFoundError(2, "gone"), OSError(errno.ENOSPC, "full")):
        assert is_user_error(exc), exc
    for exc in (ValueError("x"), RuntimeError("x"), KeyError("x"), OSError(errno.EIO, "io")):
        assert not is_user_error(exc), exc
