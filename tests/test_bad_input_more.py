"""The last bad inputs: each a one-line error (exit 2, or a 4xx over HTTP) naming the key
or field and what was expected, with nothing written and the input left as it was."""

from __future__ import annotations

import os
import re
import socket

import pandas as pd
import pytest
import torch
from fastapi.testclient import TestClient

from tests.simulate_argv import small_simulate
from tests.test_bad_input import _run_dir
from torchroute.cli import main
from torchroute.learners import LinUCB
from torchroute.serve import Router
from torchroute.serve.app import create_app

WIDE = ["score_pattern={arm}", "cost_pattern={arm}_cost"]
#: the same options as Hydra overrides of data.* (quoted: braces are override syntax)
WIDE_DATA = ["data.score_pattern='{arm}'", "data.cost_pattern='{arm}_cost'"]


def _run(capsys, argv):
    code = main(argv)
    captured = capsys.readouterr()
    err = captured.err.strip()
    return code, err, captured.out


def _one_line(code, err, *needles):
    assert code == 2, err
    line = err.splitlines()[-1]
    assert line.startswith("torchroute ") and ": error: " in line, err
    for needle in needles:
        assert needle in line, (needle, line)


def _csv(path, text, ids=("q1", "q2", "q3")):
    pd.DataFrame(
        {
            "query_id": list(ids),
            "text": ["a b", "c d", "e f"],
            "a": [1, 0, 1],
            "a_cost": [0.1, 0.1, 0.1],
            "b": [0, 1, 1],
            "b_cost": [0.2, 0.2, 0.2],
        }
    ).to_csv(path, index=False)
    if text is not None:
        path.write_text(text)
    return path


def test_posting_a_model_of_price_1e308_is_a_422_not_a_500():
    router = Router.fresh(LinUCB.from_problem, ["a", "b"], rho=100.0, dim=2)
    client = TestClient(create_app(router, allowed_hosts=["*"]))
    for price in (1e308, 1e31, -1.0):
        answer = client.post("/models", json={"name": "big", "price": price})
        assert answer.status_code == 422, answer.text
        assert "price" in answer.json()["detail"] and "\n" not in answer.json()["detail"]
    assert router.arm_names == ("a", "b")  # nothing added
    answer = client.post("/models", json={"name": "big", "price": 1e30})
    assert answer.status_code == 200


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["companions=[nosuch]"], ["companions: no experiment preset ['nosuch']"]),
        (["run_learners=[random]", "companions=[nosuch]"], ["no experiment preset"]),
        (["run_learners=[random]", "reference=nosuch"], ["reference='nosuch' is not a learner"]),
        (["seeds=[-1]"], ["seeds must be integers >= 0", "[-1]"]),
    ],
)
def test_simulate_refuses_before_writing(tmp_path, capsys, extra, needles):
    out = tmp_path / "run"
    _one_line(*_run(capsys, small_simulate(out, *extra))[:2], *needles)
    assert not out.exists()


def test_a_blank_query_id_is_refused_by_inspect_and_simulate(tmp_path, capsys):
    (tmp_path / "data").mkdir()
    for ids in (("q1", " ", "q3"), ("q1", None, "q3")):
        table = _csv(tmp_path / "data" / "t.csv", None, ids=ids)
        before = table.read_bytes()
        code, err, _ = _run(capsys, ["data", "inspect", str(table), *WIDE])
        _one_line(code, err, "1 of 3 query ids are blank")
        out = tmp_path / "run"
        argv = small_simulate(out, "data=table", f"data.path={table}", "run_learners=[random]")
        argv += WIDE_DATA
        argv.remove("data.num_queries=60")
        _one_line(*_run(capsys, argv)[:2], "query ids are blank")
        assert not out.exists() and table.read_bytes() == before


def test_costs_without_a_space_says_how_yaml_read_it(tmp_path, capsys):
    table = _csv(tmp_path / "t.csv", None)
    code, err, _ = _run(
        capsys, ["data", "inspect", str(table), "score_pattern={arm}", "costs={a:-1}"]
    )
    _one_line(code, err, "YAML read {a:-1} as the key 'a:-1'", "costs={a: -1}")
    code, err, _ = _run(
        capsys, ["data", "inspect", str(table), "score_pattern={arm}", "costs={a: x}"]
    )
    _one_line(code, err, "the cost of 'a' must be a number, got 'x'")


def _not_files(tmp_path):
    folder = tmp_path / "a-folder.csv"
    folder.mkdir()
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    device = tmp_path / "device.csv"
    device.symlink_to("/dev/null")
    broken = tmp_path / "broken.csv"
    broken.symlink_to(tmp_path / "nowhere.csv")
    sock_path = tmp_path / "sock.csv"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    return sock, [
        (folder, "is a folder, not a file"),
        (fifo, "is a FIFO (named pipe), not a file"),
        (device, "is a link to /dev/null, which is a device, not a file"),
        (broken, f"is a broken link to {tmp_path / 'nowhere.csv'}"),
        (sock_path, "is a socket, not a file"),
        (tmp_path / "missing.csv", "no such file"),
    ]


