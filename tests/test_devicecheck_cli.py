"""The device check's command line on the CPU (``--device cpu`` is a dry run): the package
entry point, the JSON rows, the per-case time limit and the failure reasons printed as they
happen."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from torchroute.devicecheck.main import main

SMALL = ["--device", "cpu", "--workers", "0", "--no-throughput"]


def test_runs_from_the_installed_package_and_writes_json_rows(tmp_path):
    out = tmp_path / "rows.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cases = ["--only", "linucb", "hpg", "--rounds", "5", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "torchroute.devicecheck", *SMALL, *cases],
        cwd=tmp_path,  # no benchmarks/ or tests/ here
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(out.read_text())
    assert [row["case"] for row in rows["cases"]] == ["linucb", "hpg"]
    assert rows["passed"] is True and rows["failures"] == [] and rows["rounds"] == 5
    for row in rows["cases"]:
        assert row["status"] == "ok" and row["trial_rounds_per_s"] > 0
        assert 0 <= row["max_rel_err"] <= row["rtol"]


def test_a_case_over_its_limit_fails_with_its_reason_at_once(tmp_path, capsys):
    out = tmp_path / "rows.json"
    argv = [*SMALL, "--only", "linucb", "random", "--rounds", "50", "--json", str(out)]
    assert main([*argv, "--per-case-seconds", "1e-9"]) == 1
    lines = capsys.readouterr().out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("linucb "))
    assert lines[first].endswith("FAIL")
    # the reason follows the case's own line, before the next case runs
    assert "over its limit of 1e-09 s at round 0 of 50" in lines[first + 1]
    assert lines[first + 1].lstrip().startswith("linucb: its CPU run raised CaseTimeout")
    assert lines[first + 2].startswith("random ")
    rows = json.loads(out.read_text())
    assert [row["status"] for row in rows["cases"]] == ["FAIL", "FAIL"]
    assert rows["passed"] is False and len(rows["failures"]) == 2


def test_bad_options_exit_2(tmp_path, capsys):
    assert main([*SMALL, "--rounds", "0"]) == 2
    assert main([*SMALL, "--json", str(tmp_path / "missing" / "rows.json")]) == 2
    out = capsys.readouterr().out
    assert "--rounds must be >= 1" in out and "--json" in out
