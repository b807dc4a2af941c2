"""Throughput and latency of ``torchroute serve`` on loopback, with few and many pending requests.

Workload: a router (LinUCB, ``K = 11`` models, ``d = --dim`` features, float64, its state
and log on disk under a temporary folder) behind uvicorn in a separate process, on
``127.0.0.1``. Before the clients start, ``P`` requests are routed and left without
feedback (``--pending``, default ``0,25000``). Then ``--clients`` threads (default 8), each
with its own HTTP connection, send ``--pairs`` pairs of calls: ``POST /route`` with one
embedding, then ``POST /feedback`` for the request it got. Every call's wall time is
recorded on the client.

Printed per ``P``: requests per second (all calls of all clients over the wall time of the
load), and the median and 99th percentile latency of ``/route`` and of ``/feedback``.
The last lines, for scripts, are the ratios of the ``/route`` and ``/feedback`` medians at
the largest ``P`` over those at the smallest: near 1 when the cost of a call does not grow
with the number of pending requests.

The server listens on the socket ``torchroute serve`` opens (``bind(host, port)`` of
``torchroute.serve.startup``). Only that, the public ``Router.fresh(...)``,
``Router.route`` and ``create_app(router)`` are used, so the script also runs against an
older copy of the package (``PYTHONPATH=<copy>``), which is how a before/after comparison
is made::

    .venv/bin/python benchmarks/serve.py --pairs 20
    git archive <old commit> torchroute | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old .venv/bin/python benchmarks/serve.py --pairs 20
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

K = 11


def _server(state: str, port_file: str, pending: int, dim: int) -> None:
    import torch
    import uvicorn

    from torchroute.learners import LinUCB
    from torchroute.serve import Router
    from torchroute.serve.app import create_app
    from torchroute.serve.startup import bind

    router = Router.fresh(
        lambda p: LinUCB.from_problem(p).double(),
        [f"model-{k}" for k in range(K)],
        rho=1.0,
        dim=dim,
        dtype=torch.float64,
        state_path=state,
    )
    rng = np.random.default_rng(0)
    for start in range(0, pending, 1000):
        router.route(embeddings=rng.normal(size=(min(1000, pending - start), dim)))
    sock = bind("127.0.0.1", 0)  # the listening socket `torchroute serve` opens
    Path(port_file + ".tmp").write_text(str(sock.getsockname()[1]))
    os.replace(port_file + ".tmp", port_file)
    uvicorn.Server(uvicorn.Config(create_app(router), log_level="warning")).run(sockets=[sock])


def _load(url: str, clients: int, pairs: int, dim: int) -> dict[str, float]:
    import httpx

    route, feedback, lock = [], [], threading.Lock()

    def client(worker: int) -> None:
        rng = np.random.default_rng(worker + 1)
        mine_r, mine_f = [], []
        with httpx.Client(base_url=url, timeout=600) as http:
            for _ in range(pairs):
                x = rng.normal(size=(1, dim)).tolist()
                t0 = time.perf_counter()
                response = http.post("/route", json={"embeddings": x})
                t1 = time.perf_counter()
                rid = response.json()["decisions"][0]["request_id"]
                body = {"request_ids": [rid], "scores": [float(rng.uniform())], "costs": [0.0]}
                response = http.post("/feedback", json=body)
                t2 = time.perf_counter()
                assert response.status_code == 200, response.text
                mine_r.append(t1 - t0)
                mine_f.append(t2 - t1)
        with lock:
            route.extend(mine_r)
            feedback.extend(mine_f)

    threads = [threading.Thread(target=client, args=(w,)) for w in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    r, f = np.array(route) * 1e3, np.array(feedback) * 1e3
    return {
        "requests_per_s": (len(r) + len(f)) / wall,
        "route_p50_ms": float(np.percentile(r, 50)),
        "route_p99_ms": float(np.percentile(r, 99)),
        "feedback_p50_ms": float(np.percentile(f, 50)),
        "feedback_p99_ms": float(np.percentile(f, 99)),
    }


def _measure(pending: int, args: argparse.Namespace) -> dict[str, float]:
    import httpx

    with tempfile.TemporaryDirectory() as tmp:
        port_file = str(Path(tmp) / "port")
        cmd = [sys.executable, __file__, "--_server", str(Path(tmp) / "router.pt"), port_file]
        cmd += [str(pending), str(args.dim)]
        proc = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"})
        try:
            while not Path(port_file).exists():
                if proc.poll() is not None:
                    raise SystemExit("the server did not start")
                time.sleep(0.05)
            url = f"http://127.0.0.1:{Path(port_file).read_text()}"
            while True:
                try:
                    httpx.get(url + "/health", timeout=60)
                    break
                except httpx.TransportError:
                    time.sleep(0.05)
            return _load(url, args.clients, args.pairs, args.dim)
        finally:
            proc.terminate()
            proc.wait(60)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--_server":
        _, _, state, port_file, pending, dim = sys.argv
        return _server(state, port_file, int(pending), int(dim))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", default="0,25000", help="pending counts P, comma-separated")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--pairs", type=int, default=50, help="route + feedback pairs per client")
    parser.add_argument("--dim", type=int, default=32)
    args = parser.parse_args()
    import torchroute

    print(f"torchroute from {Path(torchroute.__file__).parent}")
    print(f"{args.clients} clients x {args.pairs} pairs, K={K}, d={args.dim}, loopback")
    print(
        f"{'pending':>8} {'req/s':>8} {'route p50':>10} {'p99':>8} {'feedback p50':>13} {'p99':>8}"
    )
    results = {}
    for pending in [int(p) for p in args.pending.split(",")]:
        m = _measure(pending, args)
        results[pending] = m
        print(
            f"{pending:>8} {m['requests_per_s']:>8.1f} {m['route_p50_ms']:>8.2f}ms "
            f"{m['route_p99_ms']:>6.1f}ms {m['feedback_p50_ms']:>11.2f}ms "
            f"{m['feedback_p99_ms']:>6.1f}ms",
            flush=True,
        )
    low, high = min(results), max(results)
    for kind in ("route", "feedback"):
        ratio = results[high][f"{kind}_p50_ms"] / results[low][f"{kind}_p50_ms"]
        print(f"{kind}_p50_ratio_{high}_vs_{low} {ratio:.2f}")


if __name__ == "__main__":
    main()
