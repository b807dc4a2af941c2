"""SquareCB's inverse-gap weighting on hand-computed cases."""

from __future__ import annotations

import pytest
import torch

from torchroute.functional.squarecb import squarecb_probs

F64 = torch.float64


def test_hand_computed_case():
    rewards = torch.tensor([0.9, 0.5, 0.1], dtype=F64)
    p = squarecb_probs(rewards, gamma=4.0, mu=3.0)
    expected = torch.tensor([1 - 1 / 4.6 - 1 / 6.2, 1 / 4.6, 1 / 6.2], dtype=F64)
    torch.testing.assert_close(p, expected, rtol=0, atol=1e-15)


def test_best_arm_anywhere_and_default_mu_is_k():
    # Best arm in the middle; mu defaults to K = 4.
    rewards = torch.tensor([[0.2, 0.7, 0.7 - 0.25, 0.0]], dtype=F64)
    p = squarecb_probs(rewards, gamma=2.0)
    others = torch.tensor([1 / (4 + 2 * 0.5), 1 / (4 + 2 * 0.25), 1 / (4 + 2 * 0.7)], dtype=F64)
    expected = torch.tensor([[others[0], 1 - others.sum(), others[1], others[2]]], dtype=F64)
    torch.testing.assert_close(p, expected, rtol=0, atol=1e-15)


def test_equal_rewards_give_uniform_with_mu_k():
    p = squarecb_probs(torch.full((2, 5), 0.3, dtype=F64), gamma=10.0)
    torch.testing.assert_close(p, torch.full((2, 5), 0.2, dtype=F64), rtol=0, atol=1e-15)


@pytest.mark.parametrize("gamma", [0.1, 4.0, 1e4])
def test_rows_are_distributions_batched(gamma):
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(3, 2, 6, generator=gen, dtype=F64)
    p = squarecb_probs(rewards, gamma=gamma, mu=8.0)
    assert p.shape == rewards.shape and p.dtype == F64
    assert (p >= 0).all()
    torch.testing.assert_close(p.sum(-1), torch.ones(3, 2, dtype=F64), rtol=0, atol=1e-12)
    # The greedy arm gets the most mass; every row is computed on its own.
    assert torch.equal(p.argmax(-1), rewards.argmax(-1))
    for i in range(3):
        for j in range(2):
            torch.testing.assert_close(p[i, j], squarecb_probs(rewards[i, j], gamma, 8.0))


def test_larger_gamma_exploits_more():
    rewards = torch.tensor([0.1, 0.8, 0.4], dtype=F64)
    p_small, p_big = squarecb_probs(rewards, 1.0), squarecb_probs(rewards, 100.0)
    assert p_big[1] > p_small[1]
    assert (p_big[[0, 2]] < p_small[[0, 2]]).all()


def test_invalid_arguments():
    rewards = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="mu"):
        squarecb_probs(rewards, gamma=1.0, mu=2.5)
    with pytest.raises(ValueError, match="gamma"):
        squarecb_probs(rewards, gamma=0.0)
    with pytest.raises(ValueError, match="gamma"):
        squarecb_probs(rewards, gamma=-1.0)
