"""The mean-score router against numpy (the column means, the argmax, the validation
utility), under a known price change, and as a residual learner's base (no update: its
choices bit for bit; a packaged name resolves to it)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchroute.learners.mean_router import MeanScoreRouter
from torchroute.learners.residual import ResidualLinUCB, build_base
from torchroute.types import Context, Problem, TrainSplit

R, K, D = 3, 4, 5
RHO = torch.tensor([0.0, 60.0, 400.0])
PRICE = torch.tensor([1e-4, 5e-4, 2e-3, 4e-3])


def _split(n: int, seed: int, per_query_costs: bool = False) -> TrainSplit:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, D, generator=g)
    scores = (torch.rand(n, K, generator=g) < torch.tensor([0.55, 0.6, 0.7, 0.8])).float()
    costs = PRICE.expand(n, K).clone()
    if per_query_costs:
        costs = costs * (1 + x[:, :1].abs())
    return TrainSplit(x, scores, costs)


def _problem(train: TrainSplit, validation: TrainSplit | None = None) -> Problem:
    names = tuple(f"m{k}" for k in range(K))
    return Problem(R, K, D, RHO, names, prices=PRICE, train=train, validation=validation)


def test_predictions_choices_and_validation_utility_against_numpy():
    train, val = _split(200, 0), _split(80, 1)
    router = MeanScoreRouter(R, K, D, RHO, train, val)
    means = train.scores.numpy().mean(0)
    x = torch.randn(R, 7, D, generator=torch.Generator().manual_seed(2))
    y_hat, c_hat = router.predict(Context(x=x))
    np.testing.assert_allclose(y_hat.numpy(), np.broadcast_to(means, (R, 7, K)), rtol=1e-6)
    np.testing.assert_allclose(c_hat.numpy(), np.broadcast_to(PRICE.numpy(), (R, 7, K)), rtol=1e-6)
    assert torch.equal(router.cost_known, PRICE)  # a price per model is kept exactly
    expected = np.argmax(means[None] - RHO.numpy()[:, None] * PRICE.numpy()[None], -1)  # [R]
    action = router.act(Context(x=x), torch.Generator().manual_seed(0)).action
    assert (action.numpy() == expected[:, None]).all()
    assert len(set(expected.tolist())) == 3  # the three rhos route to three models
    s, c = val.scores.numpy(), val.costs.numpy()
    u = np.clip(s - RHO.numpy()[:, None, None] * c[None], 0, 1)  # [R, m, K]
    reference = u[np.arange(R), :, expected].mean(-1)
    np.testing.assert_allclose(router.val_utility.numpy(), reference, rtol=1e-5)


def test_a_known_price_change_moves_the_choice_at_once():
    router = MeanScoreRouter.from_problem(_problem(_split(200, 0)))
    x = torch.randn(R, 2, D, generator=torch.Generator().manual_seed(3))
    before = router.act(Context(x=x)).action
    cut = PRICE.clone()
    cut[3] *= 0.01  # the dearest (and best) model a hundred times cheaper
    after = router.act(Context(x=x, prices=cut.expand(R, 2, K).clone())).action
    assert (before[2] != 3).all() and (after == 3).all()


def test_per_query_costs_mean_routes_one_model_per_trial_fitted_prices_each_query():
    train = _split(400, 0, per_query_costs=True)
    mean = MeanScoreRouter(R, K, D, RHO, train)
    np.testing.assert_allclose(mean.cost_known.numpy(), train.costs.numpy().mean(0), rtol=1e-6)
    x = torch.randn(R, 50, D, generator=torch.Generator().manual_seed(4))
    action = mean.act(Context(x=x)).action
    assert (action == action[:, :1]).all()  # one model per trial
    fitted = MeanScoreRouter(R, K, D, RHO, train, costs="fitted")
    assert fitted.cost_known is None  # costs vary per query: a ridge of them
    probe = torch.zeros(1, 2, D)
    probe[0, 1, 0] = 4.0  # a query the ridge prices high
    c = fitted.costs(probe)[0]
    assert (c[1] > c[0]).all()
    with pytest.raises(ValueError, match="costs must be one of"):
        MeanScoreRouter(R, K, D, RHO, train, costs="ridge")


@pytest.mark.parametrize("seed", [0, 1])
def test_as_a_residual_base_without_updates_its_choices_bit_for_bit(seed):
    train = _split(200, seed)
    base = MeanScoreRouter(R, K, D, RHO, train).double()
    learner = ResidualLinUCB(R, K, D, MeanScoreRouter(R, K, D, RHO, train), lam=1.0).double()
    g = torch.Generator().manual_seed(5)
    g_base, g_learner = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    for _ in range(100):
        context = Context(x=torch.randn(R, 2, D, generator=g, dtype=torch.float64))
        expected = base.act(context, g_base).action
        assert torch.equal(learner.act(context, g_learner).action, expected)


def test_the_packaged_name_resolves_to_it():
    train, val = _split(200, 0), _split(80, 1)
    router = build_base("mean_router", _problem(train, val), "test")
    assert isinstance(router, MeanScoreRouter)
    assert torch.isfinite(router.val_utility).all()
