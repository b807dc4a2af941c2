"""Residual learners: a static router plus an online linear correction per model.

Without an update they make the base router's choices bit for bit; the correction is a
ridge regression on ``score - base_k(x)`` (checked against numpy, with its discount or
window); forgetting returns to the base router; a model the base never saw is tried, then
kept only when it is better.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchroute.learners.anchors import KNNScoreRouter, MLPScoreRouter
from torchroute.learners.residual import ResidualLinTS, ResidualLinUCB
from torchroute.types import Context, Decision, Feedback, TrainSplit

F64 = torch.float64
R, K, D = 3, 4, 6


def _features(n: int, g: torch.Generator) -> torch.Tensor:
    """Unit rows plus a bias column, as the run's features: ``[n, D]``."""
    x = torch.nn.functional.normalize(torch.randn(n, D - 1, generator=g, dtype=F64), dim=-1)
    return torch.cat([x, torch.ones(n, 1, dtype=F64)], -1)


def _train(binary: bool, g: torch.Generator, n: int = 60) -> TrainSplit:
    x = _features(n, g)
    scores = torch.rand(n, K, generator=g, dtype=F64)
    if binary:  # kNN means of 0/1 scores tie often: the tie-breaks are compared too
        scores = (scores > 0.5).to(F64)
    costs = torch.tensor([0.1, 0.2, 0.4, 0.8], dtype=F64).expand(n, K).clone()
    return TrainSplit(x.float(), scores.float(), costs.float())


