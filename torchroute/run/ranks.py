"""``torch.distributed`` for trial shards: the process group, rank-0 decisions, gathering.

Under ``torchrun`` (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK`` and the rendezvous variables
set, on one node or several) :func:`torchroute.run.run` runs a contiguous
slice of the trials on each rank; rank 0 gathers the results and alone writes files. A
plain process is world size 1 and never touches ``torch.distributed``.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from torchroute.errors import OptionError

T = TypeVar("T")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise OptionError(
            f"environment variable {name} must be an integer, got {value!r}"
        ) from None


@dataclass(frozen=True)
class Distributed:
    """This process's place among the ranks of a run.

    Attributes:
        rank: global rank (``RANK``).
        world_size: number of processes (``WORLD_SIZE``).
        local_rank: rank on this node (``LOCAL_RANK``), the CUDA device index it uses.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> Distributed:
        """The ranks torchrun describes in the environment (world size 1 without it)."""
        world = _env_int("WORLD_SIZE", 1)
        rank = _env_int("RANK", 0)
        if world < 1 or not 0 <= rank < world:
            raise OptionError(
                f"RANK={rank} and WORLD_SIZE={world}: expected 0 <= RANK < WORLD_SIZE"
            )
        return cls(rank, world, _env_int("LOCAL_RANK", 0))

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes files and logs."""
        return self.rank == 0

    def device(self, device: torch.device) -> torch.device:
        """The rank's device: ``cuda`` becomes ``cuda:<LOCAL_RANK>`` with several ranks."""
        if self.world_size > 1 and device.type == "cuda" and device.index is None:
            return torch.device("cuda", self.local_rank)
        return device

    @contextmanager
    def group(self, device: torch.device) -> Iterator[None]:
        """The default process group (gloo on CPU, nccl on CUDA) while the block runs."""
        if self.world_size == 1 or dist.is_initialized():
            yield
            return
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo",
            rank=self.rank,
            world_size=self.world_size,
            device_id=device if device.type == "cuda" else None,
        )
        try:
            yield
        finally:
            dist.destroy_process_group()

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.world_size > 1:
            dist.barrier()

    def broadcast(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank (picklable objects)."""
        if self.world_size == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` in rank order on rank 0; ``None`` elsewhere."""
        if self.world_size == 1:
            return [obj]
        out = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def raise_any(self, error: Exception | None) -> None:
        """Raise on every rank when any rank failed: its own error, else the first rank's."""
        if self.world_size == 1:
            if error is not None:
                raise error
            return
        errors: list[Any] = [None] * self.world_size
        dist.all_gather_object(errors, None if error is None else _portable(error))
        if error is not None:
            raise error
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first

    def on_rank0(self, fn: Callable[[], T]) -> T:
        """``fn()`` run on rank 0 only; its result, or its exception, reaches every rank."""
        result: tuple[Any, BaseException | None] = (None, None)
        if self.is_main:
            try:
                result = (fn(), None)
            except Exception as exc:
                result = (None, _portable(exc))
        value, error = self.broadcast(result)
        if error is not None:
            raise error
        return value

    def rank0_first(self, fn: Callable[[], T]) -> T:
        """``fn()`` on rank 0, then on the other ranks (they reuse its caches); a failure on
        rank 0 is raised on every rank."""
        if self.world_size == 1:
            return fn()
        out: Any = None
        error: BaseException | None = None
        if self.is_main:
            try:
                out = fn()
            except Exception as exc:
                error = _portable(exc)
        error = self.broadcast(error)
        if error is not None:
            raise error
        return out if self.is_main else fn()


def _portable(exc: Exception) -> Exception:
    """``exc``, or a ``RuntimeError`` with its message when it cannot be pickled."""
    try:
        pickle.dumps(exc)
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


__all__ = ["Distributed"]
