"""A router behind uvicorn in its own process (the crash test kills it with SIGKILL).

``python -m tests.serve.crash_server STATE PORT_FILE`` serves a fresh LinUCB
(``K = 3``, ``d = 3``, float64) with its state at ``STATE`` on a free loopback port and
writes the port to ``PORT_FILE`` once it listens. SIGTERM stops it cleanly.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import torch
import uvicorn

from torchroute.learners import LinUCB
from torchroute.serve import Router
from torchroute.serve.app import create_app
from torchroute.serve.startup import bind

ARMS = ["small", "medium", "large"]
D, LAM, RHO = 3, 1.0, 5.0


def build(state: str | Path) -> Router:
    """The router of the test (the same configuration at every start)."""
    return Router.fresh(
        lambda p: LinUCB.from_problem(p, lam=LAM).double(),
        ARMS,
        rho=RHO,
        dim=D,
        dtype=torch.float64,
        state_path=state,
        checkpoint_every=50,
    )


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(0)


def main() -> None:
    state, port_file = sys.argv[1], Path(sys.argv[2])
    router = build(state)
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(router), log_level="warning"))
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(str(sock.getsockname()[1]))
    tmp.rename(port_file)
    signal.signal(signal.SIGTERM, _exit)  # uvicorn re-raises it after a graceful stop
    try:
        server.run(sockets=[sock])
    finally:
        router.close()


if __name__ == "__main__":
    main()
