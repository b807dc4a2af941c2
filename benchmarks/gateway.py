"""Latency the gateway adds over calling a backend directly, streamed and not, 8 clients.

Workload: the stub backend (``tests/gateway/stub_backend.py``) in one process, and a
gateway in another (a fresh LinUCB router, ``K = 3`` models, ``d = 3`` features, float64,
its state and decision log on disk under a temporary folder; no key; the text "encoder" a
three-number summary of the text, so the figure is the gateway's own cost: routing,
logging, the proxy, without a language-model encoder). ``--clients`` threads (default 8),
each with its own HTTP connection, send ``--requests`` chat completions each, first to the
stub directly, then through the gateway (``model: "router"``), non-streamed and then
streamed (the whole stream read). Every call's wall time is recorded on the client.

Printed per mode: the median and 99th percentile latency direct and through the gateway,
the added latency (gateway minus direct) at p50 and p99, in milliseconds, and (on Linux)
the CPU time (user + sys) the gateway process spent per call through it, and the stub per
call: on a machine shared with other work the CPU time is the steadier figure, the
latencies depend on the load. Differences are measured within one run; run it twice.
The first line says the load average and whether the servers (uvicorn, gateway and stub
alike) run on uvloop and httptools (the ``gateway`` extra) or on asyncio and h11.

    .venv/bin/python benchmarks/gateway.py --requests 200
    .venv/bin/python benchmarks/gateway.py --requests 200 --clients 1

Measured on 2 cores, `--requests 300`, added p50 in ms, plain / stream: on an idle host
with uvloop and httptools (four runs) median 4.3 (3.6-5.3) / 4.2 (3.3-5.4), with asyncio
and h11 (two runs) 4.7-5.0 / 6.3-6.8; on a loaded host 1-2 ms more. The breakdown is in
docs/guides/gateway.md ("What the gateway costs per call").
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import yaml

ARMS = ["small", "medium", "big"]
#: the stub backend (a test helper, run as a script)
STUB = Path(__file__).resolve().parents[1] / "tests" / "gateway" / "stub_backend.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, f"{url} did not start"
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"{url} did not start in 120 s"
            time.sleep(0.1)


def write_backends(path: Path, stub: str) -> None:
    """The backends file: every model of :data:`ARMS` served by the stub at ``stub``."""
    models = {
        a: {"base_url": f"{stub}/v1", "model": a, "input_per_mtok": 1.0, "output_per_mtok": 2.0}
        for a in ARMS
    }
    path.write_text(yaml.safe_dump({"models": models}))


def gateway_app(state: str, backends: str):
    """The benchmark's gateway as ``torchroute gateway`` serves it: a fresh LinUCB router
    (``K = 3``, ``d = 3``, float64, its state at ``state``) over the backends file, with a
    three-number text summary as the encoder."""
    import torch

    from torchroute.gateway.app import Gateway, create_gateway_app
    from torchroute.gateway.backends import load_backends
    from torchroute.learners import LinUCB
    from torchroute.serve import Router

    def encode(texts: list[str]) -> torch.Tensor:
        return torch.tensor([[1.0, len(t) / 100, t.count("a") / 10] for t in texts]).double()

    router = Router.fresh(
        lambda p: LinUCB.from_problem(p, lam=1.0).double(),
        ARMS,
        rho=0.0,
        dim=3,
        dtype=torch.float64,
        encode=encode,
        state_path=state,
    )
    return create_gateway_app(Gateway([router], load_backends(backends)))


def serve_gateway(state: str, backends: str, port: int) -> None:
    """The gateway process: :func:`gateway_app` on ``port``, on the listening socket and
    server settings `torchroute gateway` uses."""
    import uvicorn

    from torchroute.gateway.main import freeze_heap
    from torchroute.serve.startup import bind

    app = gateway_app(state, backends)
    sock = bind("127.0.0.1", port)
    freeze_heap()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    server.run(sockets=[sock])


def _cpu_ms(pid: int) -> float:
    """User + sys CPU time of a process in milliseconds (``nan`` where /proc is missing)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) * 1e3 / os.sysconf("SC_CLK_TCK")


def _loadavg() -> str:
    """The 1-minute load average (``?`` where /proc is missing)."""
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def _load(url: str, model: str, stream: bool, clients: int, requests: int) -> np.ndarray:
    """Latencies ``[clients * requests]`` in seconds."""
    times: list[float] = []
    lock = threading.Lock()
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "what is the capital of France"}],
        "stream": stream,
    }

    def client() -> None:
        mine = []
        with httpx.Client(timeout=60) as http:
            for _ in range(requests):
                start = time.perf_counter()
                if stream:
                    with http.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
                        for _ in r.iter_bytes():
                            pass
                        assert r.status_code == 200
                else:
                    r = http.post(f"{url}/v1/chat/completions", json=body)
                    assert r.status_code == 200, r.text
                mine.append(time.perf_counter() - start)
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return np.array(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=100, help="calls per client and phase")
    parser.add_argument("--serve-gateway", nargs=3, metavar=("STATE", "BACKENDS", "PORT"))
    args = parser.parse_args()
    if args.serve_gateway:
        state, backends, port = args.serve_gateway
        return serve_gateway(state, backends, int(port))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        stub_port, gw_port = _free_port(), _free_port()
        stub = f"http://127.0.0.1:{stub_port}"
        backends = Path(tmp) / "backends.yaml"
        write_backends(backends, stub)
        try:
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(STUB), "--port", str(stub_port)],
                    env=env,
                )
            )
            _wait(f"{stub}/_control", procs[-1])
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--serve-gateway",
                        str(Path(tmp) / "router.pt"),
                        str(backends),
                        str(gw_port),
                    ],
                    env=env,
                )
            )
            gateway = f"http://127.0.0.1:{gw_port}"
            _wait(f"{gateway}/health", procs[-1])
            _load(gateway, "router", False, args.clients, 5)  # warm up both
            _load(stub, "small", False, args.clients, 5)
            fast = [m for m in ("uvloop", "httptools") if importlib.util.find_spec(m)]
            print(
                f"{args.clients} clients x {args.requests} calls per phase (ms); load "
                f"{_loadavg()}; server: {' + '.join(fast) or 'asyncio + h11'}"
            )
            for stream in (False, True):
                calls = args.clients * args.requests
                stub_cpu = _cpu_ms(procs[0].pid)
                direct = _load(stub, "small", stream, args.clients, args.requests) * 1e3
                stub_cpu = (_cpu_ms(procs[0].pid) - stub_cpu) / calls
                gateway_cpu = _cpu_ms(procs[1].pid)
                routed = _load(gateway, "router", stream, args.clients, args.requests) * 1e3
                gateway_cpu = (_cpu_ms(procs[1].pid) - gateway_cpu) / calls
                d50, d99 = np.percentile(direct, [50, 99])
                g50, g99 = np.percentile(routed, [50, 99])
                name = "stream" if stream else "plain"
                print(
                    f"{name:6s} direct p50 {d50:7.2f} p99 {d99:7.2f} | gateway p50 {g50:7.2f} "
                    f"p99 {g99:7.2f} | added p50 {g50 - d50:7.2f} p99 {g99 - d99:7.2f} | "
                    f"CPU per call: gateway {gateway_cpu:5.2f}, stub {stub_cpu:5.2f} | "
                    f"load {_loadavg()}"
                )
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(30)


if __name__ == "__main__":
    main()
