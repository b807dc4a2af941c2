"""How far a flat curve's moving averages stray from its final level: the band of
``rounds_to_recover``.

For a curve ``u_0 .. u_{n-1}`` of independent noise around one mean (a learner that has
nothing left to learn), ``m_j`` its ``W``-round moving averages, ``level`` the mean of its
final ``F`` rounds and ``s`` its noise (from successive differences), the largest
standardised distance

    Z = max_j |m_j - level| / (s sqrt(1/W + 1/F))

does not depend on the mean or the noise scale. ``sqrt(1/W + 1/F)`` is the noise of the
difference of two averages (one of ``W`` rounds, one of ``F``): the level is an average
too. ``Z`` is the largest of ``n - W + 1`` overlapping averages, so its quantiles exceed a
single average's: at the default windows (``W = n / 10``, ``F = n / 4``) the 95% quantile
is about 3.3, where one average's two-sided 95% point is 1.96.

:func:`stationary_quantile` gives the quantile of ``Z`` by simulation on Gaussian white
noise, with a fixed generator (the same number on every machine within the simulation's
error, and the same number on one machine every time): ``rounds_to_recover`` uses it so
that a flat curve settles in the first window in that share of groups.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

from torchroute.checks import check_number

#: the length the white noise is simulated at (longer curves keep the ratios W / n, F / n)
SIMULATED_ROUNDS = 1000
#: the number of simulated curves
SIMULATED_CURVES = 4000


def distances_to_level(curves: Tensor, window: int, final: int) -> tuple[Tensor, Tensor]:
    """For each row of ``curves [G, n]``: ``|m_j - level|`` ``[G, n - W + 1]`` (``m_j``
    the ``window``-round moving averages, ``level`` the mean of the final ``final``
    rounds) and their noise ``se = s sqrt(1/W + 1/F)`` ``[G, 1]`` (``s`` from successive
    differences, the module doc), float64."""
    u = curves.to(torch.float64)
    g, n = u.shape
    level = u[:, n - final :].mean(-1, keepdim=True)  # [G, 1]
    noise = (u.diff(dim=-1).square().sum(-1, keepdim=True) / (2 * (n - 1))).sqrt()
    total = torch.cat([u.new_zeros(g, 1), u.cumsum(-1)], -1)  # [G, n + 1]
    moving = (total[:, window:] - total[:, :-window]) / window  # [G, n - W + 1]
    return (moving - level).abs(), noise * math.sqrt(1.0 / window + 1.0 / final)


def max_standardised_distance(curves: Tensor, window: int, final: int) -> Tensor:
    """``Z`` (the module doc) of each row of ``curves [G, n]``, ``[G]`` float64."""
    distance, se = distances_to_level(curves, window, final)
    return (distance / se.clamp_min(1e-300)).amax(-1)


def stationary_quantile(rounds: int, window: int, final: int, confidence: float) -> float:
    """The ``confidence`` quantile of ``Z`` for white noise of ``rounds`` rounds, moving
    window ``window`` and final part ``final`` rounds.

    Simulated on :data:`SIMULATED_CURVES` curves (generator seed 0) of
    ``min(rounds, SIMULATED_ROUNDS)`` rounds (from 200 on, rounded to a hundred), the
    window and the final part scaled to keep their ratios to the rounds, and cached on
    those scaled values: a run that reports at every logged round simulates a few curve
    sets for all of them.

    Raises ``ValueError`` unless ``1 <= window``, ``window <= final < rounds`` and
    ``confidence`` in ``(0, 1)``.
    """
    check_number("stationary_quantile", "rounds", rounds, ge=2, integer=True)
    check_number("stationary_quantile", "window", window, ge=1, integer=True)
    check_number("stationary_quantile", "final", final, ge=window, le=rounds - 1, integer=True)
    check_number("stationary_quantile", "confidence", confidence, gt=0, le=1)
    if confidence == 1:
        raise ValueError(f"stationary_quantile: confidence must be < 1, got {confidence}")
    n = min(int(rounds), SIMULATED_ROUNDS)
    if n >= 200:
        n = 100 * round(n / 100)
    w = max(1, round(window * n / rounds))
    f = min(n - 1, max(w, round(final * n / rounds)))
    return _simulated_quantile(n, w, f, float(confidence))


@functools.lru_cache(maxsize=256)
def _simulated_quantile(rounds: int, window: int, final: int, confidence: float) -> float:
    """:func:`stationary_quantile` at the simulated length (cached)."""
    generator = torch.Generator().manual_seed(0)
    noise = torch.randn(SIMULATED_CURVES, rounds, generator=generator, dtype=torch.float64)
    z = max_standardised_distance(noise, window, final)
    return float(torch.quantile(z, confidence))


__all__ = ["distances_to_level", "max_standardised_distance", "stationary_quantile"]
