"""Static anchor routers against independent references: a scipy logistic fit, a numpy kNN
with the validation choice made by hand, numpy ridge for the costs, and fits that must beat
the per-model mean on data with a known structure."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from torchroute.learners.anchors import (
    BestArmClassifier,
    KNNScoreRouter,
    LogisticScoreRouter,
    MFScoreRouter,
    MLPScoreRouter,
    known_costs,
)
from torchroute.types import Context, TrainSplit

K, D = 3, 4
RHO = torch.tensor([0.0, 400.0])


def _split(n: int, seed: int, constant_costs: bool = True) -> TrainSplit:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, D, generator=g)
    truth = torch.tensor([[2.0, -1.0, 0.0], [0.0, 2.0, -1.0], [-1.0, 0.0, 2.0], [0.5, 0.5, 0.5]])
    p = torch.sigmoid(x @ truth)
    scores = (torch.rand(n, K, generator=g) < p).float()
    price = torch.tensor([1e-4, 5e-4, 2e-3])
    costs = price.expand(n, K).clone()
    if not constant_costs:
        costs = costs * (1 + x[:, :1].abs())
    return TrainSplit(x, scores, costs)


def test_known_costs_only_when_constant_per_model():
    assert torch.equal(
        known_costs(torch.tensor([[1.0, 2.0], [1.0, 2.0]])), torch.tensor([1.0, 2.0])
    )
    assert known_costs(torch.tensor([[1.0, 2.0], [1.0, 2.5]])) is None


def test_logistic_matches_a_scipy_fit_of_the_same_objective():
    train = _split(300, 0)
    lam = 1e-3
    router = LogisticScoreRouter(2, K, D, RHO, train, l2=lam, steps=1500, lr=0.05)
    x = np.hstack([train.features.numpy(), np.ones((300, 1))]).astype(np.float64)
    y = train.scores.numpy().astype(np.float64)

    def objective(flat):
        w = flat.reshape(D + 1, K)
        z = x @ w
        bce = np.logaddexp(0, z) - y * z
        return bce.mean() + lam * (w[:-1] ** 2).sum()

    w_ref = minimize(objective, np.zeros((D + 1) * K), method="L-BFGS-B", tol=1e-12).x
    probe = torch.randn(50, D, generator=torch.Generator().manual_seed(9))
    ref = 1 / (
        1 + np.exp(-(np.hstack([probe.numpy(), np.ones((50, 1))]) @ w_ref.reshape(D + 1, K)))
    )
    np.testing.assert_allclose(router.candidate_scores(probe)[0].numpy(), ref, atol=5e-3)
    # the rule: argmax of predicted score - rho x known price
    ctx = Context(probe[None].expand(2, -1, -1).clone())
    action = router.act(ctx).action.numpy()
    price = np.array([1e-4, 5e-4, 2e-3])
    for t, rho in enumerate(RHO.tolist()):
        np.testing.assert_array_equal(action[t], (ref - rho * price).argmax(1))


def test_costs_that_vary_are_a_ridge_of_the_features():
    train = _split(200, 1, constant_costs=False)
    router = LogisticScoreRouter(2, K, D, RHO, train, l2=1e-3, steps=5)
    assert router.cost_known is None
    x = np.hstack([train.features.numpy(), np.ones((200, 1))]).astype(np.float64)
    w = np.linalg.solve(x.T @ x + np.eye(D + 1), x.T @ train.costs.numpy().astype(np.float64))
    probe = torch.randn(7, D)
    expected = np.hstack([probe.numpy(), np.ones((7, 1))]) @ w
    np.testing.assert_allclose(router.costs(probe).numpy(), expected, rtol=1e-4, atol=1e-9)


def test_knn_k_is_chosen_per_trial_on_validation_by_hand():
    train, val = _split(200, 2), _split(60, 3)
    ks = (1, 5, 40)
    router = KNNScoreRouter(2, K, D, RHO, train, val, k=ks)
    tx = train.features.numpy() / np.linalg.norm(train.features.numpy(), axis=1, keepdims=True)
    vx = val.features.numpy() / np.linalg.norm(val.features.numpy(), axis=1, keepdims=True)
    order = np.argsort(-(vx @ tx.T), axis=1, kind="stable")
    price = val.costs[0].numpy()
    for t, rho in enumerate(RHO.tolist()):
        u = np.clip(val.scores.numpy() - rho * val.costs.numpy(), 0, 1)
        values = []
        for k in ks:
            pred = train.scores.numpy()[order[:, :k]].mean(1)  # [m, K]
            values.append(u[np.arange(60), (pred - rho * price).argmax(1)].mean())
        assert int(router.choice[t]) == int(np.argmax(values))
        # val_utility: the chosen k's mean validation utility, the results column
        assert router.result_columns()["val_utility"][t].item() == pytest.approx(
            max(values), abs=1e-6
        )
    # the predictions of each k are the numpy means of the k nearest
    got = router.candidate_scores(val.features)
    for c, k in enumerate(ks):
        np.testing.assert_allclose(
            got[c].numpy(), train.scores.numpy()[order[:, :k]].mean(1), atol=1e-6
        )


def test_without_a_validation_split_a_fifth_of_train_is_held_out_for_the_choice():
    train = _split(50, 4)
    router = KNNScoreRouter(2, K, D, RHO, train, None, k=[1, 3])
    assert router.train_scores.shape[0] == 40  # fitted on the other 40 rows
    held = torch.randperm(50, generator=torch.Generator().manual_seed(0))[40:]
    val = TrainSplit(train.features[held], train.scores[held], train.costs[held])
    fit = torch.randperm(50, generator=torch.Generator().manual_seed(0))[:40]
    fit_split = TrainSplit(train.features[fit], train.scores[fit], train.costs[fit])
    same = KNNScoreRouter(2, K, D, RHO, fit_split, val, k=[1, 3])
    assert torch.equal(router.choice, same.choice)
    # its val_utility is measured on the held-out rows
    assert torch.equal(router.val_utility, same.val_utility)
    assert not router.val_utility.isnan().any()
    single = KNNScoreRouter(2, K, D, RHO, train, None, k=3)
    assert single.train_scores.shape[0] == 50
    assert single.val_utility.isnan().all()  # nothing held out, nothing measured


def test_a_single_candidate_still_reports_its_validation_utility_in_numpy():
    train, val = _split(120, 12), _split(40, 13)
    router = KNNScoreRouter(2, K, D, RHO, train, val, k=7)
    tx = train.features.numpy() / np.linalg.norm(train.features.numpy(), axis=1, keepdims=True)
    vx = val.features.numpy() / np.linalg.norm(val.features.numpy(), axis=1, keepdims=True)
    nearest = np.argsort(-(vx @ tx.T), axis=1, kind="stable")[:, :7]
    pred = train.scores.numpy()[nearest].mean(1)
    for t, rho in enumerate(RHO.tolist()):
        u = np.clip(val.scores.numpy() - rho * val.costs.numpy(), 0, 1)
        arm = (pred - rho * val.costs[0].numpy()).argmax(1)
        assert router.val_utility[t].item() == pytest.approx(u[np.arange(40), arm].mean(), abs=1e-6)


def test_best_arm_classifier_val_utility_is_its_chosen_classifiers_in_numpy():
    train, val = _split(200, 14), _split(50, 15)
    router = BestArmClassifier(2, K, D, RHO, train, val, l2=[1e-5, 1.0], steps=60)
    x = np.hstack([val.features.numpy(), np.ones((50, 1))])
    for t, rho in enumerate(RHO.tolist()):
        u = np.clip(val.scores.numpy() - rho * val.costs.numpy(), 0, 1)
        means = [
            u[np.arange(50), (x @ router.weights[t, c].numpy()).argmax(1)].mean() for c in (0, 1)
        ]
        assert int(router.choice[t]) == int(np.argmax(means))
        assert router.val_utility[t].item() == pytest.approx(max(means), abs=1e-6)


@pytest.mark.parametrize("cls", [MLPScoreRouter, MFScoreRouter])
def test_score_predictors_beat_the_per_model_mean(cls):
    train, test = _split(1500, 5), _split(500, 6)
    router = cls(2, K, D, RHO, train, _split(300, 7))
    pred = router.candidate_scores(test.features)[router.choice[0]]
    truth = torch.sigmoid(
        test.features
        @ torch.tensor([[2.0, -1.0, 0.0], [0.0, 2.0, -1.0], [-1.0, 0.0, 2.0], [0.5, 0.5, 0.5]])
    )
    err = (pred - truth).pow(2).mean()
    base = (train.scores.mean(0) - truth).pow(2).mean()
    assert err < 0.3 * base


def test_best_arm_classifier_learns_each_trials_best_arm():
    g = torch.Generator().manual_seed(8)
    x = torch.randn(800, D, generator=g)
    best = x[:, :K].argmax(1)  # arm k wins where x_k is the largest of the first K features
    scores = torch.nn.functional.one_hot(best, K).float()
    costs = torch.tensor([0.0, 0.0, 1.0]).expand(800, K).clone()  # arm 2 unaffordable at rho=400
    split = TrainSplit(x, scores, costs)
    router = BestArmClassifier(2, K, D, RHO, split, l2=1e-5, steps=400)
    probe = torch.randn(300, D, generator=g)
    action = router.act(Context(probe[None].expand(2, -1, -1).clone())).action
    assert (action[0] == probe[:, :K].argmax(1)).float().mean() > 0.9  # rho = 0: the best arm
    assert (action[1] != 2).all()  # rho = 400: utility of arm 2 is 0 everywhere


def test_best_arm_classifier_never_plays_a_hidden_model_it_would_pick():
    """Arm 0 is the best arm where x_0 is the largest feature (a third of the probes); hidden
    in trial 0 only, that trial plays the best of the other two there, trial 1 keeps it."""
    g = torch.Generator().manual_seed(12)
    x = torch.randn(800, D, generator=g)
    scores = torch.nn.functional.one_hot(x[:, :K].argmax(1), K).float()
    split = TrainSplit(x, scores, torch.zeros(800, K))
    router = BestArmClassifier(2, K, D, torch.zeros(2), split, l2=1e-5, steps=400)
    router.hide(torch.tensor([[True, False, False], [False, False, False]]))
    probe = torch.randn(300, D, generator=g)
    action = router.act(Context(probe[None].expand(2, -1, -1).clone())).action
    assert (action[0] != 0).all()
    best_known = 1 + probe[:, 1:K].argmax(1)  # the better of arms 1 and 2
    assert (action[0] == best_known).float().mean() > 0.9
    assert (action[1] == 0).float().mean() > 0.25  # unhidden, arm 0 is played where it wins


def test_a_hidden_model_is_never_routed_to():
    """A model absent when the router was fitted (Problem.hidden_arms): its score is unknown."""
    import dataclasses

    from torchroute.types import Problem

    train = _split(300, 10)
    problem = Problem(2, K, D, RHO, ("a", "b", "c"), train=train, validation=_split(60, 11))
    problem = dataclasses.replace(problem, hidden_arms=torch.tensor([[True, False, False]] * 2))
    router = LogisticScoreRouter.from_problem(problem, l2=1e-3, steps=50)
    probe = torch.randn(2, 200, D)
    # predicted score 0: at rho = 0 every known model (score > 0) looks better
    assert (router.act(Context(probe)).action[0] != 0).all()
    assert torch.equal(router.costs(probe[0])[:, 0], train.costs[:200, 0])  # its price is known
