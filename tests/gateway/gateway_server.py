"""A gateway behind uvicorn in its own process (the crash test kills it with SIGKILL).

``python -m tests.gateway.gateway_server STATE BACKENDS PORT_FILE`` serves the router of
:func:`tests.gateway.helpers.build_router` with its state at ``STATE`` over the backends
file ``BACKENDS`` (keys of :func:`tests.gateway.helpers.keys`) on a free loopback port,
and writes the port to ``PORT_FILE`` once it listens.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.gateway.helpers import build_router, keys, start_gateway


def main() -> None:
    state, backends, port_file = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    router = build_router(state)
    server = start_gateway(router, backends, keys=keys(), session_ttl=60)
    with server:
        tmp = port_file.with_suffix(".tmp")
        tmp.write_text(str(server.port))
        tmp.rename(port_file)
        server.thread.join()
    router.close()


if __name__ == "__main__":
    main()
