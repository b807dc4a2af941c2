"""Bad input to ``torchroute data`` and ``torchroute pretrain``: exit 2, one line naming the
option, and nothing written; input files never changed."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
import pytest

from torchroute.cli import main
from torchroute.data import load_table
from torchroute.data.table import TableError

WIDE = "score_pattern={arm} cost_pattern={arm}_cost"


def _table_csv(path: Path, *, cost_b2: float = 0.2, text: tuple = ("hi", "yo", "ok")) -> Path:
    frame = pd.DataFrame(
        {
            "query_id": ["q1", "q2", "q3"],
            "text": list(text),
            "a": [1, 0, 1],
            "a_cost": [0.1, 0.1, 0.1],
            "b": [0, 1, 1],
            "b_cost": [0.2, cost_b2, 0.2],
        }
    )
    frame.to_csv(path, index=False)
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(capsys, argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("seed=abc", "option seed must be an integer"),
        ("seed=-1", "seed must be an integer >= 0"),
        ("drop_missing=maybe", "option drop_missing must be true or false"),
        ("trust_pickle=yes-please", "option trust_pickle must be true or false"),
        ("test_fraction=2", "test_fraction must be a number in [0, 1]"),
        ("val_fraction=abc", "option val_fraction must be a number"),
        ("models=gpt", "option models must be a list of strings or null"),
    ],
)
def test_data_inspect_refuses_a_badly_typed_option(tmp_path, capsys, option, expected):
    table = _table_csv(tmp_path / "t.csv")
    code, err = _run(capsys, ["data", "inspect", str(table), *WIDE.split(), option])
    assert code == 2
    assert expected in err
    assert len(err.splitlines()) == 1


def test_loader_options_are_checked_from_python_too():
    with pytest.raises(TableError, match="option drop_missing must be true or false"):
        load_table("unused.csv", drop_missing="no")


def test_a_huge_cost_is_refused_naming_the_cell(tmp_path, capsys):
    table = _table_csv(tmp_path / "t.csv", cost_b2=1e308)
    code, err = _run(capsys, ["data", "inspect", str(table), *WIDE.split()])
    assert code == 2
    assert "(query 'q2', arm 'b')" in err and "above 1e+30" in err


@pytest.mark.parametrize("text", [("", "", ""), ("hi", "", "ok")])
def test_blank_texts_are_refused_not_embedded(tmp_path, capsys, text):
    table = _table_csv(tmp_path / "t.csv", text=text)
    code, err = _run(capsys, ["data", "inspect", str(table), *WIDE.split()])
    assert code == 2
    assert "blank text" in err and "'q2'" in err
    code, _ = _run(capsys, ["data", "inspect", str(table), *WIDE.split(), "text_column=null"])
    assert code == 0


def test_convert_refuses_to_overwrite_its_input(tmp_path, capsys, monkeypatch):
    table = _table_csv(tmp_path / "t.csv")
    before = _digest(table)
    monkeypatch.chdir(tmp_path)
    for out in (str(table), "t.csv", "./t.csv"):
        code, err = _run(capsys, ["data", "convert", str(table), out, *WIDE.split()])
        assert code == 2 and "the output is the input" in err
    assert _digest(table) == before


def test_convert_refuses_an_output_inside_the_input_folder(tmp_path, capsys):
    folder = tmp_path / "scores"
    folder.mkdir()
    (folder / "m_test.json").write_text('[{"question": "q", "scores": {"a": 1, "b": 0}}]')
    code, err = _run(capsys, ["data", "convert", str(folder), str(folder / "out.csv")])
    assert code == 2 and "inside the input folder" in err
    assert sorted(p.name for p in folder.iterdir()) == ["m_test.json"]


def test_convert_existing_output_needs_overwrite(tmp_path, capsys):
    table = _table_csv(tmp_path / "t.csv")
    out = tmp_path / "new" / "deeper" / "out.parquet"  # a missing folder is created
    assert _run(capsys, ["data", "convert", str(table), str(out), *WIDE.split()])[0] == 0
    first = _digest(out)
    code, err = _run(capsys, ["data", "convert", str(table), str(out), *WIDE.split()])
    assert code == 2 and "--overwrite" in err
    assert _digest(out) == first
    argv = ["data", "convert", str(table), str(out), *WIDE.split(), "--overwrite"]
    assert _run(capsys, argv)[0] == 0
    assert [p.name for p in out.parent.iterdir()] == ["out.parquet"]  # no temp file left


@pytest.mark.parametrize("out", ["out.txt", "a_file/out.csv"])
def test_convert_refuses_an_unwritable_or_misnamed_output(tmp_path, capsys, out):
    table = _table_csv(tmp_path / "t.csv")
    (tmp_path / "a_file").write_text("not a folder")
    code, err = _run(capsys, ["data", "convert", str(table), str(tmp_path / out), *WIDE.split()])
    assert code == 2
    assert ".csv or .parquet" in err or "is not a folder" in err


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("trainer.bogus=1", "unknown key 'trainer.bogus'"),
        ("+trainer.bogus=1", "unknown option trainer.bogus"),
        ("trainer.max_epochs=0", "cfg.trainer.max_epochs must be an integer >= 1, got 0"),
        ("trainer.max_epochs=-5", "cfg.trainer.max_epochs must be an integer >= 1"),
        ("trainer.max_epochs=abc", "cfg.trainer.max_epochs must be an integer >= 1, got 'abc'"),
        ("train.patience=-1", "cfg.train.patience must be an integer >= 0"),
        ("trainer.devices=0", "cfg.trainer.devices must be a count >= 1"),
        ("module.lr=-1", "cfg.module.lr must be a finite number > 0"),
        ("module.lr=nan", "cfg.module.lr must be a finite number > 0, got nan"),
        ("data_module.batch_size=0", "cfg.data_module.batch_size must be an integer >= 1"),
        ("oracle.hidden=0", "cfg.oracle.hidden must be an integer >= 1"),
        ("oracle.dropout=1.5", "cfg.oracle.dropout must be a finite number >= 0 < 1"),
        ("seed=-3", "cfg.seed must be an integer >= 0"),
    ],
)
def test_pretrain_refuses_bad_values_before_writing(tmp_path, capsys, override, expected):
    out = tmp_path / "run"
    argv = ["pretrain", f"out_dir={out}", f"cache_dir={tmp_path / 'cache'}", override]
    code, err = _run(capsys, argv)
    assert code == 2
    assert expected in err
    assert not out.exists()


def test_pretrain_refuses_a_gpu_accelerator_without_one(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    out = tmp_path / "run"
    code, err = _run(capsys, ["pretrain", f"out_dir={out}", "trainer.accelerator=gpu"])
    assert code == 2 and "no CUDA device" in err
    assert not out.exists()


def test_pretrain_refuses_an_out_dir_under_a_file(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, err = _run(capsys, ["pretrain", f"out_dir={blocker / 'run'}"])
    assert code == 2 and "is a file, not a folder" in err


@pytest.mark.parametrize("off", ["logger=null", pytest.param("~logger", marks=pytest.mark.slow)])
def test_pretrain_logger_off_runs_without_wandb(tmp_path, capsys, off):
    out = tmp_path / "run"
    argv = [
        "pretrain",
        f"out_dir={out}",
        f"cache_dir={tmp_path / 'cache'}",
        "data.num_queries=60",
        "trainer.max_epochs=1",
        "oracle.hidden=16",
        off,
    ]
    code, err = _run(capsys, argv)
    assert code == 0, err
    assert (out / "oracle.pt").is_file()
    assert not (out / "wandb").exists()


# ---------------------------------------------------------------- report
def _run_dir(path: Path, learner: str = "linucb") -> Path:
    """A run folder with a hand-made single-choice results.csv and curves.csv (2 x 2 trials:
    ``learner`` and ``random``)."""
    path.mkdir(parents=True)
    rows = [
        {
            "learner": name,
            "rho": rho,
            "seed": 0,
            "rounds": 10,
            "avg_utility": 0.5 + 0.1 * k,
            "avg_regret": 0.5 - 0.1 * k,
            "accuracy": 0.6,
            "avg_cost": 0.001,
        }
        for k, name in enumerate([learner, "random"])
        for rho in (0.0, 500.0)
    ]
    pd.DataFrame(rows).to_csv(path / "results.csv", index=False)
    curves = [
        {
            "learner": r["learner"],
            "trial": i,
            "rho": r["rho"],
            "seed": 0,
            "round": t,
            "cum_regret": t * r["avg_regret"],
        }
        for i, r in enumerate(rows)
        for t in (5, 10)
    ]
    pd.DataFrame(curves).to_csv(path / "curves.csv", index=False)
    return path


def test_report_on_good_files_runs(tmp_path, capsys):
    run = _run_dir(tmp_path / "run")
    assert _run(capsys, ["report", str(run)])[0] == 0
    assert (run / "report.md").is_file()


def _cut_in_half(path: Path) -> None:
    text = path.read_text()
    path.write_text(text[: len(text) // 2 + 7])


def _edit(path: Path, column: str, value: object, row: int = 1) -> None:
    frame = pd.read_csv(path)
    frame[column] = frame[column].astype(object)
    frame.loc[row, column] = value
    frame.to_csv(path, index=False)


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda d: _cut_in_half(d / "results.csv"), "results.csv: "),
        (lambda d: (d / "results.csv").write_text(""), "results.csv: the file is empty"),
        (lambda d: _cut_in_half(d / "curves.csv"), "curves.csv: "),
        (
            lambda d: (
                pd.read_csv(d / "results.csv")
                .drop(columns="avg_utility")
                .to_csv(d / "results.csv", index=False)
            ),
            "['avg_utility'] are missing",
        ),
        (lambda d: _edit(d / "results.csv", "avg_utility", "high"), "column 'avg_utility' must"),
        (lambda d: _edit(d / "results.csv", "avg_cost", float("inf")), "column 'avg_cost' holds"),
        (lambda d: _edit(d / "results.csv", "rho", -5.0), "rho must be >= 0"),
        (lambda d: _edit(d / "results.csv", "avg_utility", None), "'avg_utility' is empty"),
    ],
)
def test_report_refuses_a_damaged_run_folder(tmp_path, capsys, damage, expected):
    run = _run_dir(tmp_path / "run")
    damage(run)
    code, err = _run(capsys, ["report", str(run)])
    assert code == 2
    assert expected in err and len(err.splitlines()) == 1
    assert not (run / "report.md").exists() and not (run / "summary.csv").exists()


def test_report_refuses_an_unknown_reference(tmp_path, capsys):
    run = _run_dir(tmp_path / "run")
    code, err = _run(capsys, ["report", str(run), "--reference", "linucbb"])
    assert code == 2 and "'linucbb' is not a learner" in err and "linucb" in err
    assert not (run / "report.md").exists()


def test_report_refuses_an_unwritable_out(tmp_path, capsys):
    run = _run_dir(tmp_path / "run")
    (tmp_path / "file").write_text("x")
    code, err = _run(capsys, ["report", str(run), "--out", str(tmp_path / "file" / "r")])
    assert code == 2 and "--out=" in err


# ---------------------------------------------------------------- gap
GOOD_GAP = {"rhos": [0.0], "steps": 10, "lr": 0.05, "rank": 2, "seed": 0}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"steps": 0}, "gap.steps must be an integer >= 1, got 0"),
        ({"steps": -3}, "gap.steps must be an integer >= 1, got -3"),
        ({"steps": 2.5}, "gap.steps must be an integer >= 1"),
        ({"rank": 0}, "gap.rank must be an integer >= 1, got 0"),
        ({"bogus": 1}, "unknown gap option(s) ['bogus']"),
        ({"rhos": []}, "gap.rhos must be a non-empty list"),
        ({"rhos": [-5.0]}, "gap.rhos must hold numbers >= 0, got -5.0"),
        ({"rhos": ["a"]}, "gap.rhos must hold numbers >= 0, got 'a'"),
        ({"lr": float("nan")}, "gap.lr must be a finite number > 0, got nan"),
        ({"lr": 0}, "gap.lr must be a finite number > 0"),
        ({"held_out": "train"}, "gap.held_out must be 'val' or 'test'"),
        ({"max_train": 0}, "gap.max_train must be an integer >= 1"),
        ({"seed": -1}, "gap.seed must be an integer >= 0"),
    ],
)
def test_gap_options_refuse_bad_values(change, expected):
    from torchroute.gap.options import GapConfigError, GapOptions

    with pytest.raises(GapConfigError) as err:
        GapOptions.from_config({**GOOD_GAP, **change})
    assert expected in str(err.value)


def test_gap_options_read_a_good_section_and_name_the_presets():
    from torchroute.cli import config_dir
    from torchroute.gap.options import GapConfigError, GapOptions, gap_presets

    opts = GapOptions.from_config(GOOD_GAP)
    assert (opts.rhos, opts.steps, opts.rank, opts.held_out) == ((0.0,), 10, 2, "test")
    presets = gap_presets(config_dir())
    assert "hpg_gap_simulator" in presets and "default" not in presets
    with pytest.raises(GapConfigError, match="experiment=hpg_gap_simulator"):
        GapOptions.from_config(None, presets)


def test_gap_without_a_section_names_the_presets_of_config_dir_folders(tmp_path, capsys):
    folder = tmp_path / "configs" / "experiment"
    folder.mkdir(parents=True)
    (folder / "my_gap.yaml").write_text("# @package _global_\ngap:\n  rhos: [0]\n")
    argv = ["gap", "--config-dir", str(tmp_path / "configs"), f"out_dir={tmp_path / 'out'}"]
    code, err = _run(capsys, argv)
    assert code == 2 and "experiment=my_gap" in err and "experiment=hpg_gap_simulator" in err
    assert not (tmp_path / "out").exists()


def test_a_full_disk_is_a_one_line_error_and_leaves_no_temp_file(tmp_path, capsys, monkeypatch):
    import errno
    import os

    table = _table_csv(tmp_path / "t.csv")
    out = tmp_path / "out" / "t.parquet"
    out.parent.mkdir()

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)  # where a full disk reports itself on write-back
    code, err = _run(capsys, ["data", "convert", str(table), str(out), *WIDE.split()])
    assert code == 2 and "No space left on device" in err
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("gap.steps=0", "gap.steps must be an integer >= 1, got 0"),
        ("gap.rank=0", "gap.rank must be an integer >= 1, got 0"),
        ("+gap.bogus=1", "unknown gap option(s) ['bogus']"),
        ("gap.rhos=[]", "gap.rhos must be a non-empty list"),
        ("gap.lr=nan", "gap.lr must be a finite number > 0, got nan"),
    ],
)
def test_gap_refuses_bad_options_before_writing(tmp_path, capsys, override, expected):
    out = tmp_path / "gap"
    argv = ["gap", "experiment=hpg_gap_simulator", f"out_dir={out}", override]
    code, err = _run(capsys, argv)
    assert code == 2 and expected in err
    assert not out.exists()


def test_gap_names_its_presets_and_refuses_a_simulate_folder(tmp_path, capsys):
    code, err = _run(capsys, ["gap", "experiment=default", f"out_dir={tmp_path / 'g'}"])
    assert code == 2 and "experiment=hpg_gap_simulator" in err
    run = _run_dir(tmp_path / "run")
    (run / "fingerprint.json").write_text('{"config": "x"}')
    code, err = _run(capsys, ["gap", "experiment=hpg_gap_simulator", f"out_dir={run}"])
    assert code == 2 and "holds a simulate run" in err
    assert not (run / "gap.csv").exists()


# ---------------------------------------------------------------- simulate and sweep folders
def _simulate_args(out: Path, cache: Path, *extra: str) -> list[str]:
    return [
        "simulate",
        "experiment=default",
        f"out_dir={out}",
        f"cache_dir={cache}",
        "data.num_queries=60",
        "rhos=[0]",
        "seeds=[0]",
        "run_learners=[random]",
        "progress=false",
        "report=false",
        "~logger",
        *extra,
    ]


def test_simulate_refuses_an_out_dir_or_cache_dir_inside_its_data_folder(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    table = _table_csv(data / "t.csv", text=("a b", "c d", "e f"))
    table_args = [
        "data=table",
        f"data.path={table}",
        "data.score_pattern='{arm}'",
        "data.cost_pattern='{arm}_cost'",
        "data.default_split=test",
        "~encoder",
    ]
    base = ["simulate", f"cache_dir={tmp_path / 'cache'}", "rhos=[0]", "seeds=[0]"]
    base += ["run_learners=[random]", "progress=false", "report=false", "~logger"]
    for key, folder in (("out_dir", data / "run"), ("cache_dir", data / "cache")):
        argv = [*base, f"{key}={folder}", *table_args]
        if key == "cache_dir":
            argv.append(f"out_dir={tmp_path / 'out'}")
        else:
            argv[1] = f"cache_dir={tmp_path / 'cache'}"
        code, err = _run(capsys, argv)
        assert code == 2, err
        assert f"{key}=" in err and "lies inside the data folder" in err and "(data.path)" in err
    assert sorted(p.name for p in data.iterdir()) == ["t.csv"]
    assert not (tmp_path / "out").exists()


def test_simulate_refuses_an_unwritable_out_dir_before_building(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    argv = _simulate_args(tmp_path / "file" / "run", tmp_path / "cache")
    code, err = _run(capsys, argv)
    assert code == 2 and "out_dir=" in err and "is a file, not a folder" in err
    assert not (tmp_path / "cache").exists()  # nothing embedded or written


def test_resume_of_a_run_removes_the_temp_files_an_interrupted_write_left(tmp_path, capsys):
    out, cache = tmp_path / "run", tmp_path / "cache"
    assert _run(capsys, _simulate_args(out, cache))[0] == 0
    stale = [out / "checkpoints" / ".random.pt.abc123.tmp", out / ".results.csv.x1.tmp"]
    for path in stale:
        path.write_bytes(b"half a file")
    assert _run(capsys, _simulate_args(out, cache))[0] == 0  # same configuration: reused
    assert not any(p.exists() for p in stale)
    assert (out / "checkpoints" / "random.pt").is_file()


def test_sweep_refuses_an_out_dir_holding_a_simulate_run(tmp_path, capsys):
    out, cache = tmp_path / "run", tmp_path / "cache"
    assert _run(capsys, _simulate_args(out, cache))[0] == 0
    before = sorted(p.name for p in out.iterdir())
    argv = ["sweep", "experiment=default", "sweep=linucb_alpha", f"out_dir={out}"]
    code, err = _run(capsys, [*argv, f"cache_dir={cache}", "~logger"])
    assert code == 2 and "holds a simulate run" in err
    assert sorted(p.name for p in out.iterdir()) == before


def test_a_missing_value_key_is_not_reported_as_unknown(tmp_path, capsys):
    """``data.path`` is ``???`` in configs/data/table.yaml: a key all the same. A grammar error
    elsewhere must be reported as itself, and a real unknown key still by name."""
    argv = ["simulate", "data=table", "data.path=x.csv", "data.score_pattern={arm}", "--cfg"]
    code, err = _run(capsys, argv)
    assert code == 2 and "data.path" not in err and "{arm}" in err
    code, err = _run(capsys, ["simulate", "data=table", "data.path=x.csv", "data.bogus=1"])
    assert code == 2 and "unknown key 'data.bogus'" in err


# ---------------------------------------------------------------- a full disk, a read-only folder
def _failing_write(monkeypatch, name: str, errno_code: int) -> None:
    """Every write of a file called ``name`` fails with ``errno_code`` where the OS reports
    it: at write-back (``fsync``) for a full disk, at creation for a read-only folder."""
    import errno
    import os
    import tempfile

    message = os.strerror(errno_code)
    if errno_code == errno.ENOSPC:
        real_fsync = os.fsync

        def fsync(fd):
            if Path(os.readlink(f"/proc/self/fd/{fd}")).name.startswith(f".{name}."):
                raise OSError(errno_code, message)
            return real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        return
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, prefix=None, **kwargs):
        if prefix == f".{name}.":
            raise OSError(errno_code, message)
        return real_mkstemp(*args, prefix=prefix, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def _assert_clean_failure(code: int, err: str, target: Path, reason: str, root: Path) -> None:
    assert code == 2, err
    line = err.splitlines()[-1]  # above it: progress bars only
    assert line.startswith("torchroute ") and reason in line and str(target) in line
    assert "Traceback" not in err
    assert not target.exists()
    assert not [p for p in root.rglob("*.tmp") if "cache" not in p.parts]


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.mark.parametrize(
    ("name", "errno_name"),
    [
        ("random.pt", "ENOSPC"),  # the learner's checkpoint
        ("results.csv", "ENOSPC"),
        ("results.csv", "EROFS"),  # out_dir turned read-only after config.yaml, checkpoints
    ],
)
def test_simulate_on_a_full_disk_or_read_only_folder(
    tmp_path, capsys, monkeypatch, shared_cache, name, errno_name
):
    import errno

    out = tmp_path / "run"
    _failing_write(monkeypatch, name, getattr(errno, errno_name))
    code, err = _run(capsys, _simulate_args(out, shared_cache))
    reason = "No space left on device" if errno_name == "ENOSPC" else "Read-only file system"
    target = out / "checkpoints" / name if name.endswith(".pt") else out / name
    _assert_clean_failure(code, err, target, reason, tmp_path)
    assert not (out / "curves.csv").exists() or name == "results.csv"


@pytest.mark.parametrize("name", ["report.md", "summary.csv", "pareto.png"])
def test_report_on_a_full_disk(tmp_path, capsys, monkeypatch, name):
    import errno

    run = _run_dir(tmp_path / "run")
    _failing_write(monkeypatch, name, errno.ENOSPC)
    code, err = _run(capsys, ["report", str(run)])
    _assert_clean_failure(code, err, run / name, "No space left on device", tmp_path)


def test_evaluate_on_a_full_disk(tmp_path, capsys, monkeypatch):
    import errno

    logs = _decision_log(tmp_path / "log.parquet")
    out = tmp_path / "ope"
    _failing_write(monkeypatch, "ope.csv", errno.ENOSPC)
    argv = ["evaluate", f"logs={logs}", "targets=[arm:a]", f"out_dir={out}", "bootstrap=10"]
    code, err = _run(capsys, argv)
    _assert_clean_failure(code, err, out / "ope.csv", "No space left on device", tmp_path)


def test_serve_export_log_on_a_full_disk(tmp_path, monkeypatch):
    import errno

    import torch

    from torchroute.learners import LinUCB
    from torchroute.serve.export import export_log
    from torchroute.serve.router import Router

    state = tmp_path / "router.pt"
    router = Router.fresh(
        LinUCB.from_problem, ["a", "b"], rho=0.0, dim=2, dtype=torch.float64, state_path=state
    )
    router.route(embeddings=[[1.0, 0.0]])
    router.close()
    out = tmp_path / "log.parquet"
    _failing_write(monkeypatch, "log.parquet", errno.ENOSPC)
    with pytest.raises(OSError, match=f"cannot write {out}: No space left on device"):
        export_log(tmp_path / "router.sqlite", out)
    assert not out.exists() and not list(tmp_path.glob("*.tmp"))


@pytest.mark.slow
def test_pretrain_on_a_full_disk(tmp_path, capsys, monkeypatch, shared_cache):
    import errno

    out = tmp_path / "run"
    _failing_write(monkeypatch, "oracle.pt", errno.ENOSPC)
    argv = ["pretrain", f"out_dir={out}", f"cache_dir={shared_cache}", "data.num_queries=60"]
    code, err = _run(capsys, [*argv, "trainer.max_epochs=1", "oracle.hidden=16", "logger=null"])
    _assert_clean_failure(code, err, out / "oracle.pt", "No space left on device", tmp_path)


# ------------------------------------------------ found in the pass over every command
@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("seeds=[0,0]", "seeds repeats [0] in [0, 0]: each trial would run twice"),
        ("rhos=[0,0.0]", "rhos repeats [0.0]"),
        ("resume={folder}", "is a folder; give a checkpoint file"),
        ("features.pca_dim=abc", "features.pca_dim must be an integer >= 1 or null, got 'abc'"),
        ("features.bias=maybe", "features.bias must be true or false, got 'maybe'"),
        ("run_learners=random", "run_learners must be a list of learner names"),
        ("run_learners=[]", "run_learners=[] names no learner"),
        ("loop_seed=abc", "loop_seed must be an integer, got 'abc'"),
        ("overwrite=maybe", "overwrite must be true or false, got 'maybe'"),
        ("progress=maybe", "progress must be true or false, got 'maybe'"),
        ("data.level_probs=[-1,1,1]", "level_probs must be three finite numbers >= 0"),
        ("data.seed=abc", "seed must be an integer >= 0, got 'abc'"),
        ("env.premium_cap=nan", "premium_cap must be a finite number >= 0, got nan"),
        ("env.premium_ratio=2", "premium_ratio must be a fraction in [0, 1], got 2"),
    ],
)
def test_simulate_refuses_before_writing(tmp_path, capsys, shared_cache, override, expected):
    out = tmp_path / "run"
    override = override.format(folder=tmp_path)
    argv = _simulate_args(out, shared_cache)
    if override.startswith("env."):  # the best-of-2 env of the default's companion run
        argv = [a.replace("experiment=default", "experiment=default_subset") for a in argv]
    code, err = _run(capsys, [*argv, override])
    assert code == 2 and expected in err.splitlines()[-1]
    assert not out.exists()


def test_report_on_a_file_says_it_wants_a_folder(tmp_path, capsys):
    (tmp_path / "results.csv").write_text("learner\n")
    code, err = _run(capsys, ["report", str(tmp_path / "results.csv")])
    assert code == 2 and "is a file; report reads the out_dir (folder)" in err


def _decision_log(path: Path) -> Path:
    rows = [
        {"request_id": f"r{i}", "features": [1.0, float(i % 2)], "arm": "ab"[i % 2]}
        | {"propensity": 0.5, "score": float(i % 3 == 0), "cost": 0.01}
        for i in range(40)
    ]
    pd.DataFrame(rows).to_parquet(path)
    return path


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("clip=-1", "clip must be a finite number > 0, got -1"),
        ("switch_tau=0", "switch_tau must be a finite number > 0, got 0"),
        ("switch_tau=nan", "switch_tau must be a number, got 'nan'"),
        ("lam=0", "lam must be a finite number > 0, got 0"),
        ("seed=abc", "seed must be an integer >= 0, got 'abc'"),
        ("alpha=abc", "alpha must be a number, got 'abc'"),
        ("out_dir={file}", "exists and is not a folder"),
    ],
)
def test_evaluate_refuses_bad_options_before_computing(tmp_path, capsys, option, expected):
    logs = _decision_log(tmp_path / "log.parquet")
    (tmp_path / "afile").write_text("keep")
    option = option.format(file=tmp_path / "afile")
    argv = ["evaluate", f"logs={logs}", "targets=[arm:a]", f"out_dir={tmp_path / 'ope'}"]
    code, err = _run(capsys, [*argv, option])
    assert code == 2 and expected in err
    assert not (tmp_path / "ope").exists() and (tmp_path / "afile").read_text() == "keep"


def test_convert_without_an_output_names_the_mistake(tmp_path, capsys):
    table = _table_csv(tmp_path / "t.csv")
    code, err = _run(capsys, ["data", "convert", str(table), *WIDE.split()])
    assert code == 2 and "convert needs the output file after the input" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]
