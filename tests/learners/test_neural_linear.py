"""Neural-linear learners: ridge heads on a static router's learned representation.

The representation is recomputed by hand from the router's weights; the heads are a numpy
ridge on the warm rows (weighted) plus the online rows (discounted or windowed); several
warm weights are chosen per trial by a brute-force validation loop; a model the base never
saw starts at the mean of the others' predictions with their spread; forgetting returns
to the warm heads, not to 0.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchroute.learners.anchors import KNNScoreRouter, MFScoreRouter, MLPScoreRouter
from torchroute.learners.neural_linear import NeuralLinearTS, NeuralLinearUCB
from torchroute.types import Context, Decision, Feedback, TrainSplit

F64 = torch.float64
R, K, D = 3, 4, 6
RHO = torch.tensor([0.0, 0.3, 1.0])


def _features(n: int, g: torch.Generator) -> torch.Tensor:
    x = torch.nn.functional.normalize(torch.randn(n, D - 1, generator=g, dtype=F64), dim=-1)
    return torch.cat([x, torch.ones(n, 1, dtype=F64)], -1)


def _split(n: int, seed: int) -> TrainSplit:
    g = torch.Generator().manual_seed(seed)
    x = _features(n, g)
    slope = torch.randn(D, K, generator=g, dtype=F64)
    scores = torch.sigmoid(x @ slope + 0.3 * torch.randn(n, K, generator=g, dtype=F64))
    costs = torch.tensor([0.1, 0.2, 0.4, 0.8], dtype=F64).expand(n, K).clone()
    return TrainSplit(x.float(), scores.float(), costs.float())


TRAIN, VAL = _split(80, 0), _split(40, 1)


def _mlp(weight_decay=1e-4, hidden=None) -> MLPScoreRouter:
    router = MLPScoreRouter(R, K, D, RHO, TRAIN, VAL, hidden=8, weight_decay=weight_decay, steps=40)
    return router.hide(hidden)


def _hand_phi(base: MLPScoreRouter, x: np.ndarray) -> np.ndarray:
    """``[relu(x W1 + b1), 1]`` of each trial's chosen candidate, ``x [R, n, D]`` ->
    ``[R, n, 9]``."""
    out = []
    for r in range(R):
        c = int(base.choice[r])
        w1, b1 = base.w1[c].double().numpy(), base.b1[c, 0].double().numpy()
        h = np.maximum(x[r] @ w1 + b1, 0.0)
        out.append(np.concatenate([h, np.ones((h.shape[0], 1))], -1))
    return np.stack(out)


def _stream(learner, rounds: int, seed: int = 3):
    """Forced round-robin arms with random scores; returns ``x [R, T, D]``, arms ``[R, T]``
    and scores ``[R, T, K]`` (numpy) for the reference."""
    g = torch.Generator().manual_seed(seed)
    xs, arms, scores = [], [], []
    for t in range(rounds):
        context = Context(x=_features(R, g).view(R, 1, D))
        arm = ((torch.arange(R) + t) % K)[:, None]
        score = torch.rand(R, 1, K, generator=g, dtype=F64)
        observed = torch.nn.functional.one_hot(arm, K).bool()
        feedback = Feedback(
            reward=torch.zeros(R, 1, K, dtype=F64),  # the heads learn from the score
            observed=observed,
            score=torch.where(observed, score, 0.0),
            only_played=True,
        )
        learner.update(context, Decision(probs=observed.to(F64), action=arm), feedback)
        xs.append(context.x[:, 0].numpy())
        arms.append(arm[:, 0].numpy())
        scores.append(score[:, 0].numpy())
    return np.stack(xs, 1), np.stack(arms, 1), np.stack(scores, 1)


def _hand_heads(base, weight, lam, x=None, arms=None, scores=None, online_w=None):
    """``theta [R, K, p]`` and ``A [R, K, p, p]``: a numpy ridge on the train rows (each of
    weight ``weight``) plus the online rows (weights ``online_w``)."""
    zt = _hand_phi(base, np.broadcast_to(TRAIN.features.double().numpy(), (R, 80, D)))
    yt = TRAIN.scores.double().numpy()
    p = zt.shape[-1]
    theta, precision = np.zeros((R, K, p)), np.zeros((R, K, p, p))
    for r in range(R):
        for k in range(K):
            a = lam * np.eye(p) + weight * zt[r].T @ zt[r]
            b = weight * zt[r].T @ yt[:, k]
            if x is not None:
                rows = arms[r] == k
                z = _hand_phi(base, x[:, rows])[r]
                w = online_w[rows]
                a = a + (z * w[:, None]).T @ z
                b = b + (z * w[:, None]).T @ scores[r, rows, k]
            theta[r, k], precision[r, k] = np.linalg.solve(a, b), a
    return theta, precision


PROBE = Context(x=_features(R * 5, torch.Generator().manual_seed(8)).view(R, 5, D))


@pytest.mark.parametrize(
    ("options", "weights"),
    [
        ({}, lambda t: np.ones(t)),
        ({"gamma": 0.8}, lambda t: 0.8 ** np.arange(t - 1, -1, -1)),
        ({"window": 7}, lambda t: (np.arange(t) >= t - 7).astype(float)),
    ],
    ids=["plain", "discounted", "window"],
)
@pytest.mark.parametrize("cls", [NeuralLinearUCB, NeuralLinearTS])
def test_the_heads_are_a_numpy_ridge_on_the_hand_computed_representation(cls, options, weights):
    lam, w, rounds = 2.0, 0.3, 40
    learner = cls(R, K, D, _mlp(), TRAIN, VAL, head_weight=w, lam=lam, **options).double()
    base = learner.base
    # before any update: the warm heads alone
    theta, precision = _hand_heads(base, w, lam)
    z = _hand_phi(base, PROBE.x.numpy())
    expected = np.einsum("rkp,rbp->rbk", theta, z)
    np.testing.assert_allclose(
        learner.predict_quality(PROBE).numpy(), expected, rtol=1e-6, atol=1e-7
    )
    x, arms, scores = _stream(learner, rounds)
    theta, precision = _hand_heads(base, w, lam, x, arms, scores, weights(rounds))
    expected = np.einsum("rkp,rbp->rbk", theta, z)
    np.testing.assert_allclose(
        learner.predict_quality(PROBE).numpy(), expected, rtol=1e-6, atol=1e-7
    )
    if not options:  # the plain heads' width is sqrt(phi^T A^{-1} phi)
        width = np.sqrt(np.einsum("rbp,rkpq,rbq->rbk", z, np.linalg.inv(precision), z))
        _, got = learner.posterior(learner.phi(PROBE.x))
        np.testing.assert_allclose(got.numpy(), width, rtol=1e-6)


def test_ucb_plays_the_argmax_of_mean_plus_bonus_minus_rho_cost():
    learner = NeuralLinearUCB(R, K, D, _mlp(), TRAIN, VAL, head_weight=0.3, alpha=0.7).double()
    theta, precision = _hand_heads(learner.base, 0.3, 1.0)
    z = _hand_phi(learner.base, PROBE.x.numpy())
    width = np.sqrt(np.einsum("rbp,rkpq,rbq->rbk", z, np.linalg.inv(precision), z))
    cost = np.array([0.1, 0.2, 0.4, 0.8])  # known prices: constant per model on train
    score = np.einsum("rkp,rbp->rbk", theta, z) + 0.7 * width
    score = score - RHO.double().numpy()[:, None, None] * cost
    decision = learner.act(PROBE, torch.Generator().manual_seed(0))
    np.testing.assert_array_equal(decision.action.numpy(), score.argmax(-1))


def test_several_warm_weights_are_chosen_per_trial_by_validation_utility():
    weights = [0.01, 0.3, 10.0]
    learner = NeuralLinearUCB(R, K, D, _mlp(), TRAIN, VAL, head_weight=weights, lam=1.0).double()
    base = learner.base
    zv = _hand_phi(base, np.broadcast_to(VAL.features.double().numpy(), (R, 40, D)))
    y, c = VAL.scores.double().numpy(), VAL.costs.double().numpy()
    best = []
    for r in range(R):
        rho = float(RHO[r])
        utility = np.clip(y - rho * c, 0, 1)
        values = []
        for w in weights:
            theta, _ = _hand_heads(base, w, 1.0)
            pick = (zv[r] @ theta[r].T - rho * c).argmax(-1)
            values.append(utility[np.arange(40), pick].mean())
        best.append(weights[int(np.argmax(values))])  # the first of equal values
    assert learner.head_weight.tolist() == best


def test_a_hidden_model_starts_at_the_mean_of_the_others_with_their_spread():
    hidden = torch.tensor([False, False, True, False]).expand(R, -1)
    lam = 4.0
    learner = NeuralLinearUCB(R, K, D, _mlp(hidden=hidden), TRAIN, VAL, lam=lam).double()
    quality = learner.predict_quality(PROBE)  # [R, 5, K]
    others = quality[..., [0, 1, 3]]
    torch.testing.assert_close(quality[..., 2], others.mean(-1), rtol=0, atol=1e-7)
    # its variance: the others' sample variance at the query plus the ridge's |phi|^2 / lam
    phi = learner.phi(PROBE.x)
    _, width = learner.posterior(phi)
    expected = others.var(-1) + phi.pow(2).sum(-1) / lam
    torch.testing.assert_close(width[..., 2].pow(2), expected, rtol=1e-7, atol=1e-10)
    # the known models' heads are the warm ridge on their own train rows
    theta, _ = _hand_heads(learner.base, 1.0, lam)
    z = _hand_phi(learner.base, PROBE.x.numpy())
    known = np.einsum("rkp,rbp->rbk", theta, z)[..., [0, 1, 3]]
    np.testing.assert_allclose(others.numpy(), known, atol=1e-8)


@pytest.mark.parametrize("options", [{"gamma": 0.9}, {"window": 10}], ids=["gamma", "window"])
def test_forgetting_returns_to_the_warm_heads_not_to_zero(options):
    hidden = torch.tensor([False, False, False, True]).expand(R, -1)
    learner = NeuralLinearUCB(R, K, D, _mlp(hidden=hidden), TRAIN, VAL, **options).double()
    warm = learner.predict_quality(PROBE).clone()
    assert warm.abs().amin() > 0.05  # the warm heads (and the new model's mean) are not 0
    _stream(learner, 40)
    assert (learner.predict_quality(PROBE) - warm).abs().amax() > 0.05  # it learnt
    nothing = Feedback(
        reward=torch.zeros(R, 1, K, dtype=F64), observed=torch.zeros(R, 1, K, dtype=torch.bool)
    )
    context = Context(x=_features(R, torch.Generator().manual_seed(1)).view(R, 1, D))
    for _ in range(400):
        learner.update(context, learner.act(context), nothing)
    torch.testing.assert_close(learner.predict_quality(PROBE), warm, rtol=0, atol=1e-8)


def test_the_representations_are_each_trials_chosen_candidates_hidden_layer():
    mlp = _mlp(weight_decay=[1e-5, 1e-1, 3.0])
    mf = MFScoreRouter(R, K, D, RHO, TRAIN, VAL, rank=[2, 5], steps=40)
    x = PROBE.x.float()
    for router in (mlp, mf):
        assert router.choice.numel() == R
    expected_mlp = _hand_phi(mlp, x.double().numpy())[..., :-1]
    np.testing.assert_allclose(mlp.representation(x).numpy(), expected_mlp, rtol=1e-5, atol=1e-6)
    for r in range(R):
        c, rank = int(mf.choice[r]), [2, 5][int(mf.choice[r])]
        z = x[r].double().numpy() @ mf.p[c].double().numpy()
        z[:, rank:] = 0.0  # the candidate's rank
        np.testing.assert_allclose(mf.representation(x)[r].numpy(), z, rtol=1e-5, atol=1e-6)


def test_an_mf_base_gives_heads_on_its_query_vectors():
    mf = MFScoreRouter(R, K, D, RHO, TRAIN, VAL, rank=3, steps=40)
    learner = NeuralLinearTS(R, K, D, mf, TRAIN, VAL, v=0.0, head_weight=0.5).double()
    z = torch.cat(
        [mf.representation(PROBE.x), torch.ones(R, 5, 1, dtype=F64)], -1
    )  # mf is double now
    zt = torch.cat([TRAIN.features.double() @ mf.p[0].double(), torch.ones(80, 1, dtype=F64)], -1)
    a = torch.eye(4, dtype=F64) + 0.5 * zt.T @ zt
    theta = torch.linalg.solve(a, 0.5 * zt.T @ TRAIN.scores.double())  # [p, K]
    torch.testing.assert_close(learner.predict_quality(PROBE), z @ theta, rtol=1e-5, atol=1e-6)


def test_a_base_without_a_representation_is_refused():
    knn = KNNScoreRouter(R, K, D, RHO, TRAIN, VAL, k=3)
    with pytest.raises(ValueError, match=r"^NeuralLinearUCB: base must be a router with a learned"):
        NeuralLinearUCB(R, K, D, knn, TRAIN, VAL)
    with pytest.raises(ValueError, match=r"^NeuralLinearTS: head_weight must be > 0"):
        NeuralLinearTS(R, K, D, _mlp(), TRAIN, VAL, head_weight=[1.0, 0.0])


@pytest.mark.parametrize("preset", ["routerbench", "openllm", "routerdc"])
def test_the_leaderboard_presets_run_them_on_their_own_mlp_router(preset):
    from omegaconf import OmegaConf

    from torchroute.configs_path import compose_config

    cfg = compose_config("simulate", [f"experiment={preset}_leaderboard", "out_dir=x"])
    learners = OmegaConf.to_container(cfg.learners, resolve=True)
    targets = {
        "neural_linear_ucb": "torchroute.learners.neural_linear.NeuralLinearUCB.from_problem",
        "neural_linear_ts": "torchroute.learners.neural_linear.NeuralLinearTS.from_problem",
        "residual_squarecb": "torchroute.learners.residual_squarecb.ResidualSquareCB.from_problem",
    }
    for name, target in targets.items():
        assert learners[name]["_target_"] == target
        base = learners[name]["base"]
        if name == "residual_squarecb":
            # chosen on validation among the run's static routers, the MLP router first
            # (replayed on RouterBench; elsewhere each regime's baseline router, as_baseline)
            assert base[0] == learners["mlp"] and learners["knn_val"] in base
        else:
            assert base == learners["mlp"]  # the run's MLP router's config


def _new_model_run(new_quality: float, rounds: int = 400) -> torch.Tensor:
    """Arms 0, 1 known to the base (quality 0.6 and 0.4 plus a small x-term), arm 2 a new
    model it never saw; NeuralLinearUCB plays 400 rounds; returns the arms ``[T, 4]``."""
    g = torch.Generator().manual_seed(0)
    n = 200
    x = _features(n, g)
    slope = torch.randn(D, 3, generator=g, dtype=F64) * 0.05
    slope[-1] = torch.tensor([0.6, 0.4, new_quality], dtype=F64)
    scores = (x @ slope + 0.1 * torch.randn(n, 3, generator=g, dtype=F64)).clamp(0, 1)
    scores[:, 2] = 0.0  # a hidden arm's train scores are unknown
    train = TrainSplit(x.float(), scores.float(), torch.zeros(n, 3))
    hidden = torch.tensor([[False, False, True]]).expand(4, -1)
    base = MLPScoreRouter(4, 3, D, torch.zeros(4), train, hidden=16, weight_decay=1e-4, steps=200)
    learner = NeuralLinearUCB(4, 3, D, base.hide(hidden), train, alpha=0.5, head_weight=0.1)
    learner = learner.double()
    stream = torch.Generator().manual_seed(1)
    played = []
    for _ in range(rounds):
        context = Context(x=_features(4, stream).view(4, 1, D))
        decision = learner.act(context, stream)
        score = context.x @ slope + 0.1 * torch.randn(4, 1, 3, generator=stream, dtype=F64)
        observed = torch.nn.functional.one_hot(decision.action, 3).bool()
        feedback = Feedback(
            reward=torch.where(observed, score.clamp(0, 1), 0.0),
            observed=observed,
            score=torch.where(observed, score, 0.0),
            only_played=True,
        )
        learner.update(context, decision, feedback)
        played.append(decision.action[:, 0])
    return torch.stack(played)


def test_a_new_model_that_is_no_better_is_tried_then_abandoned():
    played = _new_model_run(new_quality=0.3)
    assert (played == 2).any(0).all()  # every trial tried it
    assert (played[-200:] == 2).double().mean() < 0.05


def test_a_new_model_that_is_better_is_adopted():
    played = _new_model_run(new_quality=0.85)
    assert (played[-200:] == 2).double().mean() > 0.9
