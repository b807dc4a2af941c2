"""Static routers: kNN against a brute-force numpy kNN, the regressor's argmax rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from torchroute.learners.static import KNNRouter, RegressorRouter
from torchroute.types import Context, Feedback

R, K = 3, 4
RHO = torch.tensor([0.0, 50.0, 500.0])


def _numpy_knn(train_x, train_y, train_c, queries, rho, k=3):
    tx = train_x / np.linalg.norm(train_x, axis=1, keepdims=True)
    q = queries / np.linalg.norm(queries, axis=-1, keepdims=True)
    actions = np.zeros(queries.shape[:2], dtype=np.int64)
    for r in range(queries.shape[0]):
        for b in range(queries.shape[1]):
            nn_idx = np.argsort(-(tx @ q[r, b]))[:k]
            value = train_y[nn_idx].mean(0) - rho[r] * train_c[nn_idx].mean(0)
            actions[r, b] = int(np.argmax(value))
    return actions


def test_knn_matches_brute_force():
    rng = np.random.default_rng(0)
    train_x = rng.normal(size=(60, 5))
    train_y = rng.uniform(size=(60, K))
    train_c = rng.uniform(size=(60, K)) * 1e-3
    queries = rng.normal(size=(R, 7, 5))
    router = KNNRouter(
        R, K, RHO, torch.tensor(train_x), torch.tensor(train_y), torch.tensor(train_c), k=3
    )
    dec = router.act(
        Context(torch.tensor(queries, dtype=torch.float32)), torch.Generator().manual_seed(0)
    )
    expected = _numpy_knn(train_x, train_y, train_c, queries, RHO.numpy())
    np.testing.assert_array_equal(dec.action.numpy(), expected)
    assert torch.equal(dec.probs, torch.nn.functional.one_hot(dec.action, K).float())
    # index mode: the table's features looked up by row give the same decisions
    features = torch.tensor(queries.reshape(-1, 5), dtype=torch.float32)
    index = torch.arange(R * 7).reshape(R, 7)
    by_index = KNNRouter(
        R,
        K,
        RHO,
        torch.tensor(train_x),
        torch.tensor(train_y),
        torch.tensor(train_c),
        features=features,
    )
    ctx = Context(torch.zeros(R, 7, 2), index=index)  # x is ignored
    assert torch.equal(by_index.act(ctx).action, dec.action)


def test_knn_neighbours_are_cosine_nearest():
    train_x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]])
    router = KNNRouter(1, 2, torch.zeros(1), train_x, torch.rand(4, 2), torch.rand(4, 2), k=2)
    idx = router.neighbours(Context(torch.tensor([[[10.0, 1.0]]])))
    assert sorted(idx.flatten().tolist()) == [0, 2]


class _Oracle(nn.Module):
    def __init__(self, y: Tensor, c: Tensor) -> None:
        super().__init__()
        self.y, self.c = y, c

    def accuracy(self, e: Tensor) -> Tensor:
        return self.y[e[:, 0].long()]

    def cost(self, e: Tensor) -> Tensor:
        return self.c[e[:, 0].long()]


def test_regressor_picks_argmax_of_utility():
    gen = torch.Generator().manual_seed(0)
    n = 10
    y_hat = torch.rand(n, K, generator=gen)
    c_hat = torch.rand(n, K, generator=gen) * 1e-3
    index = torch.randint(0, n, (R, 5), generator=gen)
    expected = (y_hat[index] - RHO[:, None, None] * c_hat[index]).argmax(-1)
    router = RegressorRouter(R, K, RHO, predicted_scores=y_hat, predicted_costs=c_hat)
    ctx = Context(torch.zeros(R, 5, 3), index=index)
    assert torch.equal(router.act(ctx).action, expected)
    # the same through an oracle module reading context.embedding (the stand-in keys on
    # embedding[..., 0]); the bandit features x are not read
    with_oracle = RegressorRouter(R, K, RHO, oracle=_Oracle(y_hat, c_hat))
    emb = torch.zeros(R, 5, 3)
    emb[..., 0] = index.float()
    ctx = Context(torch.full((R, 5, 2), float("nan")), embedding=emb)
    assert torch.equal(with_oracle.act(ctx).action, expected)
    with pytest.raises(ValueError, match=r"Context\.embedding"):
        with_oracle.act(Context(emb))
    assert not torch.equal(expected[0], expected[2])  # rho matters in this instance


def test_static_update_only_ticks_and_checks():
    router = RegressorRouter(
        R, K, RHO, predicted_scores=torch.rand(4, K), predicted_costs=torch.rand(4, K)
    )
    before = {k: v.clone() for k, v in router.state_dict().items() if k != "rounds"}
    ctx = Context(torch.zeros(R, 1, 2), index=torch.zeros(R, 1, dtype=torch.long))
    dec = router.act(ctx)
    fb = Feedback(reward=torch.rand(R, 1, K), observed=torch.ones(R, 1, K, dtype=torch.bool))
    assert router.update(ctx, dec, fb) == {}
    assert router.rounds.tolist() == [1] * R
    for k, v in before.items():
        assert torch.equal(router.state_dict()[k], v)
    with pytest.raises(ValueError, match="either oracle"):
        RegressorRouter(R, K, RHO)
    with pytest.raises(ValueError, match="rho"):
        RegressorRouter(
            R,
            K,
            torch.zeros(2),
            predicted_scores=torch.rand(4, K),
            predicted_costs=torch.rand(4, K),
        )
    with pytest.raises(ValueError, match="k must be"):
        KNNRouter(R, K, RHO, torch.rand(2, 3), torch.rand(2, K), torch.rand(2, K), k=3)


def _cheap_and_strong_table():
    """Three arms whose best one flips with rho (train means worked out by hand).

    arm 0 "cheap": scores 0.5, 0.7, cost 1e-5; arm 1 "strong": 0.9, 1.0, cost 1e-3;
    arm 2 "middle": 0.85, 0.95, cost 2e-4. Two train rows, two test rows.
    """
    from torchroute.data.table import RoutingTable

    scores = torch.tensor([[0.5, 0.9, 0.85], [0.7, 1.0, 0.95]] * 2, dtype=torch.float64)
    costs = torch.tensor([[1e-5, 1e-3, 2e-4]] * 4, dtype=torch.float64)
    return RoutingTable(
        scores=scores,
        costs=costs,
        arm_names=["cheap", "strong", "middle"],
        query_ids=["q0", "q1", "q2", "q3"],
        split=["train", "train", "test", "test"],
        embeddings=torch.eye(4, 2),
    )


def test_best_single_arm_follows_rho_on_a_hand_made_table():
    """Mean clipped train utility per arm, by hand:

    rho = 0:    cheap 0.6,   strong 0.95,               middle 0.9    -> strong
    rho = 500:  cheap 0.595, strong (0.4 + 0.5)/2 = 0.45, middle 0.8  -> middle
    rho = 3000: cheap 0.57,  strong 0 (both clipped),   middle 0.3    -> cheap
    """
    from torchroute.envs import SingleChoiceEnv
    from torchroute.learners import BestSingleArm

    env = SingleChoiceEnv(
        _cheap_and_strong_table(), rho=[0.0, 500.0, 3000.0], seeds=[0, 0, 0], dtype=torch.float64
    )
    learner = BestSingleArm.from_problem(env.problem())
    assert learner.arm.tolist() == [1, 2, 0]
    for t in range(env.horizon):
        decision = learner.act(env.context(t))
        assert decision.action[:, 0].tolist() == [1, 2, 0]
        expected = torch.eye(3, dtype=torch.float64)[[1, 2, 0]][:, None, :]
        assert torch.equal(decision.probs, expected)
    # built directly from a utility table: the largest entry of each row
    direct = BestSingleArm(2, 3, torch.tensor([[0.1, 0.7, 0.3], [0.9, 0.2, 0.4]]))
    assert direct.arm.tolist() == [1, 0]
    with pytest.raises(ValueError, match=r"must be \[R=2, K=3\], got \(3, 2\)"):
        BestSingleArm(2, 3, torch.zeros(3, 2))
    with pytest.raises(ValueError, match="train_mean_utility must be finite"):
        BestSingleArm(2, 3, torch.tensor([[0.1, float("nan"), 0.3], [0.9, 0.2, 0.4]]))


def test_regressor_uses_a_known_per_model_price_instead_of_its_cost_head():
    from torchroute.types import Problem, TrainSplit

    gen = torch.Generator().manual_seed(1)
    n = 10
    y_hat = torch.rand(n, K, generator=gen)
    wrong = torch.rand(n, K, generator=gen)  # a cost head far from the price
    price = torch.tensor([1e-4, 1e-3, 2e-3, 5e-4])
    train = TrainSplit(torch.zeros(6, 3), torch.rand(6, K), price.expand(6, K).clone())
    problem = Problem(R, K, 3, RHO, tuple("abcd"), embed_dim=3, train=train)
    router = RegressorRouter.from_problem(problem, oracle=_Oracle(y_hat, wrong), costs="known")
    index = torch.randint(0, n, (R, 5), generator=gen)
    emb = torch.zeros(R, 5, 3)
    emb[..., 0] = index.float()
    expected = (y_hat[index] - RHO[:, None, None] * price).argmax(-1)
    assert torch.equal(router.act(Context(torch.zeros(R, 5, 3), embedding=emb)).action, expected)
    varying = TrainSplit(torch.zeros(6, 3), torch.rand(6, K), torch.rand(6, K))
    with pytest.raises(ValueError, match="constant per model"):
        RegressorRouter.from_problem(
            Problem(R, K, 3, RHO, tuple("abcd"), embed_dim=3, train=varying),
            oracle=_Oracle(y_hat, wrong),
            costs="known",
        )


def test_best_single_arm_reports_its_validation_utility_in_the_results():
    """The train rows choose the arm (strong, middle, cheap, as above); two val rows, by hand:

    rho = 0:    strong (0.8 + 0.9) / 2                      = 0.85
    rho = 500:  middle (0.7 - 0.1 + 0.5 - 0.1) / 2          = 0.5
    rho = 3000: cheap  (0.6 - 0.03 + 0.4 - 0.03) / 2        = 0.47
    """
    from dataclasses import replace

    from torchroute.envs import SingleChoiceEnv
    from torchroute.learners import BestSingleArm
    from torchroute.loop import simulate

    base = _cheap_and_strong_table()
    scores = torch.cat([base.scores, torch.tensor([[0.6, 0.8, 0.7], [0.4, 0.9, 0.5]])])
    table = replace(
        base,
        scores=scores.double(),
        costs=torch.cat([base.costs, base.costs[:2]]),
        query_ids=[*base.query_ids, "v0", "v1"],
        split=[*base.split, "val", "val"],
        embeddings=torch.eye(6, 2),
    )
    env = SingleChoiceEnv(table, rho=[0.0, 500.0, 3000.0], seeds=[0, 0, 0], dtype=torch.float64)
    learner = BestSingleArm.from_problem(env.problem())
    assert learner.arm.tolist() == [1, 2, 0]
    summary = simulate(learner, env).summary
    np.testing.assert_allclose(summary["val_utility"], [0.85, 0.5, 0.47], atol=1e-6)
    # without a validation split there is nothing to report
    no_val = SingleChoiceEnv(base, rho=[0.0, 500.0, 3000.0], seeds=[0, 0, 0])
    assert BestSingleArm.from_problem(no_val.problem()).val_utility.isnan().all()
