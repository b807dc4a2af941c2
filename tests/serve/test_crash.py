"""Load on loopback, kill -9 of the server at a random moment, restart: nothing lost or doubled."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

from tests.serve.crash_server import ARMS, LAM, RHO, D, build

CLIENTS, REQUESTS = 8, 500  # each client: 250 route + 250 feedback calls
ROOT = Path(__file__).resolve().parents[2]


def _start(state: Path, tmp: Path, tag: str) -> tuple[subprocess.Popen, str]:
    port_file = tmp / f"port-{tag}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.serve.crash_server", str(state), str(port_file)],
        cwd=ROOT,
        env=env,
    )
    deadline = time.monotonic() + 120
    while not port_file.exists():
        assert proc.poll() is None, "the server did not start"
        assert time.monotonic() < deadline, "the server did not start in 120 s"
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port_file.read_text()}"
    while True:  # until it answers
        try:
            httpx.get(f"{url}/health", timeout=5)
            return proc, url
        except httpx.TransportError:
            assert time.monotonic() < deadline
            time.sleep(0.05)


@pytest.mark.slow  # two server starts and 4000 requests: 20-40 s on two cores
def test_kill_9_under_load_then_restart_loses_and_doubles_nothing(tmp_path):
    state = tmp_path / "router.pt"
    server, url = _start(state, tmp_path, "first")
    lock = threading.Lock()
    sent: dict[str, tuple[list[float], str, float, float]] = {}  # id -> (x, model, s, c)
    acked: set[str] = set()
    in_flight: list[dict] = []  # feedback bodies without an answer when the server died
    done = [0]
    kill_after = random.Random().randint(300, CLIENTS * REQUESTS - 300)  # a random moment

    def client(worker: int) -> None:
        rng = np.random.default_rng(worker)
        with httpx.Client(base_url=url, timeout=30) as http:
            for _ in range(REQUESTS // 2):
                x = rng.normal(size=(int(rng.integers(1, 3)), D)).tolist()
                try:
                    decisions = http.post("/route", json={"embeddings": x}).json()["decisions"]
                except httpx.TransportError:
                    return
                ids = [d["request_id"] for d in decisions]
                scores = rng.uniform(size=len(ids)).tolist()
                costs = rng.uniform(0, 0.1, len(ids)).tolist()
                with lock:
                    for rid, xi, d, s, c in zip(ids, x, decisions, scores, costs):
                        sent[rid] = (xi, d["model"], s, c)
                body = {"request_ids": ids, "scores": scores, "costs": costs}
                try:
                    response = http.post("/feedback", json=body)
                except httpx.TransportError:
                    with lock:
                        in_flight.append(body)
                    return
                assert response.status_code == 200, response.text
                assert response.json()["applied"] == ids
                with lock:
                    acked.update(ids)
                    done[0] += 2

    def killer() -> None:
        while server.poll() is None:
            with lock:
                if done[0] >= kill_after:
                    break
            time.sleep(0.001)
        server.send_signal(signal.SIGKILL)

    threads = [threading.Thread(target=client, args=(w,)) for w in range(CLIENTS)]
    reaper = threading.Thread(target=killer)
    for t in [*threads, reaper]:
        t.start()
    for t in [*threads, reaper]:
        t.join(300)
    assert server.wait(30) == -signal.SIGKILL
    assert acked  # some feedback was acknowledged before the kill

    server, url = _start(state, tmp_path, "second")
    try:
        with httpx.Client(base_url=url, timeout=30) as http:
            answered_before = http.get("/health").json()["feedback"]
            assert answered_before >= len(acked)  # every acknowledged feedback survived
            for body in in_flight:  # the clients retry what got no answer
                report = http.post("/feedback", json=body)
                if report.status_code == 200:
                    report = report.json()
                    assert not report["unknown"]
                    assert set(report["applied"]) | set(report["duplicate"]) == set(
                        body["request_ids"]
                    )
                else:  # all of it was applied before the crash
                    assert report.status_code == 404 and "already answered" in report.text
            repeat = sorted(acked)[:50]
            body = {
                "request_ids": repeat,
                "scores": [0.5] * len(repeat),
                "costs": [0.0] * len(repeat),
            }
            again = http.post("/feedback", json=body)
            assert again.status_code == 404  # acknowledged ones are never counted twice
            health = http.get("/health").json()
        answered = acked | {rid for body in in_flight for rid in body["request_ids"]}
        assert health["feedback"] == len(answered)
    finally:
        server.send_signal(signal.SIGTERM)  # a clean stop: the final checkpoint
        server.wait(60)

    final = build(state)  # checkpoint + the log after it
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for part in tmp_path.glob("router.sqlite*"):
        shutil.copy(part, scratch / part.name)
    replayed = build(scratch / "router.pt")  # the log alone, from a fresh learner
    for key, value in final.learner.state_dict().items():
        torch.testing.assert_close(replayed.learner.state_dict()[key], value, atol=1e-8, rtol=0)
    # and both are the ridge fit of every feedback sent, each exactly once
    a = np.stack([LAM * np.eye(D)] * len(ARMS))
    b = np.zeros((len(ARMS), D))
    for rid in answered:
        x, model, s, c = sent[rid]
        k = ARMS.index(model)
        a[k] += np.outer(x, x)
        b[k] += np.clip(s - RHO * c, 0, 1) * np.asarray(x)
    np.testing.assert_allclose(np.linalg.inv(final.learner.a_inv[0].numpy()), a, atol=1e-8)
    theta = np.linalg.solve(a, b[..., None])[..., 0]
    np.testing.assert_allclose(final.learner.theta[0].numpy(), theta, atol=1e-8)
    assert int(final.learner.rounds[0]) == len(answered)
    assert not list(tmp_path.glob(".router.pt.*.tmp"))
