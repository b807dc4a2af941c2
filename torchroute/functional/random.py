"""Per-trial random streams (a counter-based generator) and the one entry point of every draw.

:class:`TrialRNG` gives each of ``R`` trials its own stream: a draw call takes the next
counter value ``c`` and element ``j`` of trial ``r`` reads the 64-bit word
``mix(mix(key_r ^ mix(c + 1)) + (j + 1) * G)`` (``mix``: the SplitMix64 finaliser, ``G``:
its increment; int64 arithmetic that wraps, logical shifts by masking). A trial's numbers
therefore depend on its key and the number of earlier draw calls only, never on the other
trials, their number or its position, and the integer words are the same on every device.

Every random draw of the learners and envs goes through :func:`uniform`, :func:`normal`,
:func:`gamma` or :func:`integers` (and :func:`torchroute.functional.sampling.sample_categorical`
built on :func:`uniform`): with a ``torch.Generator`` (or ``None``: torch's global one) they
are the plain torch samplers, with a :class:`TrialRNG` the per-trial streams (the shape's
leading dimension is then ``R``).
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from typing import TYPE_CHECKING, Any, Union

import torch
from torch import Tensor

from torchroute.functional.gamma_sampler import sample_gamma

if TYPE_CHECKING:
    import pandas as pd

_MASK64 = (1 << 64) - 1


def _signed(x: int) -> int:
    """A 64-bit pattern as the int64 value with the same bits."""
    x &= _MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


_GOLDEN = _signed(0x9E3779B97F4A7C15)
_M1 = _signed(0xBF58476D1CE4E5B9)
_M2 = _signed(0x94D049BB133111EB)


def _low_bits(s: int) -> int:
    """The mask that turns an arithmetic right shift by ``s`` bits into a logical one."""
    return (1 << (64 - s)) - 1


def _shr(x: Tensor, s: int) -> Tensor:
    """Logical right shift of int64 ``x`` by ``s`` bits (torch's ``>>`` is arithmetic)."""
    return (x >> s) & _low_bits(s)


def mix64(z: Tensor) -> Tensor:
    """The SplitMix64 finaliser on int64 words (multiplications wrap), elementwise.

    Written in place on two buffers (a new result and one scratch): the words are hashed
    in bulk, and this is most of the cost of a draw."""
    out = (z >> 30).bitwise_and_(_low_bits(30)).bitwise_xor_(z).mul_(_M1)
    scratch = (out >> 27).bitwise_and_(_low_bits(27))
    out.bitwise_xor_(scratch).mul_(_M2)
    scratch = torch.bitwise_right_shift(out, 31, out=scratch).bitwise_and_(_low_bits(31))
    return out.bitwise_xor_(scratch)


def _mix64_int(z: int) -> int:
    """:func:`mix64` of one Python integer (for the counter)."""
    z &= _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return _signed(z ^ (z >> 31))


def _label_text(value: Any) -> str:
    """A label as text that does not depend on its numeric type (``3``, ``3.0`` alike)."""
    if isinstance(value, (bool, str)) or not isinstance(value, numbers.Real):
        return f"{type(value).__name__}:{value}"
    number = float(value)
    if number.is_integer():
        return str(int(value))
    return repr(number)


def trial_keys(labels: pd.DataFrame, seed: int, stream: str = "run") -> Tensor:
    """The ``[R]`` int64 keys of ``labels`` (one row per trial, e.g. ``rho, seed``).

    A key is the first 8 bytes of the SHA-256 of the row's ``column=value`` pairs, the run's
    ``seed`` and the ``stream`` name: trials with identical labels get identical keys (and
    streams), and a key never depends on the trial's position or on the other trials.
    ``stream`` separates independent uses (``"run"``: the loop's draws, ``"init"``: initial
    weights).
    """
    columns = sorted(str(c) for c in labels.columns)
    keys = []
    for row in labels.to_dict("records"):
        pairs = [[c, _label_text(row[c])] for c in columns]
        text = json.dumps([int(seed), stream, pairs], separators=(",", ":"))
        digest = hashlib.sha256(text.encode()).digest()[:8]
        keys.append(int.from_bytes(digest, "little", signed=True))
    return torch.tensor(keys, dtype=torch.long)


class TrialRNG:
    """Counter-based random streams for ``R`` trials (see the module docstring).

    Every draw consumes one counter value whatever its size, so trial ``r``'s numbers are
    those of a run of trial ``r`` alone. Draws return ``[R, ...]`` tensors on ``device``.

    Args:
        keys: ``[R]`` int64 trial keys (:func:`trial_keys`).
        device: where the draws are made (default: the keys' device).
        counter: the next counter value (``0`` for a fresh stream).
    """

    def __init__(
        self, keys: Tensor, device: torch.device | str | None = None, counter: int = 0
    ) -> None:
        keys = torch.as_tensor(keys)
        if keys.ndim != 1 or keys.dtype != torch.long or keys.numel() == 0:
            raise ValueError(
                f"TrialRNG: keys must be a non-empty [R] int64 tensor, got {keys.dtype} "
                f"{tuple(keys.shape)}"
            )
        self.keys = keys.to(keys.device if device is None else device)
        self.counter = int(counter)
        self._steps: dict[int, Tensor] = {}  # (j + 1) * G for each draw size seen

    @property
    def num_trials(self) -> int:
        """``R``, the number of trial streams."""
        return self.keys.numel()

    @property
    def device(self) -> torch.device:
        """The device of the trial keys (and of every draw)."""
        return self.keys.device

    def select(self, index: Tensor | list[int]) -> TrialRNG:
        """The streams of the trials ``index`` (same counter: they continue identically)."""
        index = torch.as_tensor(index, dtype=torch.long, device=self.device)
        return TrialRNG(self.keys[index], counter=self.counter)

    def state_dict(self) -> dict[str, Any]:
        """``{"keys": [R] int64 (CPU), "counter": int}`` for checkpoints."""
        return {"keys": self.keys.cpu().clone(), "counter": self.counter}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`; the keys must be this run's."""
        keys = torch.as_tensor(state["keys"])
        if keys.shape != self.keys.shape or not torch.equal(keys, self.keys.cpu()):
            raise ValueError("TrialRNG: the saved trial keys differ from this run's trials")
        self.counter = int(state["counter"])

    # ----------------------------------------------------------------- raw words
    def _shape(self, shape: tuple[int, ...] | list[int] | torch.Size) -> tuple[int, ...]:
        shape = tuple(int(s) for s in shape)
        if not shape or shape[0] != self.num_trials:
            raise ValueError(
                f"TrialRNG holds R={self.num_trials} trials; a draw's shape must start with "
                f"R, got {shape}"
            )
        return shape

    def _base(self) -> Tensor:
        """``[R]`` stream seeds of the next draw call, consuming one counter value."""
        base = mix64(self.keys ^ _mix64_int(self.counter + 1))
        self.counter += 1
        return base

    def words(self, shape: tuple[int, ...]) -> Tensor:
        """Uniform 64-bit words ``[R, ...]`` (int64), consuming one counter value."""
        shape = self._shape(shape)
        count = math.prod(shape[1:])
        base = self._base()
        steps = self._steps.get(count)
        if steps is None:
            steps = torch.arange(1, count + 1, device=self.device, dtype=torch.long) * _GOLDEN
            self._steps[count] = steps
        return mix64(base[:, None] + steps).reshape(shape)

    # ----------------------------------------------------------------- distributions
    def uniform(self, shape: tuple[int, ...], dtype: torch.dtype | None = None) -> Tensor:
        """``U[0, 1)`` on the dtype's grid (53 bits for float64, 24 for float32)."""
        dtype = dtype or torch.get_default_dtype()
        return _unit(self.words(shape), dtype)

    def normal(self, shape: tuple[int, ...], dtype: torch.dtype | None = None) -> Tensor:
        """``N(0, 1)`` by Box–Muller (computed in float64, then cast)."""
        shape = self._shape(shape)
        w = self.words((shape[0], 2, *shape[1:]))
        return _box_muller(w[:, 0], w[:, 1]).to(dtype or torch.get_default_dtype())

    def gamma(self, alpha: Tensor) -> Tensor:
        """``Gamma(alpha, 1)`` for ``alpha [R, ...] > 0``; dtype of ``alpha``.

        Marsaglia–Tsang with a fixed number of vectorised proposals
        (:mod:`torchroute.functional.gamma_sampler`; no value with probability below
        ``3e-16`` per draw, which then is ``alpha - 1/3``, close to the mean); shapes below 1
        draw ``Gamma(alpha + 1) U^(1 / alpha)``.
        """
        self._shape(alpha.shape)
        base = self._base()

        def uniforms(positions: Tensor, rows: Tensor | None = None) -> Tensor:
            seeds = base[:, None] if rows is None else base[rows, None]
            return _open_unit(mix64(seeds + (positions + 1) * _GOLDEN))

        return sample_gamma(alpha, uniforms)

    def integers(self, high: int, shape: tuple[int, ...]) -> Tensor:
        """Integers uniform on ``0..high-1`` (int64; modulo bias below ``high / 2^63``)."""
        if high < 1:
            raise ValueError(f"TrialRNG.integers: high must be >= 1, got {high}")
        return _shr(self.words(shape), 1) % int(high)


def _unit(words: Tensor, dtype: torch.dtype) -> Tensor:
    """The top mantissa bits of ``words`` as floats in ``[0, 1)``, exact in ``dtype``."""
    if not dtype.is_floating_point:
        raise ValueError(f"uniform draws need a floating dtype, got {dtype}")
    bits = round(-math.log2(torch.finfo(dtype).eps)) + 1  # 53 for float64, 24 for float32
    return _shr(words, 64 - bits).to(dtype) * (2.0**-bits)


def _open_unit(words: Tensor) -> Tensor:
    """float64 uniforms in ``(0, 1]`` (safe for ``log``); ``words`` is overwritten."""
    words.bitwise_right_shift_(11).bitwise_and_(_low_bits(11)).add_(1)
    return words.to(torch.float64).mul_(2.0**-53)


def _box_muller(w1: Tensor, w2: Tensor) -> Tensor:
    """Normals from two words each (the cosine half of Box–Muller)."""
    radius = torch.sqrt(-2.0 * torch.log(_open_unit(w1)))
    return radius * torch.cos((2.0 * math.pi) * _unit(w2, torch.float64))


#: what every draw site accepts: a torch generator (``None``: torch's global one) or streams
Source = Union[torch.Generator, TrialRNG, None]  # noqa: UP007 (a runtime alias)


def uniform(
    source: Source,
    shape: tuple[int, ...] | torch.Size,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """``U[0, 1)`` of ``shape`` (``[R, ...]`` with a :class:`TrialRNG`)."""
    if isinstance(source, TrialRNG):
        return _on(source.uniform(tuple(shape), dtype), device)
    return torch.rand(shape, generator=source, device=device, dtype=dtype)


def normal(
    source: Source,
    shape: tuple[int, ...] | torch.Size,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """``N(0, 1)`` of ``shape`` (``[R, ...]`` with a :class:`TrialRNG`)."""
    if isinstance(source, TrialRNG):
        return _on(source.normal(tuple(shape), dtype), device)
    return torch.randn(shape, generator=source, device=device, dtype=dtype)


def gamma(source: Source, alpha: Tensor) -> Tensor:
    """``Gamma(alpha, 1)`` of ``alpha``'s shape and dtype (``[R, ...]`` with a TrialRNG)."""
    if isinstance(source, TrialRNG):
        return source.gamma(alpha)
    return torch._standard_gamma(alpha, generator=source)


def integers(
    source: Source,
    high: int,
    shape: tuple[int, ...] | torch.Size,
    device: torch.device | str | None = None,
) -> Tensor:
    """Integers uniform on ``0..high-1`` of ``shape`` (int64)."""
    if isinstance(source, TrialRNG):
        return _on(source.integers(high, tuple(shape)), device)
    return torch.randint(high, tuple(shape), generator=source, device=device)


def _on(x: Tensor, device: torch.device | str | None) -> Tensor:
    return x if device is None else x.to(device)


__all__ = [
    "Source",
    "TrialRNG",
    "gamma",
    "integers",
    "mix64",
    "normal",
    "trial_keys",
    "uniform",
]
