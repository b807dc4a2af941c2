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

    def push(self, observed: Tensor, residual: Tensor) -> None:
        """Append one residual per observed cell: ``observed [R, K]`` (bool) and
        ``residual [R, K]``; a full memory drops its oldest value."""
        full = self.count >= self.memory  # [R, K]
        shift = (observed & full)[..., None]
        values = torch.where(shift, self.values.roll(-1, -1), self.values)
        slot = torch.where(full, self.memory - 1, self.count)[..., None]  # [R, K, 1]
        written = values.scatter(-1, slot, residual.to(values.dtype)[..., None])
        self.values = torch.where(observed[..., None], written, values)
        self.count = self.count + (observed & ~full).long()

    def step(self, observed: Tensor, residual: Tensor) -> Tensor:
        """One round: append the observed residuals (``observed [R, B, K]`` bool,
        ``residual [R, B, K]``, the ``B`` requests in order), test the cells observed this
        round, empty the memory of those that report a change. Returns them, ``[R, K]``
        bool."""
        for b in range(observed.shape[1]):  # the round's requests, oldest first
            self.push(observed[:, b], residual[:, b])
        stat = gaussian_glr(self.values, self.count, SIGMA2)  # [R, K]
        changed = observed.any(1) & (stat >= glr_threshold(self.count, self.delta))
        self.count = torch.where(changed, 0, self.count)
        self.restarts = self.restarts + changed.long()
        return changed


__all__ = ["RESTART_KEYS", "SIGMA2", "GLRRestart", "check_restart"]
