"""CPU time of one call through the gateway's ASGI app, without an HTTP server in front.

Workload: the stub backend (``tests/gateway/stub_backend.py``) in its own process, and in
this one the gateway of ``benchmarks/gateway.py`` (a fresh LinUCB router, ``K = 3`` models,
``d = 3`` features, float64, state and decision log under a temporary folder, a
three-number text summary as the encoder) called directly as an ASGI app, one call at a
time: the request, routing, the decision log's rows, the backend call over loopback and the
answer, but no uvicorn. Prints the CPU time of this process per call, the best of 5 blocks
of ``--calls`` calls (the stub's time is not counted), and with ``--profile`` the top of a
cProfile of one more block (CPU-time clock).

The figure the 8-client benchmark cannot give on a shared host: a process's CPU time per
call is steady where latencies move with the load.

    .venv/bin/python benchmarks/gateway_cpu.py [--stream] [--calls 1000] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from gateway import STUB, _free_port, _wait, gateway_app, write_backends  # the 8-client one


def _caller(app, stream: bool):
    body = json.dumps(
        {
            "model": "router",
            "messages": [{"role": "user", "content": "what is the capital of France"}],
            "stream": stream,
        }
    ).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }

    async def call() -> None:
        sent: list[dict] = []
        done, first = asyncio.Event(), True

        async def receive() -> dict:
            nonlocal first
            if first:
                first = False
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()  # the client stays until the answer is complete
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                done.set()

        await app(dict(scope), receive, send)
        assert sent[0]["status"] == 200, sent

    return call


async def _measure(call, calls: int, profile: bool) -> None:
    for _ in range(min(300, calls)):  # warm up
        await call()
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for _ in range(calls):
            await call()
        best = min(best, time.process_time() - start)
    print(f"CPU time per call: {best / calls * 1e3:.3f} ms (best of 5 x {calls})")
    if profile:
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        for _ in range(calls):
            await call()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", action="store_true", help="streamed answers")
    parser.add_argument("--calls", type=int, default=1000, help="calls per block")
    parser.add_argument("--profile", action="store_true", help="print a cProfile too")
    args = parser.parse_args()
    torch.set_num_threads(1)
    port = _free_port()
    stub = f"http://127.0.0.1:{port}"
    command = [sys.executable, str(STUB), "--port", str(port)]
    proc = subprocess.Popen(command, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        _wait(f"{stub}/_control", proc)
        with tempfile.TemporaryDirectory() as folder:
            backends = Path(folder) / "backends.yaml"
            write_backends(backends, stub)
            app = gateway_app(str(Path(folder) / "router.pt"), str(backends))
            call = _caller(app, args.stream)
            asyncio.run(_measure(call, args.calls, args.profile))
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
