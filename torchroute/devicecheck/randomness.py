"""Feed a device run the random stream of a CPU run: every random draw made on the target
device runs on the CPU with a CPU generator, and its result is copied to the device.

CPU and CUDA generators seeded alike give different streams (and CUDA's samplers differ
from the CPU's), so a CUDA run of :func:`torchroute.loop.simulate` cannot be compared
draw for draw with a CPU run. Inside :class:`CpuRandomness` (a ``TorchDispatchMode``, so
it sees every ATen op, also those called from inside composite functions such as
``dropout`` or ``nn.init``), an op tagged ``nondeterministic_seeded`` (every sampler of
ATen) whose tensors or ``device=`` are on the target device runs on CPU copies of its
inputs instead, with a CPU *twin* of its generator; its output is copied to the device,
and the device tensors it mutates (``uniform_`` and the like) receive the CPU result:

- the twin of a generator ``g`` is ``torch.Generator().manual_seed(g.initial_seed())``,
  i.e. the stream a CPU generator seeded like ``g`` gives. A generator made on the device
  and seeded there (the loop's run generator, the per-trial generators of an env's
  evaluation) therefore draws exactly what its CPU counterpart draws in a plain CPU run.
  At its first draw ``g`` is re-seeded to a token naming its twin, so that a later
  ``g.manual_seed(s)`` by the code under test (even with the same ``s``) is seen and
  starts a new twin;
- no generator (``None``) means the CPU default generator (``torch.manual_seed`` seeds it).

With ``device="cpu"`` the redirection runs on CPU generators too (a CPU dry run of the same
code path).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

#: seeds that mark a generator as "continue twin i" (``TOKENS + i``); a dispatched op
#: receives a new Python object for the same generator, so the seed is the only stable key
TOKENS = 0x5EED_C0DE_0000_0000


def _is_sampler(func: Any, cache: dict[Any, bool]) -> bool:
    if func not in cache:
        cache[func] = torch.Tag.nondeterministic_seeded in func.tags
    return cache[func]


class CpuRandomness(TorchDispatchMode):
    """Redirect the random draws made on ``device`` to CPU twins of their generators.

    Args:
        device: the target device (``"cuda"``, ``"cuda:0"``, or ``"cpu"`` for a dry run).

    Attributes:
        redirected: how many draws were redirected.
    """

    def __init__(self, device: torch.device | str) -> None:
        super().__init__()
        self.device_type = torch.device(device).type
        self.redirected = 0
        self._twins: dict[int, torch.Generator] = {}
        self._samplers: dict[Any, bool] = {}

    def twin(self, generator: torch.Generator) -> torch.Generator:
        """The CPU generator that replaces ``generator`` (see the module docstring)."""
        token = generator.initial_seed()
        if token not in self._twins:  # a seed set by the code under test: a new twin
            twin = torch.Generator().manual_seed(token)
            token = TOKENS + len(self._twins)
            self._twins[token] = twin
            generator.manual_seed(token)
        return self._twins[token]

    def _op_device(self, args: tuple, kwargs: dict) -> torch.device | None:
        """The target device when the op draws there, else ``None``."""
        device = kwargs.get("device")
        if device is None:
            leaves = tree_flatten((args, kwargs))[0]
            device = next((x.device for x in leaves if isinstance(x, torch.Tensor)), None)
        device = torch.device("cpu") if device is None else torch.device(device)
        return device if device.type == self.device_type else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not _is_sampler(func, self._samplers):
            return func(*args, **kwargs)
        device = self._op_device(args, kwargs)
        gens = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Generator)]
        if device is None or any(g.device.type != self.device_type for g in gens):
            return func(*args, **kwargs)
        self.redirected += 1
        originals: dict[int, torch.Tensor] = {}

        def to_cpu(x: Any) -> Any:
            if isinstance(x, torch.Generator):
                return self.twin(x)
            if isinstance(x, torch.Tensor):
                copy = x.cpu()
                originals[id(copy)] = x
                return copy
            return x

        cpu_args, cpu_kwargs = tree_map(to_cpu, args), tree_map(to_cpu, kwargs)
        if "device" in cpu_kwargs:
            cpu_kwargs["device"] = torch.device("cpu")
        out = func(*cpu_args, **cpu_kwargs)
        for i, arg in enumerate(func._schema.arguments):
            value = cpu_args[i] if i < len(cpu_args) else cpu_kwargs.get(arg.name)
            mutated = arg.alias_info is not None and arg.alias_info.is_write
            if mutated and isinstance(value, torch.Tensor) and originals[id(value)] is not value:
                originals[id(value)].copy_(value)  # an in-place sampler on a device tensor

        def back(x: Any) -> Any:
            if not isinstance(x, torch.Tensor):
                return x
            return originals[id(x)] if id(x) in originals else x.to(device)

        return tree_map(back, out)
