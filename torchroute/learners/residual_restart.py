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
change keeps in its memory the residuals after the most likely change point ``s*`` (the
split of the largest statistic) and drops those before it; its arm's correction in that
trial goes back to a prior of mean 0 (the base router's prediction) and precision
``restart_lam`` (a model the base never saw: its new-model covariance with ``restart_lam``
for ``lam``). A correction that is a bias per model (``projection: 0``) is then refit on
the kept residuals at once, ``theta = sum / (1 / prior + m)`` over their ``m`` (what the
correction would be had it restarted at ``s*``); any other correction learns again from
the next round's observations (its features of the kept rounds are not kept).

Where this differs from the paper's GLR-klUCB: the test reads residuals of a fitted router
rather than rewards (their scale ``1/4`` is that of a score in ``[0, 1]`` given the query;
the base's own errors add to the spread across queries); it uses the Gaussian rather than
the Bernoulli divergence (residuals are not in ``[0, 1]``); a restart keeps the residuals
after the estimated change point rather than none (the test has just read them: a change
found ``m`` observations late is then corrected from those ``m`` at once, not learnt again
from zero); it reads at most ``restart_memory`` residuals rather than all since the
restart; it tests every round rather
than every few; there is no forced exploration, so an arm is tested only where it is played
(a model that got worse is found, one that got better while unplayed is not); and a warm
start's rows are the correction's prior, never read by the test.

A soft shift (``change_hazard``, a bias correction only, with or without the test): the
test acts only once its evidence passes a threshold set for few false alarms over the whole
stream, so a drop of a model played in a third of the rounds is found hundreds of rounds
late, if at all. With ``change_hazard = h`` each cell's memory is also read as the
posterior of one change (:func:`~torchroute.functional.change_posterior.
one_change_posterior`: prior odds ``h`` of a change at each position against none, segment
means ``N(0, sigma^2 / restart_lam)``), and the arm's score moves by what that posterior
expects its bias to be beyond the correction's own,

    shift_k = sum_s P(s) (S_2(s) / (n - s + restart_lam) - theta_k),

``P(s)`` the posterior of a change after the ``s``-th kept residual, ``S_2(s)`` the sum
after it: near 0 while no change is likely, the refit a restart would make once one is
certain, and in between in proportion to the evidence, so the router leaves a model that
got worse on the queries where it was barely the best long before the test would fire.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.errors import OptionError
from torchroute.functional.change_posterior import one_change_posterior
from torchroute.functional.glr import gaussian_glr, gaussian_glr_split, glr_threshold

#: the change options, chosen on validation (a list of values) as the correction's others
RESTART_KEYS = ("restart_delta", "restart_lam", "change_hazard")
#: the sub-Gaussian variance scale of the residuals (that of a score in [0, 1])
SIGMA2 = 0.25
#: the defaults of ``restart_lam`` and ``restart_memory`` (the learners' signatures use them)
RESTART_LAM = 1.0
RESTART_MEMORY = 1024


def check_restart(
    who: str,
    delta: float | None,
    lam: float,
    memory: int,
    gamma: float,
    window: int | None,
    hazard: float | None = None,
    projection: int | None = 0,
) -> None:
    """Raise :class:`~torchroute.errors.OptionError` (one line naming the key) unless
    ``restart_lam > 0`` and, with a test (``restart_delta`` not ``None``) or a soft shift
    (``change_hazard`` not ``None``): ``restart_delta`` in ``(0, 1)``, ``change_hazard`` in
    ``(0, 1)`` on a bias correction (``projection: 0``), ``restart_memory`` an integer >= 2
    and a plain correction (``gamma = 1``, no ``window``: a forgetting correction already
    leaves its past)."""
    check_number(who, "restart_lam", lam, gt=0)
    if delta is None and hazard is None:
        return
    for key, value in (("restart_delta", delta), ("change_hazard", hazard)):
        if value is None:
            continue
        check_number(who, key, value, gt=0)
        if not value < 1:
            raise OptionError(f"{who}: {key} must be in (0, 1), got {value}")
    if hazard is not None and projection != 0:
        raise OptionError(
            f"{who}: change_hazard shifts a bias correction: it needs projection: 0, got "
            f"projection={projection}"
        )
    check_number(who, "restart_memory", memory, ge=2, integer=True)
    key = "restart_delta" if delta is not None else "change_hazard"
    if gamma != 1 or window is not None:
        raise OptionError(
            f"{who}: {key} needs the plain correction (gamma: 1, window: null), "
            f"got gamma={gamma}, window={window}"
        )


def check_restart_node(who: str, hparams: Mapping[str, Any]) -> None:
    """:func:`check_restart` on a learner config's values (``gamma`` 1, no ``window``,
    ``restart_lam`` 1 and ``restart_memory`` 1024 where absent); nothing when one of them
    is a list (each candidate is checked when the run chooses among them)."""
    keys = ("restart_delta", "restart_lam", "restart_memory", "gamma", "window")
    keys += ("change_hazard", "projection")
    if any(isinstance(hparams.get(k), (list, tuple)) for k in keys):
        return
    check_restart(
        who,
        hparams.get("restart_delta"),
        hparams.get("restart_lam", RESTART_LAM),
        hparams.get("restart_memory", RESTART_MEMORY),
        hparams.get("gamma", 1.0),
        hparams.get("window"),
        hparams.get("change_hazard"),
        hparams.get("projection"),
    )


class GLRRestart(torch.nn.Module):
    """The residual memory and the GLR test of every (trial, arm) cell.

    Args:
        num_trials, num_arms: ``R``, ``K``.
        delta: the test's confidence ``delta`` in ``(0, 1)``; ``None``: no test (the memory
            feeds the soft shift alone).
        memory: ``M``, the most recent residuals per cell the test reads (>= 2).
        who: the learner's name, for the error messages.
        prior: ``[p, p]`` the covariance ``A_k^{-1}`` a restart puts back (``I /
            restart_lam``); read by :meth:`reset` only.
        prior_new: ``[p, p]`` that of an arm the base never saw, or ``None``.
        refit: the correction is a bias per model (``p = 1``, its feature 1 on every
            query): :meth:`reset` refits it on the kept residuals (the module doc).
        hazard: the soft shift's prior odds ``h`` of a change at each position (the
            module doc), or ``None`` (no shift). Needs ``refit``.
        lam: the segment means' prior precision of the shift's posterior
            (``restart_lam``).

    Buffers (saved with the learner): ``values [R, K, M]`` (the residuals, oldest first;
    positions ``>= count`` unused), ``count [R, K]`` (long, how many are kept),
    ``restarts [R, K]`` (long, the changes found so far per cell) and, with ``hazard``,
    ``shift [R, K]`` (float64, each arm's soft shift, :meth:`update_shift`).
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
        refit: bool = False,
        hazard: float | None = None,
        lam: float = RESTART_LAM,
    ) -> None:
        super().__init__()
        check_restart(who, delta, lam, memory, 1.0, None, hazard, 0 if refit else None)
        if refit and prior is not None and prior.shape != (1, 1):
            raise ValueError(f"{who}: a restart refits a bias alone (p = 1), got p = {len(prior)}")
        self.delta = None if delta is None else float(delta)
        self.memory, self.refit = int(memory), bool(refit)
        self.hazard, self.lam = (None if hazard is None else float(hazard)), float(lam)
        shape = (num_trials, num_arms)
        self.register_buffer("values", torch.zeros(*shape, self.memory))
        self.register_buffer("count", torch.zeros(shape, dtype=torch.long))
        self.register_buffer("restarts", torch.zeros(shape, dtype=torch.long))
        self.register_buffer("prior", prior, persistent=False)  # fixed: from the options
        self.register_buffer("prior_new", prior_new, persistent=False)
        if self.hazard is not None:
            self.register_buffer("shift", torch.zeros(shape, dtype=torch.float64))

    def step(self, observed: Tensor, residual: Tensor) -> Tensor:
        """One round: append the observed residuals (``observed [R, B, K]`` bool,
        ``residual [R, B, K]``, the ``B`` requests in order; a full memory drops its oldest
        value), test the cells observed this round and, in those that report a change,
        drop the residuals before its most likely point. Returns them, ``[R, K]`` bool.

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
        changed = torch.zeros_like(count, dtype=torch.bool)
        if self.delta is not None:
            kept = _kept(values, count)
            stat = gaussian_glr(kept, count, SIGMA2)
            changed = obs.any(1) & (stat >= glr_threshold(count, self.delta))
            if changed.device.type != "cpu" or bool(changed.any()):  # on the CPU a free read
                _, split = gaussian_glr_split(kept, count, SIGMA2)  # the change points
                values, count = _drop_first(values, count, torch.where(changed, split, 0))
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
        arms the base never saw); with :attr:`refit` (``p = 1``), the posterior of that
        prior on the ``m`` kept residuals: ``A^{-1} = 1 / (1 / prior + m)``, ``theta =
        A^{-1} sum``. On the CPU a round with no change leaves the state untouched (a free
        host read); elsewhere the masked writes keep every other cell."""
        if changed.device.type == "cpu" and not bool(changed.any()):
            return
        prior = self.prior.to(correction.a_inv)  # [p, p]
        if self.prior_new is not None and hidden is not None:
            new = hidden.to(changed.device)[..., None, None]  # [R, K, 1, 1]
            prior = torch.where(new, self.prior_new.to(correction.a_inv), prior)
        theta = torch.zeros_like(correction.theta)
        if self.refit:  # p = 1: the bias's posterior on the kept residuals
            pos = torch.arange(self.memory, device=self.values.device)
            kept = torch.where(pos < self.count[..., None], self.values, 0.0)
            total = kept.sum(-1, dtype=torch.float64).to(prior.dtype)  # [R, K]
            prior = 1.0 / (1.0 / prior + self.count.to(prior.dtype)[..., None, None])
            theta = (prior[..., 0] * total[..., None]).expand_as(correction.theta)
        cell = changed[..., None, None]
        correction.a_inv = torch.where(cell, prior, correction.a_inv).contiguous()
        correction.theta = torch.where(cell[..., 0], theta, correction.theta).contiguous()

    def update_shift(self, theta: Tensor, cells: Tensor) -> None:
        """Recompute the soft shift (the module doc) of ``cells [R, K]`` (bool: those whose
        memory or correction moved this round) from their kept residuals and the bias
        correction ``theta [R, K]``; the others keep theirs. On the CPU only those cells
        are read; elsewhere every cell is, masked."""
        assert self.hazard is not None
        r, k = cells.shape
        rows = _observed_rows(cells.reshape(r * k))
        values, count = self.values.view(r * k, -1), self.count.view(r * k)
        bias = theta.reshape(r * k).to(torch.float64)
        if rows is not None:
            values, count, bias = values[rows], count[rows], bias[rows]
        values = _kept(values, count)
        p_change, after = one_change_posterior(values, count, SIGMA2, self.lam, self.hazard)
        shift = after - p_change * bias
        if rows is None:
            self.shift = torch.where(cells, shift.view(r, k), self.shift)
        else:
            self.shift.view(r * k).index_copy_(0, rows, shift)


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


def _drop_first(values: Tensor, count: Tensor, drop: Tensor) -> tuple[Tensor, Tensor]:
    """``values [P, M]`` with the first ``drop [P]`` of each row's ``count [P]`` kept
    residuals removed (the rest moved to the front, order kept); the new ``(values,
    count)``. Positions past the new count hold stale values, never read."""
    pos = torch.arange(values.shape[-1], device=values.device)
    index = (pos + drop[:, None]).clamp_max(values.shape[-1] - 1)
    return values.gather(-1, index), count - drop


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