def test_a_folder_fifo_or_device_as_a_table_or_a_log_says_what_it_is(tmp_path, capsys):
    sock, cases = _not_files(tmp_path)
    try:
        for path, needle in cases:
            argv = ["data", "inspect", "--loader", "table", str(path), *WIDE]
            _one_line(*_run(capsys, argv)[:2], f"{path}: {needle}; expected a table file")
            out = tmp_path / "ope"
            argv = ["evaluate", f"logs={path}", "targets=[arm:a]", f"out_dir={out}"]
            _one_line(*_run(capsys, argv)[:2], f"{path}: {needle}; expected a decision log")
            assert not out.exists()
    finally:
        sock.close()


def _decision_log(path):
    rows = [
        {"request_id": f"r{i}", "features": [1.0, float(i % 2)], "arm": "ab"[i % 2]}
        | {"propensity": 0.5, "score": float(i % 3 == 0), "cost": 0.01}
        for i in range(40)
    ]
    pd.DataFrame(rows).to_parquet(path)
    return path


def test_evaluate_folds_1_is_refused(tmp_path, capsys):
    logs = _decision_log(tmp_path / "log.parquet")
    out = tmp_path / "ope"
    argv = ["evaluate", f"logs={logs}", "targets=[arm:a]", "folds=1", f"out_dir={out}"]
    _one_line(*_run(capsys, argv)[:2], "folds must be an integer >= 2, got 1", "cross-fitting")
    assert not out.exists()


def test_pretrain_on_a_one_arm_table_is_refused(tmp_path, capsys):
    table = tmp_path / "one.csv"
    pd.DataFrame(
        {"query_id": ["q1", "q2"], "text": ["a b", "c d"], "a": [1, 0], "a_cost": [0.1, 0.1]}
    ).to_csv(table, index=False)
    out = tmp_path / "oracle"
    argv = ["pretrain", f"out_dir={out}", f"cache_dir={tmp_path / 'cache'}", "data=table"]
    argv += [f"data.path={table}", *WIDE_DATA, "logger=null"]
    _one_line(*_run(capsys, argv)[:2], "has 1 arm ['a']", "at least 2")
    assert not out.exists()


def test_a_duplicate_header_column_is_named_as_written(tmp_path, capsys):
    table = tmp_path / "dup.csv"
    table.write_text("query_id,text,a,a_cost,a,b_cost\nq1,x y,1,0.1,0,0.2\n")
    code, err, _ = _run(capsys, ["data", "inspect", str(table), *WIDE])
    _one_line(code, err, "the header names column 'a' twice")
    assert "a.1" not in err


def test_convert_refuses_an_output_inside_a_packaged_data_folder(tmp_path, capsys, monkeypatch):
    from torchroute.data.inspect import shipped_data_roots

    roots = shipped_data_roots()
    if not roots:
        pytest.skip("no packaged data preset names a folder")
    root, preset = next(iter(roots.items()))
    table = _csv(tmp_path / "t.csv", None)
    out = root / "converted-by-a-test.csv"
    code, err, _ = _run(capsys, ["data", "convert", str(table), str(out), *WIDE])
    _one_line(code, err, f"lies inside {root}", f"data={preset}")
    assert not out.exists()


# ---------------------------------------------------------------- report
def test_report_without_curves_says_what_it_skips(tmp_path, capsys):
    run = _run_dir(tmp_path / "run")
    (run / "curves.csv").unlink()
    code, err, _ = _run(capsys, ["report", str(run)])
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert "No curves.csv in" in text and "regret curves" in text and "skipped" in text
    assert not (run / "regret_curves.png").exists()


def test_a_learner_name_with_markup_is_escaped_in_the_report(tmp_path, capsys):
    name = "<img src=x onerror=alert(1)>|**bold**"
    run = _run_dir(tmp_path / "run", learner=name)
    assert _run(capsys, ["report", str(run)])[0] == 0
    text = (run / "report.md").read_text()
    assert "<img" not in text and "**bold**" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;\\|\\*\\*bold\\*\\*" in text
    rows = [line for line in text.splitlines() if line.startswith("|")]
    tables: list[list[str]] = []
    previous = ""
    for line in text.splitlines():  # consecutive "|" lines form one table
        if line.startswith("|"):
            if not tables or tables[-1][-1] != previous:
                tables.append([])
            tables[-1].append(line)
        previous = line
    assert any("&lt;img" in row for row in rows)
    for table in tables:  # the name's "|" is escaped: it adds no column
        assert len({len(re.findall(r"(?<!\\)\|", row)) for row in table}) == 1, table


def test_torch_errors_are_said_in_one_line_for_a_truncated_file(tmp_path):
    from torchroute.checkpoint import CheckpointError, load_checkpoint

    path = tmp_path / "x.pt"
    torch.save({"format": 1}, path)
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    assert "\n" not in str(caught.value) and "cannot be read" in str(caught.value)


def test_simulate_with_a_config_group_set_to_null_names_it_and_the_way_out(tmp_path, capsys):
    out = tmp_path / "run"
    code, err, printed = _run(capsys, ["simulate", "logger=null", f"out_dir={out}"])
    _one_line(code, err, "logger=null: the config group 'logger' cannot be null", "~logger")
    assert "Traceback" not in err and printed == "" and not out.exists()
