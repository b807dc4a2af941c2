"""Per-trial noise streams for an env's step, whatever source of randomness the run passes.

With ``rng="per_trial"`` the loop hands :meth:`Env.step` a :class:`TrialRNG` whose streams
are keyed by the trials' labels; with ``rng="shared"`` it hands one ``torch.Generator``.
Drawing an env's noise straight from a shared generator ties each trial's numbers to the
trials beside it and to its position among them. :func:`trial_source` takes one word from
the shared generator per step and mixes it into each trial's own key (from its labels), so
the noise of a trial depends on its labels and the generator's state only: permuting the
trials permutes the noise, and the run's seed still moves it.
"""

from __future__ import annotations

import pandas as pd
import torch
from torch import Tensor

from torchroute.functional.random import Source, TrialRNG, mix64, trial_keys

#: the ``stream`` name of the env noise keys (:func:`torchroute.functional.random.trial_keys`)
ENV_STREAM = "env"


def env_noise_keys(labels: pd.DataFrame, device: torch.device | str = "cpu") -> Tensor:
    """``[R]`` int64 keys of the trials ``labels`` (one row per trial) for :func:`trial_source`."""
    return trial_keys(labels, 0, ENV_STREAM).to(device)


def trial_source(generator: Source, keys: Tensor) -> TrialRNG:
    """Streams of one step for the trials of ``keys [R]`` (from :func:`env_noise_keys`).

    A :class:`TrialRNG` is returned as is (its streams are already per trial); from a
    ``torch.Generator`` (or ``None``: torch's global one) one 62-bit word ``w`` is drawn and
    trial ``r`` reads a fresh stream keyed ``mix64(keys[r] ^ w)``. No host sync: the word
    stays a tensor.
    """
    if isinstance(generator, TrialRNG):
        return generator
    where = "cpu" if generator is None else generator.device
    word = torch.randint(0, 2**62, (1,), generator=generator, device=where)
    return TrialRNG(mix64(keys ^ word.to(keys.device)))
