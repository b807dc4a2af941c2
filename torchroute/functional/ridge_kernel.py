"""Fused CPU kernels of LinUCB: all arms' scores in one call, the played arm's update in one.

The eager path (:func:`~torchroute.functional.ridge.ridge_width`,
:func:`~torchroute.functional.ridge.sherman_morrison_`) runs some 20 operators a round, each
a dispatch and a pass over its operands. These kernels (C++, ``ridge_kernel.cpp``) do each
step in one call, split over trials on a small thread pool, and read only the block upper
triangle of the symmetric ``A_k^{-1}`` for the widths, about half its bytes:

- :func:`linucb_scores`: ``x^T theta_k + alpha sqrt(max(x^T A_k^{-1} x, 0))``, the quadratic
  form summed as ``sum_j x_j (D_j + 2 U_j)`` from the ``32 x 32`` diagonal blocks (``D``) and
  the blocks above them (``U``);
- :func:`sherman_morrison_played_`: the rank-one update of the played arm,
  ``A^{-1} -= s (A^{-1} x)(A^{-1} x)^T`` formed as ``s (ax_i ax_j)``, which keeps a symmetric
  ``A^{-1}`` exactly symmetric (the eager ``(s ax_i) ax_j`` does not).

Two optional shortcuts, kept current by the update:

- ``prior [R, K]`` (:func:`prior_scales`): ``c >= 0`` while an arm is still at its prior
  ``A^{-1} = c I, theta = 0``; its width is then ``sqrt(c |x|^2)`` without reading ``A^{-1}``
  (exact: the same number up to rounding);
- ``half [R, K, d, d]`` (:func:`half_copy`, float32 only): float16 copies of
  ``lambda_r A^{-1}`` (entries in ``[-1, 1]`` since ``0 < A^{-1} <= I / lambda``) read for
  the widths instead of ``A^{-1}``, half the bytes again; ``A^{-1}`` itself is still
  updated in float32. Each entry carries a relative error up to ``2^-11``, so
  ``|quad_half - quad| <= 2^-11 |x|^T |A^{-1}| |x|`` (tested).

The source is compiled with ``g++ -O3 -march=native`` at first use (about a second) into
``$XDG_CACHE_HOME/torchroute`` (default ``~/.cache/torchroute``), named by a hash of the
source, the flags, the compiler's version and the host's target options, and loaded with
:mod:`ctypes`; later processes reuse the file. ``$CXX`` names another compiler. CPU tensors,
float32 or float64. The summation order differs from the eager path: results agree to
rounding (tested against a float64 numpy Sherman–Morrison loop).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import torch
from torch import Tensor

_SOURCE = Path(__file__).with_name("ridge_kernel.cpp")
_FLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-pthread", "-shared", "-fPIC", "-std=c++20")
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
#: Elements of work below which a call stays on the calling thread (torch's ``GRAIN_SIZE``).
GRAIN = 32768

_P, _I, _C, _D = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_double
_SIGNATURES = {
    "linucb_scores": ([_P, _P, _P, _D, _P, _P, _P, _P, _P, _I, _I, _I, _I, _C], None),
    "sherman_morrison_played": ([_P, _P, _P, _P, _P, _P, _P, _P, _P, _I, _I, _I, _C], _I),
}


def _run(args: list[str]) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])} ... failed: {done.stderr.strip()[-500:]}")
    return done.stdout


@cache
def kernel_library() -> ctypes.CDLL:
    """The compiled kernels: built on first use, then cached on disk and in the process."""
    cxx = os.environ.get("CXX", "g++")
    try:
        identity = _run([cxx, "--version"]) + _run([cxx, "-march=native", "-Q", "--help=target"])
    except (OSError, RuntimeError) as err:
        raise RuntimeError(f"the fused LinUCB kernel needs a C++ compiler ({cxx}): {err}") from err
    source = _SOURCE.read_bytes()
    key = hashlib.sha256(source + repr(_FLAGS).encode() + identity.encode()).hexdigest()[:16]
    cache_dir = Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "torchroute"
    target = cache_dir / f"ridge_kernel_{key}.so"
    if not target.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache_dir)
        os.close(fd)
        try:
            _run([cxx, *_FLAGS, str(_SOURCE), "-o", tmp])
            os.replace(tmp, target)  # atomic: concurrent builds leave one whole file
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    lib = ctypes.CDLL(str(target))
    for name, (args, result) in _SIGNATURES.items():
        for suffix in _SUFFIX.values():
            fn = getattr(lib, f"{name}_{suffix}")
            fn.argtypes, fn.restype = args, result
    return lib


def _threads(work: int, rows: int) -> int:
    """Threads for ``work`` elements over ``rows`` trials: 1 below :data:`GRAIN`."""
    return max(1, min(torch.get_num_threads(), rows, work // GRAIN))


def _check(name: str, t: Tensor | None, dtype: torch.dtype, shape: tuple[int, ...]) -> int | None:
    """``t.data_ptr()`` (``None`` for ``None``) after checking dtype, device, layout, shape."""
    if t is None:
        return None
    if t.dtype != dtype or t.device.type != "cpu" or not t.is_contiguous():
        raise ValueError(
            f"fused ridge kernel: {name} must be a contiguous CPU {dtype} tensor, "
            f"got {t.dtype} on {t.device} (contiguous={t.is_contiguous()})"
        )
    if t.shape != shape:
        raise ValueError(f"fused ridge kernel: {name} must be {shape}, got {tuple(t.shape)}")
    return t.data_ptr()


def _shortcuts(
    a_inv: Tensor, prior: Tensor | None, half: Tensor | None, half_scale: Tensor | None
) -> tuple[int | None, int | None, int | None]:
    r, k, d, _ = a_inv.shape
    if half is not None and (a_inv.dtype != torch.float32 or half_scale is None):
        raise ValueError("fused ridge kernel: half copies need float32 a_inv and a half_scale")
    return (
        _check("prior", prior, a_inv.dtype, (r, k)),
        _check("half", half, torch.float16, (r, k, d, d)),
        _check("half_scale", half_scale if half is not None else None, a_inv.dtype, (r,)),
    )


def prior_scales(a_inv: Tensor, theta: Tensor) -> Tensor:
    """``[R, K]``: ``c`` where ``A_k^{-1} = c I`` and ``theta_k = 0`` exactly, else ``-1``.

    Args:
        a_inv: ``[R, K, d, d]``.
        theta: ``[R, K, d]``.
    """
    d = a_inv.shape[-1]
    c = a_inv[..., 0, 0]
    diagonal = a_inv.diagonal(dim1=-2, dim2=-1)  # [R, K, d]
    at_prior = (
        (diagonal == c[..., None]).all(-1)
        & (torch.count_nonzero(a_inv, dim=(-2, -1)) == d)
        & (c > 0)
        & (theta == 0).all(-1)
    )
    return torch.where(at_prior, c, torch.full_like(c, -1.0)).contiguous()


def half_copy(a_inv: Tensor, scale: Tensor) -> Tensor:
    """Float16 ``scale_r A^{-1}``: ``[R, K, d, d]``, ``[R]`` -> ``[R, K, d, d]`` float16."""
    return (a_inv * scale[:, None, None, None]).to(torch.float16).contiguous()


def linucb_scores(
    a_inv: Tensor,
    theta: Tensor,
    x: Tensor,
    alpha: float | Tensor,
    prior: Tensor | None = None,
    half: Tensor | None = None,
    half_scale: Tensor | None = None,
) -> Tensor:
    """LinUCB scores ``x^T theta_k + alpha sqrt(x^T A_k^{-1} x)`` in one call.

    Args:
        a_inv: ``[R, K, d, d]`` symmetric inverse Gram matrices (float32 or float64, CPU,
            contiguous); only the block upper triangle is read.
        theta: ``[R, K, d]``.
        x: ``[R, B, d]`` contexts.
        alpha: a number or ``[R]`` per-trial widths.
        prior: optional ``[R, K]`` from :func:`prior_scales`.
        half, half_scale: optional ``[R, K, d, d]`` float16 from :func:`half_copy` and its
            ``[R]`` scale; the widths then read ``half`` instead of ``a_inv``.

    Returns:
        ``[R, B, K]`` scores, in ``a_inv``'s dtype.
    """
    r, k, d, _ = a_inv.shape
    b = x.shape[1]
    dtype = a_inv.dtype
    pointers = [
        _check("a_inv", a_inv, dtype, (r, k, d, d)),
        _check("theta", theta, dtype, (r, k, d)),
        _check("x", x, dtype, (r, b, d)),
    ]
    alpha_r = alpha.to(dtype).contiguous() if isinstance(alpha, Tensor) else None
    alpha_value = 0.0 if alpha_r is not None else float(alpha)
    pointers += [alpha_value, _check("alpha", alpha_r, dtype, (r,))]
    out = torch.empty(r, b, k, dtype=dtype)
    pointers += [*_shortcuts(a_inv, prior, half, half_scale), out.data_ptr()]
    fn = getattr(kernel_library(), f"linucb_scores_{_SUFFIX[dtype]}")
    fn(*pointers, r, k, b, d, _threads(r * k * b * d * d // 2, r))
    return out


def sherman_morrison_played_(
    a_inv: Tensor,
    theta: Tensor,
    x: Tensor,
    arm: Tensor,
    reward: Tensor,
    observed: Tensor,
    prior: Tensor | None = None,
    half: Tensor | None = None,
    half_scale: Tensor | None = None,
) -> None:
    """In place, one bandit observation per trial: Sherman–Morrison on the played arm.

    For ``k = arm_r`` with ``observed[r, k]``: ``A_k <- A_k + x x^T``, ``b_k <- b_k + y x``
    with ``y = reward[r, k]``; with ``ax = A_k^{-1} x`` and ``s = 1 / (1 + x^T ax)``,
    ``theta_k += s (y - x^T theta_k) ax`` and ``A_k^{-1} -= s ax ax^T``. A trial whose
    played arm is not observed is left unchanged (its reward is not read). ``prior`` and
    ``half`` (see :func:`linucb_scores`) are kept current.

    Args:
        a_inv: ``[R, K, d, d]`` symmetric (float32 or float64, CPU, contiguous).
        theta: ``[R, K, d]``.
        x: ``[R, d]`` features.
        arm: ``[R]`` int64, the arm each trial played.
        reward: ``[R, K]`` rewards (only the played, observed cell is read).
        observed: ``[R, K]`` bool.
        prior, half, half_scale: optional shortcuts, updated in place.
    """
    r, k, d, _ = a_inv.shape
    dtype = a_inv.dtype
    pointers = [
        _check("a_inv", a_inv, dtype, (r, k, d, d)),
        _check("theta", theta, dtype, (r, k, d)),
        _check("x", x, dtype, (r, d)),
        _check("arm", arm, torch.long, (r,)),
        _check("reward", reward, dtype, (r, k)),
        _check("observed", observed, torch.bool, (r, k)),
        *_shortcuts(a_inv, prior, half, half_scale),
    ]
    fn = getattr(kernel_library(), f"sherman_morrison_played_{_SUFFIX[dtype]}")
    bad = fn(*pointers, r, k, d, _threads(3 * r * d * d, r))
    if bad:
        raise ValueError(f"fused ridge kernel: {bad} played arms out of range [0, {k})")
