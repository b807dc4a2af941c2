"""Stable hashes of a served learner: its state's fingerprint, its plain settings, and the
seeds of a router's draws (the same in every process, so a replay draws as the live router
did)."""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from torch import Tensor

from torchroute.learners.base import Learner


def mix_seed(*parts: object) -> int:
    """A 63-bit seed from ``parts`` (stable across processes)."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def state_fingerprint(learner: Learner) -> str:
    """sha256 of a learner's state (names, dtypes, shapes and bytes of every tensor)."""
    h = hashlib.sha256()

    def feed(key: str, value: Any) -> None:
        if isinstance(value, Tensor):
            h.update(f"{key}:{value.dtype}:{tuple(value.shape)}".encode())
            source = value.detach().cpu().reshape(-1)
            flat = torch.empty(source.shape, dtype=source.dtype).copy_(source)  # unit stride
            h.update(flat.view(torch.uint8).numpy().tobytes())
        elif isinstance(value, dict):
            for sub in sorted(value, key=str):
                feed(f"{key}.{sub}", value[sub])
        elif isinstance(value, (list, tuple)):
            for i, sub in enumerate(value):
                feed(f"{key}.{i}", sub)
        else:
            h.update(f"{key}={value!r}".encode())

    for key, value in sorted(learner.state_dict().items()):
        feed(key, value)
    return h.hexdigest()


def learner_settings(learner: Learner) -> dict[str, Any]:
    """The learner's plain hyper-parameters (numbers, strings, booleans)."""
    return {
        key: value
        for key, value in sorted(vars(learner).items())
        if not key.startswith("_") and isinstance(value, (bool, int, float, str))
    }


__all__ = ["learner_settings", "mix_seed", "state_fingerprint"]
