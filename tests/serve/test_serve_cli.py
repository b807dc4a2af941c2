"""``torchroute serve`` as a user starts it: a real process, real HTTP on 127.0.0.1.

With no token given, serve makes one, writes it to a file only the user can read beside
the state and says where; POSTs need it. ``--insecure-no-auth`` keeps open POSTs (on
loopback only). ``/docs`` and ``/openapi.json`` answer only with ``--docs``, and the page
loads nothing from another host. The run served is a chunked one (``trial_chunk``): its
checkpoints are ``<learner>.chunk<c>.pt``.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.conftest import LINUCB_NODE, REPO_ROOT, make_table, tiny_run_config
from torchroute.run import run_config
from torchroute.serve.security import TOKEN_ENV


@pytest.fixture(scope="module")
def chunked_run(tmp_path_factory):
    """Four trials run two at a time: ``linucb.chunk0.pt`` and ``linucb.chunk1.pt``."""
    out = tmp_path_factory.mktemp("chunked")
    cfg = tiny_run_config(
        out, {"linucb": LINUCB_NODE}, "seeds=[0,1]", "rng=per_trial", "trial_chunk=2"
    )
    run_config(cfg)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "linucb.chunk0.pt",
        "linucb.chunk1.pt",
    ]
    return out


class Server:
    """``python -m torchroute serve ...`` in its own process; ``url`` once it listens."""

    def __init__(self, *argv: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
        env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO_ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torchroute", "serve", *argv, "--port", "0", "--no-encoder"],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 120
        while True:
            found = [re.search(r"on (http://127\.0\.0\.1:\d+)", x) for x in self.lines]
            found = [m for m in found if m]
            if found:
                self.url = found[0].group(1)
                break
            assert self.proc.poll() is None, "".join(self.lines)
            assert time.monotonic() < deadline, "serve did not start in 120 s"
            time.sleep(0.05)
        while True:  # until uvicorn answers
            try:
                httpx.get(f"{self.url}/health", timeout=5)
                return
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.05)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def _route(url, headers=None):
    body = {"embeddings": make_table().embeddings[:2].tolist()}
    return httpx.post(f"{url}/route", json=body, headers=headers or {}, timeout=30)


def test_posts_need_the_token_serve_made_by_default(chunked_run, tmp_path):
    state = tmp_path / "router.pt"
    server = Server(str(chunked_run), "--rho", "100", "--seed", "1", "--state", str(state))
    try:
        token_file = tmp_path / "router.pt.token"
        assert any(str(token_file) in line for line in server.lines)  # says where
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600  # the user's only
        token = token_file.read_text().strip()
        assert len(token) >= 32
        health = httpx.get(f"{server.url}/health", timeout=30).json()
        assert health["rho"] == 100.0 and health["learner"] == "LinUCB"
        assert _route(server.url).status_code == 401
        assert _route(server.url, {"Authorization": "Bearer " + "x" * 40}).status_code == 401
        answer = _route(server.url, {"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200 and len(answer.json()["decisions"]) == 2
        for path in ("/docs", "/openapi.json", "/redoc"):  # off without --docs
            assert httpx.get(f"{server.url}{path}", timeout=30).status_code == 404
    finally:
        server.stop()
    # a restart keeps the token (clients keep working)
    server = Server(str(chunked_run), "--rho", "100", "--seed", "1", "--state", str(state))
    try:
        assert _route(server.url, {"Authorization": f"Bearer {token}"}).status_code == 200
    finally:
        server.stop()


def test_insecure_no_auth_keeps_open_posts_and_docs_load_nothing_remote(chunked_run, tmp_path):
    state = tmp_path / "router.pt"
    server = Server(str(chunked_run), "--state", str(state), "--insecure-no-auth", "--docs")
    try:
        assert _route(server.url).status_code == 200
        assert any("--insecure-no-auth" in line and "WARNING" in line for line in server.lines)
        assert not (tmp_path / "router.pt.token").exists()
        page = httpx.get(f"{server.url}/docs", timeout=30)
        assert page.status_code == 200 and "POST /route" in page.text
        assert "<script" not in page.text.lower() and "://" not in page.text
        assert "default-src 'none'" in page.headers["content-security-policy"]
        schema = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
        assert "/feedback" in schema["paths"]
    finally:
        server.stop()
