"""The change test of the residual learners: a Gaussian GLR test per (trial, arm) on the
residuals each arm observed since its last restart, and the local restart.

What is implemented (:class:`GLRRestart`, for :class:`~torchroute.learners.residual.
ResidualLinUCB` and :class:`~torchroute.learners.residual.ResidualLinTS` with
``restart_delta``): each (trial, arm) cell keeps the last ``restart_memory`` residuals
``score - base_k(x)`` its arm observed since its last restart, oldest first. After each
round the cells observed in it are tested for one change in their mean with the Gaussian
GLR statistic over every split point ``s`` of their ``n`` residuals,

    max_{1 <= s < n} s (n - s) / n * (mu_{1:s} - mu_{s+1:n})^2 / (2 sigma^2)
        >= log(3 n^{3/2} / delta),

``sigma^2 = 1/4`` (:func:`~torchroute.functional.glr.gaussian_glr`; the threshold of
Besson, Kaufmann, Maillard and Seznec, "Efficient change-point detection for tackling
piecewise-stationary bandits", JMLR 2022, in their experiments). A cell that reports a
change has its memory emptied and its arm's correction in that trial put back to a prior of
mean 0 (the base router's prediction) and precision ``restart_lam`` (a model the base never
saw: its new-model covariance with ``restart_lam`` for ``lam``); the observations of that
round are dropped with the rest, and the correction learns again from the next one.

Where this differs from the paper's GLR-klUCB: the test reads residuals of a fitted router
rather than rewards (their scale ``1/4`` is that of a score in ``[0, 1]`` given the query;
the base's own errors add to the spread across queries); it uses the Gaussian rather than
the Bernoulli divergence (residuals are not in ``[0, 1]``); it reads at most
``restart_memory`` residuals rather than all since the restart; it tests every round rather
than every few; there is no forced exploration, so an arm is tested only where it is played
(a model that got worse is found, one that got better while unplayed is not); and a warm
start's rows are the correction's prior, never read by the test.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.errors import OptionError
from torchroute.functional.glr import gaussian_glr, glr_threshold

#: the change options, chosen on validation (a list of values) as the correction's others
RESTART_KEYS = ("restart_delta", "restart_lam")
#: the sub-Gaussian variance scale of the residuals (that of a score in [0, 1])
SIGMA2 = 0.25
#: the defaults of ``restart_lam`` and ``restart_memory`` (the learners' signatures use them)
RESTART_LAM = 1.0
RESTART_MEMORY = 1024


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


def check_restart_node(who: str, hparams: Mapping[str, Any]) -> None:
    """:func:`check_restart` on a learner config's values (``gamma`` 1, no ``window``,
    ``restart_lam`` 1 and ``restart_memory`` 1024 where absent); nothing when one of them
    is a list (each candidate is checked when the run chooses among them)."""
    keys = ("restart_delta", "restart_lam", "restart_memory", "gamma", "window")
    if any(isinstance(hparams.get(k), (list, tuple)) for k in keys):
        return
    check_restart(
        who,
        hparams.get("restart_delta"),
        hparams.get("restart_lam", RESTART_LAM),
        hparams.get("restart_memory", RESTART_MEMORY),
        hparams.get("gamma", 1.0),
        hparams.get("window"),
    )


class GLRRestart(torch.nn.Module):
    """The residual memory and the GLR test of every (trial, arm) cell.

    Args:
        num_trials, num_arms: ``R``, ``K``.
        delta: the test's confidence ``delta`` in ``(0, 1)``.
        memory: ``M``, the most recent residuals per cell the test reads (>= 2).
        who: the learner's name, for the error messages.
        prior: ``[p, p]`` the covariance ``A_k^{-1}`` a restart puts back (``I /
            restart_lam``); read by :meth:`reset` only.
        prior_new: ``[p, p]`` that of an arm the base never saw, or ``None``.

    Buffers (saved with the learner): ``values [R, K, M]`` (the residuals, oldest first;
    positions ``>= count`` unused), ``count [R, K]`` (long, how many are kept) and
    ``restarts [R, K]`` (long, the changes found so far per cell).
    """

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        delta: float,
        memory: int,
        who: str,
        prior: Tensor | None = None,
        prior_new: Tensor | None = None,
    ) -> None:
        super().__init__()
        check_restart(who, delta, 1.0, memory, 1.0, None)
        self.delta, self.memory = float(delta), int(memory)
        shape = (num_trials, num_arms)
        self.register_buffer("values", torch.zeros(*shape, self.memory))
        self.register_buffer("count", torch.zeros(shape, dtype=torch.long))
        self.register_buffer("restarts", torch.zeros(shape, dtype=torch.long))
        self.register_buffer("prior", prior, persistent=False)  # fixed: from the options
        self.register_buffer("prior_new", prior_new, persistent=False)

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
        stat = gaussian_glr(_kept(values, count), count, SIGMA2)
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

    def reset(self, correction: Any, changed: Tensor, hidden: Tensor | None) -> None:
        """Put the cells ``changed [R, K]`` (bool) of ``correction`` (a LinUCB or LinTS:
        ``theta [R, K, p]``, ``a_inv [R, K, p, p]``) back to the prior: ``theta_k = 0`` and
        ``A_k^{-1}`` = :attr:`prior`, or :attr:`prior_new` where ``hidden [R, K]`` (the
        arms the base never saw). On the CPU a round with no change leaves the state
        untouched (a free host read); elsewhere the masked writes keep every other cell."""
        if changed.device.type == "cpu" and not bool(changed.any()):
            return
        prior = self.prior.to(correction.a_inv)  # [p, p]
        if self.prior_new is not None and hidden is not None:
            new = hidden.to(changed.device)[..., None, None]  # [R, K, 1, 1]
            prior = torch.where(new, self.prior_new.to(correction.a_inv), prior)
        cell = changed[..., None, None]
        correction.a_inv = torch.where(cell, prior, correction.a_inv).contiguous()
        correction.theta = torch.where(cell[..., 0], 0.0, correction.theta).contiguous()


def _observed_rows(seen: Tensor) -> Tensor | None:
    """The indices ``[P]`` of the true cells of ``seen [N]`` on the CPU, ``None`` elsewhere
    (every cell is then read, masked)."""
    return seen.nonzero()[:, 0] if seen.device.type == "cpu" else None


def _kept(values: Tensor, count: Tensor) -> Tensor:
    """``values [P, M]`` cut on the CPU to its first ``max(count)`` columns (at least 2):
    the statistic reads no value past a cell's count, and the columns past every count
    add exact zeros to its sums, so the cut changes no bit of it (off the CPU: all ``M``,
    reading the largest count would wait on the device)."""
    if values.device.type != "cpu" or count.numel() == 0:
        return values
    return values[:, : max(2, int(count.max()))]


def _push(
    values: Tensor, count: Tensor, observed: Tensor, residual: Tensor, memory: int
) -> tuple[Tensor, Tensor]:
    """Append ``residual [P]`` to the cells ``observed [P]`` of ``values [P, M]`` (the first
    ``count [P]`` kept, oldest first); a full cell drops its oldest value. Returns the new
    ``(values, count)``."""
    full = count >= memory
    rolled = observed & full
    shifted = values
    if rolled.device.type != "cpu" or bool(rolled.any()):  # on the CPU a free host read
        shifted = torch.where(rolled[:, None], values.roll(-1, -1), values)
    slot = torch.where(full, memory - 1, count)[:, None]  # [P, 1]
    written = shifted.scatter(-1, slot, residual.to(values.dtype)[:, None])
    return torch.where(observed[:, None], written, values), count + (observed & ~full).long()


__all__ = [
    "RESTART_KEYS",
    "RESTART_LAM",
    "RESTART_MEMORY",
    "SIGMA2",
    "GLRRestart",
    "check_restart",
    "check_restart_node",
]
