"""Fit each static router once: a memo of fitted weights, and a switch that skips fitting.

A static anchor router (:mod:`torchroute.learners.anchors`) fits its score model on the
train split; the fit does not depend on the trials (their ``rho`` only chooses among the
fitted candidates), so every router of the same config on the same train split fits the
same weights. :func:`fitted` keeps them, keyed by what the fit reads: the router's class,
its hyper-parameters, the fit split's contents (:func:`fingerprint`) and torch's intra-op
thread count (a fit with other threads may differ in the last bits). A run's MLP router, the
residual learners whose ``base`` is that same config, and the pieces of a split run then
fit it once per process, and each gets the weights that fitting it again would give, bit
for bit. The memo is per process and holds the last :data:`MAX_FITS` fits.

:func:`fits_skipped` is the option check of a parallel run (``jobs > 1``): the parent
builds every learner to raise a bad option before anything is written, but a worker builds
it again to run it; within the block a fit takes no step (the weights keep their initial
values, nothing is memoised), so the check costs no fitting.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import Tensor

#: how many fits :func:`fitted` keeps (the least recently used goes first)
MAX_FITS = 16

_memo: OrderedDict[tuple, dict[str, Tensor]] = OrderedDict()
_skipping: ContextVar[bool] = ContextVar("torchroute_fits_skipped", default=False)


def fingerprint(*tensors: Tensor) -> str:
    """A digest of the shapes, dtypes and values of ``tensors`` (any shapes): equal for
    equal contents, whatever the objects."""
    digest = hashlib.sha1()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        digest.update(f"{tuple(t.shape)}{t.dtype};".encode())
        digest.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def skipping() -> bool:
    """Whether fits are skipped here (inside :func:`fits_skipped`)."""
    return _skipping.get()


@contextmanager
def fits_skipped() -> Iterator[None]:
    """Within the block a static router's fit takes no step (for an option check)."""
    token = _skipping.set(True)
    try:
        yield
    finally:
        _skipping.reset(token)


def fitted(key: Hashable, fit: Callable[[], dict[str, Tensor]]) -> dict[str, Tensor]:
    """The weights ``fit()`` returns for ``key`` (``{name: tensor}``, detached), fitted
    once per process: a later call with an equal key gets clones of the kept ones.

    ``key`` must name everything the fit reads (see the module); the thread count is added
    here. Within :func:`fits_skipped`, ``fit()`` is called (it then takes no step) and
    nothing is kept.
    """
    if skipping():
        return {name: t.detach() for name, t in fit().items()}
    full = (key, torch.get_num_threads())
    if full not in _memo:
        _memo[full] = {name: t.detach() for name, t in fit().items()}
        while len(_memo) > MAX_FITS:
            _memo.popitem(last=False)
    _memo.move_to_end(full)
    return {name: t.clone() for name, t in _memo[full].items()}


def forget_fits() -> None:
    """Empty the memo (the next fit of every router runs again)."""
    _memo.clear()


__all__ = ["MAX_FITS", "fingerprint", "fits_skipped", "fitted", "forget_fits", "skipping"]
