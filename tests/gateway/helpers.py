"""The pieces of the gateway tests: a router with a tiny text encoder, a backends file, keys."""

from __future__ import annotations

import hashlib
from pathlib import Path

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
