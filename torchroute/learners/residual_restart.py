"""The change test of the residual learners: a Gaussian GLR test per (trial, arm) on the
residuals each arm observed since its last restart (:mod:`torchroute.functional.glr`).

:class:`GLRRestart` keeps, per trial and arm, the last ``memory`` residuals
``score - base_k(x)`` the arm observed since its last restart (oldest first) and, each
round, tests them for one change in the mean: ``max_s G(s) >= log(3 n^{3/2} / delta)``
with ``sigma^2 = 1/4`` (:func:`~torchroute.functional.glr.gaussian_glr`). A cell that
reports a change has its memory emptied; the learner then puts that arm's correction back
to a prior (:meth:`torchroute.learners.residual._Residual.update`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.errors import OptionError
from torchroute.functional.glr import gaussian_glr, glr_threshold

#: the change options, chosen on validation (a list of values) as the correction's others
RESTART_KEYS = ("restart_delta", "restart_lam")
#: the sub-Gaussian variance scale of the residuals (that of a score in [0, 1])
SIGMA2 = 0.25


def check_restart(
    who: str, delta: float | None, lam: float, memory: int, gamma: float, window: int | None
) -> None:
    """Raise :class:`~torchroute.errors.OptionError` (one line naming the key) unless
    ``restart_lam > 0`` and, with a test (``restart_delta`` not ``None``), ``restart_delta``
    in ``(0, 1)``, ``restart_memory`` an integer >= 2 and a plain correction (``gamma = 1``,
    no ``window``: a forgetting correction already leaves its past)."""
    check_number(who, "restart_lam", lam, gt=0)
    if delta is None:
        return
    check_number(who, "restart_delta", delta, gt=0)
    if not delta < 1:
        raise OptionError(f"{who}: restart_delta must be in (0, 1), got {delta}")
    check_number(who, "restart_memory", memory, ge=2, integer=True)
    if gamma != 1 or window is not None:
        raise OptionError(
            f"{who}: restart_delta needs the plain correction (gamma: 1, window: null), "
            f"got gamma={gamma}, window={window}"
        )


class GLRRestart(torch.nn.Module):
    """The residual memory and the GLR test of every (trial, arm) cell.

    Args:
        num_trials, num_arms: ``R``, ``K``.
        delta: the test's confidence ``delta`` in ``(0, 1)``.
        memory: ``M``, the most recent residuals per cell the test reads (>= 2).
        who: the learner's name, for the error messages.

    Buffers (saved with the learner): ``values [R, K, M]`` (the residuals, oldest first;
    positions ``>= count`` unused), ``count [R, K]`` (long, how many are kept) and
    ``restarts [R, K]`` (long, the changes found so far per cell).
    """

    def __init__(self, num_trials: int, num_arms: int, delta: float, memory: int, who: str) -> None:
        super().__init__()
        check_restart(who, delta, 1.0, memory, 1.0, None)
        self.delta, self.memory = float(delta), int(memory)
        shape = (num_trials, num_arms)
        self.register_buffer("values", torch.zeros(*shape, self.memory))
        self.register_buffer("count", torch.zeros(shape, dtype=torch.long))
        self.register_buffer("restarts", torch.zeros(shape, dtype=torch.long))

    def step(self, observed: Tensor, residual: Tensor) -> Tensor:
        """One round: append the observed residuals (``observed [R, B, K]`` bool,
        ``residual [R, B, K]``, the ``B`` requests in order; a full memory drops its oldest
        value), test the cells observed this round and empty the memory of those that
        report a change. Returns them, ``[R, K]`` bool.

        On the CPU only the observed cells are read and written (their indices are a free
        host read); elsewhere every cell is, masked, so that nothing waits on the device.
        """
        r, b, k = observed.shape
        seen = observed.any(1).reshape(r * k)  # [R K]
        obs = observed.transpose(1, 2).reshape(r * k, b)  # [R K, B]
        res = residual.transpose(1, 2).reshape(r * k, b)
        values, count = self.values.view(r * k, -1), self.count.view(r * k)
        rows = _observed_rows(seen)  # [P] or None
        if rows is not None:
            values, count, obs, res = values[rows], count[rows], obs[rows], res[rows]
        for j in range(b):  # the round's requests, oldest first
            values, count = _push(values, count, obs[:, j], res[:, j], self.memory)
        stat = gaussian_glr(values, count, SIGMA2)
        changed = obs.any(1) & (stat >= glr_threshold(count, self.delta))
        count = torch.where(changed, 0, count)
        if rows is None:
            self.values, self.count = values.view_as(self.values), count.view_as(self.count)
        else:
            self.values.view(r * k, -1).index_copy_(0, rows, values)
            self.count.view(r * k).index_copy_(0, rows, count)
            changed = seen.new_zeros(r * k).index_copy_(0, rows, changed)
        changed = changed.view(r, k)
        self.restarts = self.restarts + changed.long()
        return changed


def _observed_rows(seen: Tensor) -> Tensor | None:
    """The indices ``[P]`` of the true cells of ``seen [N]`` on the CPU, ``None`` elsewhere
    (every cell is then read, masked)."""
    return seen.nonzero()[:, 0] if seen.device.type == "cpu" else None


def _push(
    values: Tensor, count: Tensor, observed: Tensor, residual: Tensor, memory: int
) -> tuple[Tensor, Tensor]:
    """Append ``residual [P]`` to the cells ``observed [P]`` of ``values [P, M]`` (the first
    ``count [P]`` kept, oldest first); a full cell drops its oldest value. Returns the new
    ``(values, count)``."""
    full = count >= memory
    shifted = torch.where((observed & full)[:, None], values.roll(-1, -1), values)
    slot = torch.where(full, memory - 1, count)[:, None]  # [P, 1]
    written = shifted.scatter(-1, slot, residual.to(values.dtype)[:, None])
    return torch.where(observed[:, None], written, values), count + (observed & ~full).long()


__all__ = ["RESTART_KEYS", "SIGMA2", "GLRRestart", "check_restart"]
