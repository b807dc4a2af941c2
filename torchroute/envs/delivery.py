"""Feedback as deployments give it: late, for some requests, with noise.

The single-choice env's ``feedback`` option::

    feedback: {mode: bandit, delay: 50, rate: 0.15, noise: 0.1}

``delay`` (rounds, ``>= 0``): the feedback of round ``t`` reaches the learner at round
``t + delay``; ``rate`` (in ``(0, 1]``): the fraction of requests that are ever rated;
``noise`` (``>= 0``): what the learner sees of a score, a flip with that probability when
the table's scores are all 0 or 1, else Gaussian noise of that standard deviation (clipped
to ``[0, 1]``). The costs are seen as they are, and the reported utility, regret, accuracy
and cost stay on the true scores. ``mode`` is the env's ``bandit`` / ``full``.

Which requests are rated and the noise they get are drawn from streams keyed by each
trial's stream ``seed`` (never from the run's generator), so every learner, and every
``rho`` of one seed, sees the same requests rated at the same rounds with the same noise.
A request whose feedback would arrive after the last round is never rated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from torchroute.errors import FeedbackOptionError as FeedbackOptionError
from torchroute.functional.random import TrialRNG, trial_keys

#: the feedback modes of a single-choice env
MODES = ("bandit", "full")
_KEYS = ("mode", "delay", "rate", "noise")


@dataclass(frozen=True)
class FeedbackOption:
    """The ``feedback`` option of a single-choice env.

    Attributes:
        mode: ``"bandit"`` (the played arm and the requested ones) or ``"full"``.
        delay: rounds between a decision and its feedback.
        rate: the fraction of requests that get feedback.
        noise: the flip probability (0/1 scores) or the standard deviation of the noise.
    """

    mode: str = "bandit"
    delay: int = 0
    rate: float = 1.0
    noise: float = 0.0

    @property
    def immediate(self) -> bool:
        """Whether every request gets its true feedback in its own round (the default)."""
        return self.delay == 0 and self.rate == 1.0 and self.noise == 0.0

    @classmethod
    def from_config(cls, spec: Any) -> FeedbackOption:
        """The option of a config value: a mode (``bandit`` / ``full``) or a mapping.

        Raises:
            FeedbackOptionError: one line naming ``feedback.<key>`` and what was expected.
        """
        if isinstance(spec, str) and spec in MODES:
            spec = {"mode": spec}
        if not isinstance(spec, Mapping):
            raise FeedbackOptionError(
                "feedback must be 'bandit', 'full' or a mapping {mode, delay, rate, noise}, "
                f"got {spec!r}"
            )
        unknown = sorted(str(k) for k in spec if k not in _KEYS)
        if unknown:
            raise FeedbackOptionError(
                f"feedback.{unknown[0]} is not a key of the feedback option (keys: "
                f"{', '.join(_KEYS)})"
            )
        mode = spec.get("mode", "bandit")
        if mode not in MODES:
            raise FeedbackOptionError(f"feedback.mode must be 'bandit' or 'full', got {mode!r}")
        delay = spec.get("delay", 0)
        if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
            raise FeedbackOptionError(
                f"feedback.delay must be a whole number of rounds >= 0, got {delay!r}"
            )
        rate = _number("rate", spec.get("rate", 1.0))
        if not 0.0 < rate <= 1.0:
            raise FeedbackOptionError(f"feedback.rate must be in (0, 1], got {rate}")
        noise = _number("noise", spec.get("noise", 0.0))
        if not 0.0 <= noise < math.inf:
            raise FeedbackOptionError(f"feedback.noise must be finite and >= 0, got {noise}")
        return cls(mode, delay, rate, noise)

    def fingerprint(self) -> Any:
        """The mode alone for the default (as before the option existed), else the mapping."""
        if self.immediate:
            return self.mode
        return {"mode": self.mode, "delay": self.delay, "rate": self.rate, "noise": self.noise}


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise FeedbackOptionError(f"feedback.{key} must be a number, got {value!r}")
    return float(value)


class FeedbackSchedule:
    """Which requests of ``R`` trials are rated, and the noise of their scores.

    Args:
        option: the ``feedback`` option.
        seeds: ``[R]`` the trials' stream seeds (the keys of the draws).
        horizon: ``T``.
        binary: whether the table's scores are all 0 or 1 (noise flips them).
        device: where the masks and draws live.

    Attributes:
        arrives: ``[R, T]`` bool on the CPU: the feedback of round ``t`` reaches the
            learner (rated, and ``t + delay < T``); read by the loop without a device sync.
    """

    def __init__(
        self,
        option: FeedbackOption,
        seeds: Tensor,
        horizon: int,
        binary: bool,
        device: torch.device,
    ) -> None:
        self.option, self.horizon, self.binary = option, int(horizon), bool(binary)
        labels = pd.DataFrame({"seed": seeds.cpu().numpy()})
        self._rate_keys = trial_keys(labels, 0, "feedback_rate")
        self._noise = TrialRNG(trial_keys(labels, 0, "feedback_noise").to(device))
        rated = TrialRNG(self._rate_keys).uniform((seeds.numel(), self.horizon), torch.float64)
        rated = rated < option.rate  # [R, T]
        rated[:, max(self.horizon - option.delay, 0) :] = False  # arrives after the end
        self.arrives = rated
        self._arrives_on = rated.to(device)

    def select(self, index: Tensor) -> FeedbackSchedule:
        """The schedule of the trials ``index`` (``[n]`` long, CPU)."""
        out = object.__new__(FeedbackSchedule)
        out.option, out.horizon, out.binary = self.option, self.horizon, self.binary
        out._rate_keys = self._rate_keys[index]
        out._noise = self._noise.select(index)
        out.arrives = self.arrives[index]
        out._arrives_on = self._arrives_on[index.to(self._arrives_on.device)]
        return out

    def seen_scores(self, t: int, scores: Tensor) -> Tensor:
        """The scores ``[R, B, K]`` of round ``t`` as the learner sees them (noise added)."""
        noise = self.option.noise
        if noise == 0.0:
            return scores
        draws = self._noise
        draws.counter = t  # round t's draws, whatever was drawn before (resume included)
        if self.binary:
            flip = draws.uniform(tuple(scores.shape), torch.float64) < noise
            return torch.where(flip, 1.0 - scores, scores)
        shift = draws.normal(tuple(scores.shape), torch.float64)
        return (scores + noise * shift.to(scores.dtype)).clamp(0.0, 1.0)

    def rated(self, t: int) -> Tensor:
        """``[R, 1, 1]`` bool on the env's device: round ``t``'s feedback ever arrives."""
        return self._arrives_on[:, t, None, None]


__all__ = ["MODES", "FeedbackOption", "FeedbackOptionError", "FeedbackSchedule"]
