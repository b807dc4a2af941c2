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

The source is a standard torch C++ extension, in one library with the fused SquareCB-G
solver (:mod:`torchroute.functional.graph_kernel`, ``graph_kernel.cpp``): at first use it is
built with :func:`torch.utils.cpp_extension.load` (``-O3 -march=native``; ``$CXX`` names the
compiler, ``c++`` by default; ninja drives the build, about half a minute) into
``$TORCHROUTE_KERNEL_CACHE`` (default ``$XDG_CACHE_HOME/torchroute``, i.e.
``~/.cache/torchroute``) as ``ridge_kernel_<hash>.so``, the hash covering the source, the
flags, the torch version and the host's CPU features. Beside it, ``ridge_kernel_<hash>.so.sha256``
records its size and checksum once the build succeeded; a later process checks both before
loading the file (a truncated or damaged file is rebuilt, never loaded) and loads it without
running the compiler. Trials are split over ``at::parallel_for`` (torch's intra-op threads,
:func:`torch.set_num_threads`), only when the call has at least :data:`GRAIN` elements of work
per thread. When the kernel cannot be had (no compiler, a failed build, a read-only or full
cache folder), :func:`kernel_library` raises :class:`KernelUnavailableError` with one line
saying why. CPU tensors, float32 or float64. The summation order differs from the eager path:
results agree to rounding (tested against a float64 numpy Sherman–Morrison loop).

(Over 400 lines: the kernels' entry points with the build, cache and load of their C++
library, which they share; about a sixth of it is this description.)
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import tempfile
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from torchroute.errors import KernelUnavailableError as KernelUnavailableError

#: The extension's sources: the LinUCB steps and the SquareCB-G solver (``graph_kernel.py``).
_SOURCES = tuple(Path(__file__).with_name(n) for n in ("ridge_kernel.cpp", "graph_kernel.cpp"))
_FLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-std=c++20")
_NAMESPACE = "torchroute_ridge"  # the TORCH_LIBRARY namespace of ridge_kernel.cpp
#: Elements of work below which a call stays on the calling thread (torch's ``GRAIN_SIZE``).
GRAIN = 32768


def cache_dir() -> Path:
    """Built kernels: ``$TORCHROUTE_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/torchroute``."""
    env = os.environ.get("TORCHROUTE_KERNEL_CACHE")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "torchroute"