def _base(kind: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    rho = torch.tensor([0.0, 0.3, 1.0])
    if kind == "knn":
        return KNNScoreRouter(R, K, D, rho, _train(True, g), k=3)
    return MLPScoreRouter(R, K, D, rho, _train(False, g), hidden=8, weight_decay=1e-4, steps=30)


VARIANTS = {
    "ucb": lambda base: ResidualLinUCB(R, K, D, base, alpha=1.0, lam=1.0),
    "ucb-discounted": lambda base: ResidualLinUCB(R, K, D, base, lam=1.0, gamma=0.9),
    "ucb-window": lambda base: ResidualLinUCB(R, K, D, base, lam=1.0, window=5),
    "ucb-bias": lambda base: ResidualLinUCB(
        R, K, D, base, _train(False, torch.Generator().manual_seed(1)), lam=100.0, projection=0
    ),
    "ts-greedy": lambda base: ResidualLinTS(R, K, D, base, v=0.0, lam=1.0),
    "ts-greedy-discounted": lambda base: ResidualLinTS(R, K, D, base, v=0.0, gamma=0.9),
}


@pytest.mark.parametrize("kind", ["mlp", "knn"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_without_updates_it_makes_the_base_routers_choices_bit_for_bit(kind, variant):
    base = _base(kind).double()
    learner = VARIANTS[variant](_base(kind)).double()
    g = torch.Generator().manual_seed(5)
    g_base, g_learner = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    ties = 0
    for _ in range(300):
        context = Context(x=_features(R * 2, g).view(R, 2, D))
        expected = base.act(context, g_base).action
        assert torch.equal(learner.act(context, g_learner).action, expected)
        y, c = base.predict(context)
        value = y - base.rho[:, None, None] * c
        ties += int(((value == value.amax(-1, keepdim=True)).sum(-1) > 1).sum())
    if kind == "knn":
        assert ties > 10  # the random tie-breaks were compared as well


def _stream(learner, base, rounds: int, seed: int = 3):
    """Forced arms (round robin, shifted per trial) with scores ``[R, 1, K]``; returns the
    contexts, arms and scores as numpy arrays for the reference."""
    g = torch.Generator().manual_seed(seed)
    xs, arms, scores = [], [], []
    for t in range(rounds):
        context = Context(x=_features(R, g).view(R, 1, D))
        arm = ((torch.arange(R) + t) % K)[:, None]
        score = torch.rand(R, 1, K, generator=g, dtype=F64)
        observed = torch.nn.functional.one_hot(arm, K).bool()
        feedback = Feedback(
            reward=torch.zeros(R, 1, K, dtype=F64),  # the correction learns from the score
            observed=observed,
            score=torch.where(observed, score, 0.0),
            cost=torch.zeros(R, 1, K, dtype=F64),
            only_played=True,
        )
        decision = Decision(probs=observed.to(F64), action=arm)
        learner.update(context, decision, feedback)
        xs.append(context.x[:, 0].numpy())
        arms.append(arm[:, 0].numpy())
        scores.append(score[:, 0].numpy() - base.predict(context)[0][:, 0].numpy())
    return np.stack(xs, 1), np.stack(arms, 1), np.stack(scores, 1)  # [R, T, .]


def _numpy_ridge(x, arms, residual, lam, weights):
    """``theta [R, K, D]``: ridge on the weighted residuals of each arm's rounds."""
    theta = np.zeros((R, K, D))
    for r in range(R):
        for k in range(K):
            rows = arms[r] == k
            w = weights[rows]
            xr, yr = x[r, rows], residual[r, rows, k]
            a = lam * np.eye(D) + (xr * w[:, None]).T @ xr
            theta[r, k] = np.linalg.solve(a, (xr * w[:, None]).T @ yr)
    return theta


@pytest.mark.parametrize(
    ("options", "weights"),
    [
        ({}, lambda t: np.ones(t)),
        ({"gamma": 0.8}, lambda t: 0.8 ** np.arange(t - 1, -1, -1)),
        ({"window": 7}, lambda t: (np.arange(t) >= t - 7).astype(float)),
    ],
    ids=["plain", "discounted", "window"],
)
@pytest.mark.parametrize("cls", [ResidualLinUCB, ResidualLinTS])
def test_the_correction_is_a_numpy_ridge_on_the_residuals(cls, options, weights):
    lam, rounds = 2.0, 40
    base = _base("mlp").double()
    learner = cls(R, K, D, _base("mlp"), lam=lam, **options).double()
    x, arms, residual = _stream(learner, base, rounds)
    theta = _numpy_ridge(x, arms, residual, lam, weights(rounds))
    probe = Context(x=_features(R * 5, torch.Generator().manual_seed(8)).view(R, 5, D))
    expected = base.predict(probe)[0].numpy() + np.einsum("rkd,rbd->rbk", theta, probe.x.numpy())
    np.testing.assert_allclose(learner.predict_quality(probe).numpy(), expected, atol=1e-9)


@pytest.mark.parametrize("rank", [0, 2])
def test_a_projected_correction_is_a_numpy_ridge_on_the_principal_directions(rank):
    lam, rounds = 2.0, 30
    base = _base("mlp").double()
    train = _train(False, torch.Generator().manual_seed(0))  # the base's own train rows
    learner = ResidualLinUCB(R, K, D, _base("mlp"), train, lam=lam, projection=rank).double()
    x, arms, residual = _stream(learner, base, rounds)
    xt = train.features.double().numpy()
    u = np.linalg.svd(xt - xt.mean(0), full_matrices=False)[2][:rank].T  # [D, rank]

    def phi(v):
        return np.concatenate([v @ u, np.ones((*v.shape[:-1], 1))], -1)

    theta = np.zeros((R, K, rank + 1))
    for r in range(R):
        for k in range(K):
            rows = arms[r] == k
            z, y = phi(x[r, rows]), residual[r, rows, k]
            theta[r, k] = np.linalg.solve(lam * np.eye(rank + 1) + z.T @ z, z.T @ y)
    probe = Context(x=_features(R * 5, torch.Generator().manual_seed(8)).view(R, 5, D))
    expected = base.predict(probe)[0].numpy() + np.einsum(
        "rkp,rbp->rbk", theta, phi(probe.x.numpy())
    )
    np.testing.assert_allclose(learner.predict_quality(probe).numpy(), expected, atol=1e-6)


def test_a_discounted_correction_decays_to_the_base_router():
    base = _base("mlp").double()
    learner = ResidualLinUCB(R, K, D, _base("mlp"), lam=1.0, gamma=0.9).double()
    _stream(learner, base, 30)
    probe = Context(x=_features(R * 5, torch.Generator().manual_seed(8)).view(R, 5, D))
    moved = (learner.predict_quality(probe) - base.predict(probe)[0]).abs().amax()
    assert moved > 0.05  # it learnt a correction
    observed = torch.zeros(R, 1, K, dtype=torch.bool)  # rounds in which nothing is observed
    nothing = Feedback(reward=torch.zeros(R, 1, K, dtype=F64), observed=observed)
    for _ in range(300):
        context = Context(x=_features(R, torch.Generator().manual_seed(1)).view(R, 1, D))
        learner.update(context, learner.act(context), nothing)
    # 0.9^300 ~ 2e-14 of the data is left: the prediction is the base router's
    torch.testing.assert_close(
        learner.predict_quality(probe), base.predict(probe)[0], rtol=0, atol=1e-9
    )


def _new_model_run(new_quality: float, rounds: int = 400) -> torch.Tensor:
    """Arms 0, 1 known to the base router (quality 0.6 and 0.4 plus a small x-term), arm 2
    a new model it never saw; returns the arms played ``[T, R]``."""
    g = torch.Generator().manual_seed(0)
    n = 200
    x = _features(n, g)
    slope = torch.randn(D, 3, generator=g, dtype=F64) * 0.05
    slope[-1] = torch.tensor([0.6, 0.4, new_quality], dtype=F64)

    def quality(x: torch.Tensor) -> torch.Tensor:
        return x @ slope

    train_scores = (quality(x) + 0.1 * torch.randn(n, 3, generator=g, dtype=F64)).clamp(0, 1)
    train_scores[:, 2] = 0.0  # a hidden arm's train scores are unknown
    train = TrainSplit(x.float(), train_scores.float(), torch.zeros(n, 3))
    hidden = torch.tensor([[False, False, True]]).expand(4, -1)
    base = MLPScoreRouter(4, 3, D, torch.zeros(4), train, hidden=16, weight_decay=1e-4, steps=200)
    learner = ResidualLinUCB(4, 3, D, base.hide(hidden), train, alpha=1.0, lam=10.0).double()
    stream = torch.Generator().manual_seed(1)
    played = []
    for _ in range(rounds):
        context = Context(x=_features(4, stream).view(4, 1, D))
        decision = learner.act(context, stream)
        score = quality(context.x) + 0.1 * torch.randn(4, 1, 3, generator=stream, dtype=F64)
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


def test_the_new_model_prior_is_the_mean_of_the_others_with_their_spread():
    g = torch.Generator().manual_seed(2)
    train = _train(False, g)
    hidden = torch.tensor([False, False, False, True]).expand(R, -1)
    base = MLPScoreRouter(R, K, D, torch.zeros(R), train, hidden=8, weight_decay=1e-4, steps=30)
    learner = ResidualLinUCB(R, K, D, base.hide(hidden), train, lam=4.0).double()
    pred = base.candidate_scores(train.features.double())[0].double()[:, :3]  # [n, 3] known
    spread = float(pred.var(-1).mean())  # across the known models (ddof 1), mean over rows
    assert learner.spread == pytest.approx(spread, rel=1e-6)
    cov = torch.eye(D, dtype=F64) / 4.0
    cov[-1, -1] += spread  # the bias column
    torch.testing.assert_close(learner.correction.a_inv[:, 3], cov.expand(R, D, D))
    plain = torch.eye(D, dtype=F64).expand(R, D, D) / 4.0
    torch.testing.assert_close(learner.correction.a_inv[:, 0], plain)
    probe = Context(x=train.features[:5].double()[None].expand(R, -1, -1))
    quality = learner.predict_quality(probe)
    torch.testing.assert_close(quality[..., 3], quality[..., :3].mean(-1))


def test_a_base_without_per_model_predictions_is_refused():
    from torchroute.learners.residual import build_base
    from torchroute.types import Problem

    problem = Problem(R, K, D, rho=torch.zeros(R), arm_names=("a", "b", "c", "d"))
    with pytest.raises(ValueError, match="base must name a static router config"):
        build_base("linucb_typo", problem, "ResidualLinUCB")
    with pytest.raises(ValueError, match="base must be a static router") as refused:
        build_base("random", problem, "ResidualLinUCB")
    # the routers it names are the packaged configs of score routers, found by their classes
    listed = str(refused.value).split("(")[1].split(")")[0].split(", ")
    assert listed == ["knn_val", "logistic_router", "mean_router", "mf_router", "mlp_router"]


@pytest.mark.parametrize(
    ("build", "name", "value"),
    [
        (lambda base, value: ResidualLinUCB(R, K, D, base, alpha=value), "alpha", -0.5),
        (lambda base, value: ResidualLinTS(R, K, D, base, v=value), "v", float("nan")),
    ],
)
def test_the_score_hyper_parameter_is_checked_by_name_and_kept(build, name, value):
    base = _base("knn")
    with pytest.raises(ValueError, match=f"^Residual\\w+: {name} must be a finite number >= 0"):
        build(base, value)
    learner = build(base, 2)
    assert getattr(learner, name) == 2.0 and isinstance(getattr(learner, name), float)


@pytest.mark.parametrize("builder", ["residual", "refit"])
def test_a_base_name_is_never_a_path_out_of_the_packaged_configs(tmp_path, builder):
    """A run folder's ``base: "../../<somewhere>/evil"`` (a planted config with a
    ``_target_`` that runs a command) is refused by its name; nothing runs."""
    from torchroute.configs_path import config_dir
    from torchroute.learners.refit import build_static
    from torchroute.learners.residual import build_base
    from torchroute.types import Problem

    marker = tmp_path / "MARKER"
    evil = tmp_path / "evil.yaml"
    evil.write_text(f"_target_: torchroute.models.encoders.os.system\ncommand: touch {marker}\n")
    folder = config_dir() / "learner"
    escape = "/".join([".."] * len(folder.resolve().parts)) + str(tmp_path / "evil")
    assert (folder / f"{escape}.yaml").resolve() == evil.resolve()  # the plant is reachable
    build = build_base if builder == "residual" else build_static
    problem = Problem(R, K, D, rho=torch.zeros(R), arm_names=("a", "b", "c", "d"))
    with pytest.raises(ValueError, match="base must name a static router config"):
        build(escape, problem, "Who")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("variant", "only_observed"),
    [("ucb", True), ("ts-greedy", True), ("ucb-change", True), ("ucb-discounted", False)],
)
def test_a_trial_that_observes_nothing_keeps_its_state(variant, only_observed):
    """``learns_only_observed`` (what late or partial feedback relies on): after a stream,
    an update in which trial 0 observes nothing leaves every per-trial entry of trial 0's
    state as it was (its round count aside), while trial 1 learns; a discounted correction
    decays without an observation and does not claim it."""
    builders = {
        **VARIANTS,
        "ucb-change": lambda base: ResidualLinUCB(
            R,
            K,
            D,
            base,
            _train(False, torch.Generator().manual_seed(1)),
            lam=100.0,
            projection=0,
            restart_delta=0.5,
            change_hazard=0.01,
        ),
    }
    base = _base("mlp")
    learner = builders[variant](_base("mlp")).double()
    assert learner.learns_only_observed is only_observed
    if not only_observed:
        return
    _stream(learner, base.double(), rounds=40)
    g = torch.Generator().manual_seed(11)
    context = Context(x=_features(R, g).view(R, 1, D))
    arm = torch.zeros(R, 1, dtype=torch.long)
    observed = torch.nn.functional.one_hot(arm, K).bool()
    observed[0] = False  # trial 0: its decision is never rated
    score = torch.full((R, 1, K), 0.9, dtype=F64)
    feedback = Feedback(
        reward=torch.zeros(R, 1, K, dtype=F64),
        observed=observed,
        score=torch.where(observed, score, 0.0),
        cost=torch.zeros(R, 1, K, dtype=F64),
        only_played=True,
    )
    before = {k: v.clone() for k, v in learner.state_dict().items()}
    learner.update(context, Decision(probs=observed.to(F64), action=arm), feedback)
    after = learner.state_dict()
    moved = []
    for key, old in before.items():
        if key.endswith("rounds") or old.dim() == 0 or old.shape[0] != R:
            continue
        assert torch.equal(after[key][0], old[0]), key  # trial 0: as it was
        moved.append(not torch.equal(after[key][1], old[1]))
    assert any(moved)  # trial 1 learnt from its rating


def test_a_policy_that_does_not_learn_online_learns_only_from_the_observed_cells():
    """A fixed policy (a static router, ``static_refit``, ...) learns nothing from any
    feedback, so late or partial feedback can mask it like a ridge learner: its update
    leaves every entry of its state but the round count as it was."""
    from torchroute.learners.base import FixedPolicy

    base = _base("knn")
    assert isinstance(base, FixedPolicy) and base.learns_only_observed
    g = torch.Generator().manual_seed(4)
    context = Context(x=_features(R, g).view(R, 1, D).float())
    arm = torch.zeros(R, 1, dtype=torch.long)
    observed = torch.nn.functional.one_hot(arm, K).bool()
    feedback = Feedback(
        reward=torch.ones(R, 1, K), observed=observed, score=torch.ones(R, 1, K),
        cost=torch.zeros(R, 1, K), only_played=True,
    )  # fmt: skip
    before = {k: v.clone() for k, v in base.state_dict().items()}
    base.update(context, Decision(probs=observed.float(), action=arm), feedback)
    for key, value in base.state_dict().items():
        assert key.endswith("rounds") or torch.equal(value, before[key]), key
