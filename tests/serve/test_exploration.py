"""The exploration floor: served actions are distributed as the logged mixture."""

from __future__ import annotations

import pytest
import torch

from torchroute.serve.exploration import check_epsilon, explore, mix_uniform


def test_the_served_actions_follow_the_mixed_probabilities():
    # a deterministic learner (one-hot on arm 1 of K = 4), eps = 0.2: by hand the mixture is
    # 0.8 * [0, 1, 0, 0] + 0.05 = [0.05, 0.85, 0.05, 0.05]
    n, k, eps = 40_000, 4, 0.2
    probs = torch.zeros(n, k, dtype=torch.float64)
    probs[:, 1] = 1.0
    action = torch.ones(n, dtype=torch.long)
    served, mixed = explore(action, probs, eps, torch.Generator().manual_seed(0))
    expected = torch.tensor([0.05, 0.85, 0.05, 0.05], dtype=torch.float64)
    assert torch.allclose(mixed, expected.expand(n, k))
    freq = torch.bincount(served, minlength=k).double() / n
    # binomial standard error sqrt(p (1 - p) / n) <= 0.0025: within 4 of them
    assert torch.allclose(freq, expected, atol=0.01), freq


def test_no_floor_changes_nothing_and_bad_values_are_refused():
    probs = torch.tensor([[0.3, 0.7]], dtype=torch.float64)
    action = torch.tensor([1])
    served, same = explore(action, probs, 0.0, torch.Generator())
    assert served is action and same is probs
    assert torch.allclose(mix_uniform(probs, 1.0), torch.full((1, 2), 0.5, dtype=torch.float64))
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="explore"):
            check_epsilon(bad)
