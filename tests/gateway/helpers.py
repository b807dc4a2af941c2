"""The pieces of the gateway tests: a router with a tiny text encoder, a backends file, keys,
a gateway in a thread or in its own process."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import torch
import yaml

from tests.gateway.stub_backend import ServerThread
from torchroute.gateway.app import Gateway, create_gateway_app
from torchroute.gateway.backends import load_backends
from torchroute.gateway.keys import Key, Keys, digest
from torchroute.learners import LinUCB
from torchroute.serve import Router

ARMS = ["small", "medium", "big"]
#: prices per million input / output tokens of each arm
PRICES = {"small": (1.0, 2.0), "medium": (3.0, 6.0), "big": (10.0, 30.0)}
RHO = 100.0
ROOT = Path(__file__).resolve().parents[2]
ALICE, BOB, ADMIN = "alice-key-0123456789abcdef", "bob-key-0123456789abcdef", "admin-key-0123456789"


def encode(texts: list[str]) -> torch.Tensor:
    """A deterministic text embedding ``[B, 3]``: a bias, the length, the count of 'a'."""
    return torch.tensor(
        [[1.0, len(t) / 100, t.count("a") / 10] for t in texts], dtype=torch.float64
    )


def build_router(
    state: str | Path | None = None, arms: list[str] = ARMS, rho: float = RHO
) -> Router:
    """A fresh LinUCB router (float64, ``d = 3``) over ``arms`` with :func:`encode`."""
    return Router.fresh(
        lambda p: LinUCB.from_problem(p, lam=1.0).double(),
        arms,
        rho=rho,
        dim=3,
        dtype=torch.float64,
        encode=encode,
        state_path=state,
        checkpoint_every=5,
    )


def write_backends(path: Path, url: str, timeout_s: float = 1.0, **extra: dict) -> Path:
    """A backends file: each arm at ``url`` as upstream model ``<arm>-up``."""
    models = {
        name: {
            "base_url": f"{url}/v1",
            "model": f"{name}-up",
            "input_per_mtok": PRICES[name][0],
            "output_per_mtok": PRICES[name][1],
            "timeout_s": timeout_s,
        }
        for name in ARMS
    }
    for name, entry in extra.items():
        models[name] = {**models.get(name, {}), **entry}
    path.write_text(yaml.safe_dump({"models": models}))
    return path


def keys(cap_alice: float = 1.0) -> Keys:
    """alice (capped), bob (no cap), an admin."""
    return Keys(
        [
            Key("alice", digest(ALICE), cap_alice),
            Key("bob", digest(BOB)),
            Key("ops", hashlib.sha256(ADMIN.encode()).digest(), admin=True),
        ]
    )


def start_gateway(router: Router, backends_file: Path, **kwargs) -> ServerThread:
    """A gateway over ``router`` in a server thread (enter it to start)."""
    gateway = Gateway([router], load_backends(backends_file), **kwargs)
    return ServerThread(create_gateway_app(gateway))


def start_gateway_process(
    state: Path, backends: Path, tmp: Path, tag: str
) -> tuple[subprocess.Popen, str]:
    """A gateway in its own process (``tests.gateway.gateway_server``) on ``state`` and
    ``backends``, its port written to ``tmp/port-<tag>``: the process and its URL."""
    port_file = tmp / f"port-{tag}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.gateway.gateway_server",
            str(state),
            str(backends),
            str(port_file),
        ],
        cwd=ROOT,
        env=env,
    )
    deadline = time.monotonic() + 120
    while not port_file.exists():
        assert proc.poll() is None, "the gateway did not start"
        assert time.monotonic() < deadline, "the gateway did not start in 120 s"
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port_file.read_text()}"


def kill_mid_stream(proc: subprocess.Popen, url: str, headers: dict, **request) -> str:
    """Stream a chat call to the gateway ``proc`` at ``url`` (``request``: ``json=`` or
    ``content=``), kill the process with SIGKILL after six lines of the answer, and return
    the call's request id."""
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", headers=headers, timeout=30, **request
    ) as response:
        request_id = response.headers["x-request-id"]
        lines = response.iter_lines()
        received = [next(lines) for _ in range(6)]
        assert any("answer from" in line for line in received)
        proc.send_signal(signal.SIGKILL)  # mid-stream
        proc.wait(30)
    return request_id
