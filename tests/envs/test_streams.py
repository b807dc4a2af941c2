"""Per-trial env noise from the run's source (torchroute.envs.streams)."""

from __future__ import annotations

import pandas as pd
import torch

from torchroute.envs import LowRankExperts
from torchroute.envs.streams import env_noise_keys, trial_source
from torchroute.functional.random import TrialRNG, mix64, trial_keys
from torchroute.types import Decision

F64 = torch.float64
SMALL = {"num_experts": 3, "rank": 1, "latent_dim": 3, "num_clusters": 2, "horizon": 6}


def _env(seeds, noise=0.5) -> LowRankExperts:
    return LowRankExperts(
        seeds=seeds, dims=[4], generator="well_specified", noise=noise, dtype=F64, **SMALL
    )


def _noise(env: LowRankExperts, generator) -> torch.Tensor:
    """The reward noise of round 0 with every trial on expert 0, ``[R, 1]``."""
    ctx = env.context(0)
    action = torch.zeros(env.num_trials, 1, dtype=torch.long)
    probs = torch.nn.functional.one_hot(action, env.num_arms).to(F64)
    _, out = env.step(ctx, Decision(probs, action), generator)
    return (out["reward"] - out["expected_reward"]) / env.noise


def test_a_trial_rng_is_used_as_is():
    rng = TrialRNG(torch.tensor([3, 5]))
    assert trial_source(rng, torch.tensor([1, 2])) is rng


def test_shared_generator_noise_is_the_documented_per_trial_stream():
    """Reference: one 62-bit word from the generator, xor-mixed into each trial's label key."""
    env = _env([0, 1, 2])
    got = _noise(env, torch.Generator().manual_seed(7))
    word = torch.randint(0, 2**62, (1,), generator=torch.Generator().manual_seed(7))
    keys = trial_keys(env.trials(), 0, "env")
    want = TrialRNG(mix64(keys ^ word)).normal((3, 1), dtype=F64)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_noise_moves_with_the_generator_and_is_the_same_for_the_same_state():
    env = _env([0, 1])
    a = _noise(env, torch.Generator().manual_seed(0))
    b = _noise(env, torch.Generator().manual_seed(0))
    c = _noise(env, torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    assert not torch.isclose(a, c).any()


def test_a_trial_alone_draws_its_noise_among_others():
    alone = _noise(_env([2]), torch.Generator().manual_seed(3))
    among = _noise(_env([0, 2, 1]), torch.Generator().manual_seed(3))
    torch.testing.assert_close(among[1], alone[0], rtol=0, atol=0)


def test_keys_depend_on_the_labels_only():
    labels = pd.DataFrame({"seed": [4, 9, 4]})
    keys = env_noise_keys(labels)
    assert keys[0] == keys[2] and keys[0] != keys[1]
    assert torch.equal(env_noise_keys(labels.iloc[[1]]), keys[[1]])