def _cpu_features() -> str:
    """The host's CPU flags (``-march=native`` builds for them), without running a compiler."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return platform.processor()


def library_path() -> Path:
    """``<cache>/ridge_kernel_<hash>.so`` for this source, flags, torch and CPU."""
    key = hashlib.sha256(
        b"".join(source.read_bytes() for source in _SOURCES)
        + repr(_FLAGS).encode()
        + f"{torch.__version__} {torch.version.git_version} {platform.machine()}".encode()
        + _cpu_features().encode()
    ).hexdigest()[:16]
    return cache_dir() / f"ridge_kernel_{key}.so"


def _digest(path: Path) -> str:
    """``"<size> <sha256>"`` of a file."""
    data = path.read_bytes()
    return f"{len(data)} {hashlib.sha256(data).hexdigest()}"


def _manifest(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def cached_library_ok(path: Path) -> bool:
    """Whether ``path`` exists and matches the size and checksum recorded after its build."""
    try:
        return _manifest(path).read_text().strip() == _digest(path)
    except OSError:
        return False


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _build(target: Path) -> None:
    """Compile the extension in a fresh temporary folder, load it, then publish it in the cache.

    The built library is copied next to ``target`` and renamed onto it (a reader never sees a
    partial file), then its manifest is written (a reader checks it before loading).
    """
    from torch.utils import cpp_extension

    target.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix="ridge_kernel_build_", dir=target.parent))
    try:
        name = target.stem  # ridge_kernel_<hash>
        cpp_extension.load(
            name=name,
            sources=[str(source) for source in _SOURCES],
            extra_cflags=list(_FLAGS),
            build_directory=str(build),
            is_python_module=False,
            verbose=False,
        )  # also loads the library into this process
        _write_atomic(target, (build / f"{name}.so").read_bytes())
        _write_atomic(_manifest(target), _digest(target).encode())
    finally:
        shutil.rmtree(build, ignore_errors=True)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text[-300:] if len(text) > 300 else text or type(err).__name__


_failure: KernelUnavailableError | None = None


@cache
def _library() -> Any:
    """:func:`kernel_library` without the memory of a failure."""
    target = library_path()
    try:
        if cached_library_ok(target):
            torch.ops.load_library(str(target))
        else:
            _build(target)
    except Exception as err:  # compiler, ninja, OSError, dlopen: one cause
        cxx = os.environ.get("CXX", "c++")
        raise KernelUnavailableError(
            f"the fused CPU kernels could not be built or loaded (compiler {cxx!r}, cache "
            f"{target.parent}): {_one_line(err)}"
        ) from err
    return getattr(torch.ops, _NAMESPACE)


def kernel_library() -> Any:
    """The kernels' operators (``torch.ops.torchroute_ridge``): loaded from the cache, else built.

    A cached library is loaded only when its size and checksum match its manifest, and then
    without running the compiler; a missing, truncated or damaged one is rebuilt.

    A failure is remembered: later calls in the process raise the same error at once.

    Raises:
        KernelUnavailableError: no compiler, a failed build, or a cache folder that cannot
            be written; one line naming the cause.
    """
    global _failure
    if _failure is not None:  # tried once in this process: no second compiler run
        raise KernelUnavailableError(str(_failure))
    try:
        return _library()
    except KernelUnavailableError as err:
        _failure = err
        raise


_warned = False


def kernel_available() -> bool:
    """Whether the fused kernel can be used; warns once (per process) when it cannot."""
    global _warned
    try:
        kernel_library()
    except KernelUnavailableError as err:
        if not _warned:
            warnings.warn(f"{err}; using the eager torch path", RuntimeWarning, stacklevel=2)
            _warned = True
        return False
    return True


def _threads(work: int, rows: int) -> int:
    """Threads for ``work`` elements over ``rows`` trials: 1 below :data:`GRAIN`."""
    return max(1, min(torch.get_num_threads(), rows, work // GRAIN))


def check_tensor(name: str, t: Tensor | None, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    """Raise unless ``t`` (when given) is a contiguous CPU ``dtype`` tensor of ``shape``."""
    if t is None:
        return
    if t.dtype != dtype or t.device.type != "cpu" or not t.is_contiguous():
        raise ValueError(
            f"fused ridge kernel: {name} must be a contiguous CPU {dtype} tensor, "
            f"got {t.dtype} on {t.device} (contiguous={t.is_contiguous()})"
        )
    if t.shape != shape:
        raise ValueError(f"fused ridge kernel: {name} must be {shape}, got {tuple(t.shape)}")


def _shortcuts(
    a_inv: Tensor, prior: Tensor | None, half: Tensor | None, half_scale: Tensor | None
) -> None:
    """Check the optional prior scales and float16 copies the kernel reads."""
    r, k, d, _ = a_inv.shape
    if half is not None and (a_inv.dtype != torch.float32 or half_scale is None):
        raise ValueError("fused ridge kernel: half copies need float32 a_inv and a half_scale")
    check_tensor("prior", prior, a_inv.dtype, (r, k))
    check_tensor("half", half, torch.float16, (r, k, d, d))
    check_tensor("half_scale", half_scale if half is not None else None, a_inv.dtype, (r,))


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
    check_tensor("a_inv", a_inv, dtype, (r, k, d, d))
    check_tensor("theta", theta, dtype, (r, k, d))
    check_tensor("x", x, dtype, (r, b, d))
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"fused ridge kernel: a_inv must be float32 or float64, got {dtype}")
    alpha_r = alpha.to(dtype).contiguous() if isinstance(alpha, Tensor) else None
    alpha_value = 0.0 if alpha_r is not None else float(alpha)
    check_tensor("alpha", alpha_r, dtype, (r,))
    out = torch.empty(r, b, k, dtype=dtype)
    _shortcuts(a_inv, prior, half, half_scale)
    kernel_library().linucb_scores(
        a_inv,
        theta,
        x,
        alpha_value,
        alpha_r,
        prior,
        half,
        half_scale if half is not None else None,
        out,
        _threads(r * k * b * d * d // 2, r),
    )
    return out


def linucb_act(
    a_inv: Tensor,
    theta: Tensor,
    x: Tensor,
    alpha: float | Tensor,
    noise: Tensor,
    prior: Tensor | None = None,
    half: Tensor | None = None,
    half_scale: Tensor | None = None,
    *,
    state_checked: bool = False,
) -> tuple[Tensor, Tensor]:
    """LinUCB's decision in one call: :func:`linucb_scores`, then the tie-broken argmax.

    The arm with the largest score per context; arms whose score equals the maximum are
    tied and the one with the largest ``noise`` wins, exactly as
    :func:`~torchroute.functional.sampling.argmax_random_ties` with the same draws.

    Args:
        a_inv, theta, x, alpha, prior, half, half_scale: as :func:`linucb_scores`.
        noise: ``[R, B, K]`` float32 or float64 uniforms in ``[0, 1)``.
        state_checked: the caller vouches for ``a_inv``, ``theta`` and the shortcuts
            (contiguous CPU tensors of one float dtype and matching shapes, as a fused
            :class:`~torchroute.learners.LinUCB` keeps them): their checks are skipped.

    Returns:
        ``action [R, B]`` int64 and the one-hot ``probs [R, B, K]`` in ``a_inv``'s dtype.
    """
    r, k, d, _ = a_inv.shape
    b = x.shape[1]
    dtype = a_inv.dtype
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"fused ridge kernel: a_inv must be float32 or float64, got {dtype}")
    if not state_checked:
        check_tensor("a_inv", a_inv, dtype, (r, k, d, d))
        check_tensor("theta", theta, dtype, (r, k, d))
        _shortcuts(a_inv, prior, half, half_scale)
    check_tensor("x", x, dtype, (r, b, d))
    if noise.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"fused ridge kernel: noise must be float32 or float64, got {noise.dtype}")
    check_tensor("noise", noise, noise.dtype, (r, b, k))
    alpha_r = alpha.to(dtype).contiguous() if isinstance(alpha, Tensor) else None
    check_tensor("alpha", alpha_r, dtype, (r,))
    action = torch.empty(r, b, dtype=torch.long)
    probs = torch.empty(r, b, k, dtype=dtype)
    kernel_library().linucb_act(
        a_inv,
        theta,
        x,
        0.0 if alpha_r is not None else float(alpha),
        alpha_r,
        prior,
        half,
        half_scale if half is not None else None,
        noise,
        action,
        probs,
        _threads(r * k * b * d * d // 2, r),
    )
    return action, probs


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
    *,
    state_checked: bool = False,
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
        state_checked: as :func:`linucb_act` (the checks of the state are skipped).
    """
    r, k, d, _ = a_inv.shape
    dtype = a_inv.dtype
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"fused ridge kernel: a_inv must be float32 or float64, got {dtype}")
    if not state_checked:
        check_tensor("a_inv", a_inv, dtype, (r, k, d, d))
        check_tensor("theta", theta, dtype, (r, k, d))
        _shortcuts(a_inv, prior, half, half_scale)
    check_tensor("x", x, dtype, (r, d))
    check_tensor("arm", arm, torch.long, (r,))
    check_tensor("reward", reward, dtype, (r, k))
    check_tensor("observed", observed, torch.bool, (r, k))
    bad = kernel_library().sherman_morrison_played(
        a_inv,
        theta,
        x,
        arm,
        reward,
        observed,
        prior,
        half,
        half_scale if half is not None else None,
        _threads(3 * r * d * d, r),
    )
    if bad:
        raise ValueError(f"fused ridge kernel: {bad} played arms out of range [0, {k})")
