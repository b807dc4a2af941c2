"""ResidualSquareCB: inverse gap weighting over a static router's values plus a correction.

Before any update its distribution is a hand-computed IGW of the base router's values
(floored), and with a huge ``igw_gamma`` and no floor it makes the base router's choices on
a whole stream; its correction is a numpy ridge on ``score - base_k(x)``, discounted or
windowed as asked; forgetting returns to the base router.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.learners.test_residual import D, K, R, _base, _features, _numpy_ridge, _stream
from torchroute.learners.residual_squarecb import ResidualSquareCB
from torchroute.types import Context, Feedback

F64 = torch.float64
PROBE = Context(x=_features(R * 5, torch.Generator().manual_seed(8)).view(R, 5, D))


def _hand_igw(values: np.ndarray, gamma: float, mu: float, floor: float) -> np.ndarray:
    """Inverse gap weighting row by row (first maximum is the best arm), then the floor."""
    out = np.zeros_like(values)
    for idx in np.ndindex(values.shape[:-1]):
        f = values[idx]
        b = int(np.argmax(f))
        p = np.array([1.0 / (mu + gamma * (f[b] - f[k])) for k in range(len(f))])
        p[b] = 0.0
        p[b] = 1.0 - p.sum()
        lam = np.clip((floor - p.min()) / (1.0 / len(f) - p.min()), 0.0, 1.0)
        out[idx] = (1 - lam) * p + lam / len(f)
    return out


def _base_values(base, context: Context) -> np.ndarray:
    y, c = base.predict(context)
    return (y - base.rho[:, None, None] * c).numpy()


@pytest.mark.parametrize("floor", [0.0, 0.2])
def test_before_any_update_it_is_the_igw_of_the_base_routers_values(floor):
    base = _base("mlp").double()
    learner = ResidualSquareCB(R, K, D, _base("mlp"), igw_gamma=30.0, eps_floor=floor).double()
    probs = learner.act(PROBE, torch.Generator().manual_seed(0)).probs.numpy()
    values = _base_values(base, PROBE)
    np.testing.assert_allclose(probs, _hand_igw(values, 30.0, K, floor), rtol=1e-12)
    np.testing.assert_array_equal(probs.argmax(-1), values.argmax(-1))


def test_with_a_huge_igw_gamma_and_no_update_it_makes_the_base_routers_choices():
    base = _base("mlp").double()
    learner = ResidualSquareCB(R, K, D, _base("mlp"), igw_gamma=1e12, eps_floor=0.0).double()
    g = torch.Generator().manual_seed(5)
    g_base, g_learner = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    for _ in range(300):
        context = Context(x=_features(R * 2, g).view(R, 2, D))
        expected = base.act(context, g_base).action
        assert torch.equal(learner.act(context, g_learner).action, expected)


def test_a_finite_igw_gamma_explores_off_the_base_argmax():
    """The control of the test above: at the default strength it does leave the argmax."""
    base = _base("mlp").double()
    learner = ResidualSquareCB(R, K, D, _base("mlp"), igw_gamma=4.0).double()
    g = torch.Generator().manual_seed(5)
    differ = 0
    for _ in range(100):
        context = Context(x=_features(R * 2, g).view(R, 2, D))
        differ += int((learner.act(context, g).action != base.act(context, g).action).sum())
    assert differ > 50


@pytest.mark.parametrize(
    ("options", "weights"),
    [
        ({}, lambda t: np.ones(t)),
        ({"gamma": 0.8}, lambda t: 0.8 ** np.arange(t - 1, -1, -1)),
        ({"window": 7}, lambda t: (np.arange(t) >= t - 7).astype(float)),
    ],
    ids=["plain", "discounted", "window"],
)
def test_the_correction_is_a_numpy_ridge_and_the_igw_reads_it(options, weights):
    lam, rounds = 2.0, 40
    base = _base("mlp").double()
    learner = ResidualSquareCB(R, K, D, _base("mlp"), lam=lam, igw_gamma=7.0, **options).double()
    x, arms, residual = _stream(learner, base, rounds)
    theta = _numpy_ridge(x, arms, residual, lam, weights(rounds))
    values = _base_values(base, PROBE) + np.einsum("rkd,rbd->rbk", theta, PROBE.x.numpy())
    np.testing.assert_allclose(learner.values(PROBE).numpy(), values, atol=1e-9)
    probs = learner.act(PROBE, torch.Generator().manual_seed(0)).probs.numpy()
    np.testing.assert_allclose(probs, _hand_igw(values, 7.0, K, 1e-3), atol=1e-9)


def test_a_discounted_correction_decays_to_the_base_router():
    base = _base("mlp").double()
    learner = ResidualSquareCB(R, K, D, _base("mlp"), lam=1.0, gamma=0.9).double()
    _stream(learner, base, 30)
    assert np.abs(learner.values(PROBE).numpy() - _base_values(base, PROBE)).max() > 0.05
    nothing = Feedback(
        reward=torch.zeros(R, 1, K, dtype=F64), observed=torch.zeros(R, 1, K, dtype=torch.bool)
    )
    context = Context(x=_features(R, torch.Generator().manual_seed(1)).view(R, 1, D))
    for _ in range(300):
        learner.update(context, learner.act(context), nothing)
    np.testing.assert_allclose(learner.values(PROBE).numpy(), _base_values(base, PROBE), atol=1e-9)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"igw_gamma": 0.0}, "igw_gamma must be a finite number > 0"),
        ({"mu": 2.0}, "mu must be a finite number >= 4"),
        ({"eps_floor": 0.5}, "eps_floor must be a finite number"),
        ({"gamma": 1.5}, "gamma must be a finite number"),
    ],
)
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=f"^ResidualSquareCB: {message}"):
        ResidualSquareCB(R, K, D, _base("knn"), **options)
