"""Learning behaviour of the ridge learners on a synthetic linear problem with known theta."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from tests.learners.helpers import (
    F64,
    LEARNERS,
    LinearProblem,
    build,
    feedback_for,
    forced_decision,
)
from torchroute.learners import (
    EpsilonGreedy,
    FullFeedbackLinUCB,
    Learner,
    LinUCB,
    RidgeLearner,
    SquareCB,
)
from torchroute.types import Context, Feedback

R, K, D, T = 4, 3, 5, 600
# the ridge learners with the ridge prior (new_arm_prior="mean" regresses a model's first
# observations towards the observed mean instead: tests/learners/test_new_arm_prior.py)
RIDGE = [
    n
    for n in sorted(LEARNERS)
    if isinstance(build(n, 1, 2, 2), RidgeLearner)
    and getattr(build(n, 1, 2, 2), "new_arm_prior", "zero") == "zero"
]


@pytest.fixture(scope="module")
def stream():
    """Pre-drawn contexts ``[T, R, 1, d]``, expected and noisy rewards ``[T, R, 1, K]``."""
    problem = LinearProblem(R, K, D, seed=11)
    contexts = [problem.context() for _ in range(T)]
    means = torch.stack([problem.mean_reward(c) for c in contexts])
    rewards = means + problem.noise * torch.randn(means.shape, generator=problem.gen, dtype=F64)
    return problem, contexts, means, rewards


def _play(learner: Learner, stream, seed: int = 0) -> torch.Tensor:
    """Run the whole stream; returns the expected regret of each round ``[T, R]``."""
    _, contexts, means, rewards = stream
    gen = torch.Generator().manual_seed(seed)
    actions = []
    for context, reward in zip(contexts, rewards, strict=True):
        decision = learner.act(context, gen)
        learner.update(context, decision, feedback_for(learner, decision, reward))
        actions.append(decision.action)
    chosen = means.gather(-1, torch.stack(actions)[..., None])[..., 0, 0]
    return means.amax(-1)[..., 0] - chosen


@pytest.fixture(scope="module")
def played(stream):
    """``name -> (learner, regret [T, R])`` after the whole stream, each run at most once."""
    cache: dict[str, tuple[Learner, torch.Tensor]] = {}

    def get(name: str) -> tuple[Learner, torch.Tensor]:
        if name not in cache:
            learner = build(name, R, K, D)
            cache[name] = learner, _play(learner, stream)
        return cache[name]

    return get


# Average regret over the last third as a fraction of uniform play's, per trial. Measured
# on this stream: LinUCB 0.002, full feedback 0.0002, LinTS 0.014, epsilon-greedy 0.37
# (eps_t is still about 0.3 at t = 600), SquareCB 0.44 (gamma = 4, mu = K explores a lot
# by design).
RATIO_TO_UNIFORM = {
    "LinUCB": 0.02,
    "FullFeedbackLinUCB": 0.01,
    "LinTS": 0.08,
    "EpsilonGreedy": 0.6,
    "SquareCB": 0.7,
}


@pytest.mark.parametrize("name", sorted(RATIO_TO_UNIFORM))
def test_learners_beat_uniform_play(name, stream, played):
    _, _, means, _ = stream
    tail = slice(2 * T // 3, T)
    # Closed form for RandomRouter: E[regret] = max_k mu_k - mean_k mu_k.
    uniform = (means.amax(-1) - means.mean(-1))[tail, :, 0].mean(0)  # [R]
    regret = played(name)[1][tail].mean(0)  # [R]
    assert (regret < RATIO_TO_UNIFORM[name] * uniform).all(), regret / uniform


def test_random_router_matches_the_closed_form(stream):
    _, _, means, _ = stream
    regret = _play(build("RandomRouter", R, K, D), stream).mean()
    uniform = (means.amax(-1) - means.mean(-1)).mean()
    assert abs(regret - uniform) < 0.1 * uniform


def test_full_feedback_theta_converges(stream, played):
    """600 noisy rows (sigma 0.1, feature variance 1/d): the standard error is about 0.01."""
    problem = stream[0]
    learner = played("FullFeedbackLinUCB")[0]
    torch.testing.assert_close(learner.theta, problem.theta, rtol=0, atol=0.06)


@pytest.mark.parametrize("cls", [LinUCB, FullFeedbackLinUCB])
def test_trials_never_mix(cls):
    """A run with R = 3 equals three runs with R = 1 on the same per-trial inputs."""
    r, rounds = 3, 40
    problem = LinearProblem(r, K, D, seed=12)
    contexts = [problem.context() for _ in range(K + rounds)]
    rewards = [problem.reward(c) for c in contexts]

    def play(learner: Learner, trials: list[int]) -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(0)  # only matters on ties, which we avoid
        actions = []
        for t, (context, reward) in enumerate(zip(contexts, rewards, strict=True)):
            context, reward = Context(x=context.x[trials]), reward[trials]
            if t < K:  # every arm once first, so LinUCB's scores never tie
                decision = forced_decision(torch.full((len(trials), 1), t), K)
            else:
                decision = learner.act(context, gen)
                actions.append(decision.action)
            learner.update(context, decision, feedback_for(learner, decision, reward))
        return actions

    joint = cls(r, K, D, lam=1.0).to(F64)
    joint_actions = torch.stack(play(joint, list(range(r))))
    for i in range(r):
        alone = cls(1, K, D, lam=1.0).to(F64)
        alone_actions = torch.stack(play(alone, [i]))
        assert torch.equal(alone_actions[:, 0], joint_actions[:, i])
        for key, value in alone.state_dict().items():
            torch.testing.assert_close(
                value[0], joint.state_dict()[key][i], rtol=0, atol=1e-12, msg=key
            )


def _dense_refit(lam: float, xs, ys, ws):
    """``inv(lam I + X^T W X)`` and ``theta`` per trial and arm from stacked observations.

    ``xs [N, R, d]``, ``ys, ws [N, R, K]``.
    """
    eye = torch.eye(xs.shape[-1], dtype=F64)
    a = lam * eye + torch.einsum("nrk,nri,nrj->rkij", ws, xs, xs)
    b = torch.einsum("nrk,nri,nrk->rki", ws, xs, ys)
    return torch.linalg.inv(a), torch.linalg.solve(a, b[..., None])[..., 0]


@pytest.mark.parametrize("side_observations", [False, True, "few"])
@pytest.mark.parametrize("name", RIDGE)
def test_bandit_and_batched_updates_match_a_dense_refit(name, side_observations):
    """Rounds of B = 1 (single played arm) and of B = 3 (Woodbury) against a dense refit.

    Some entries are unobserved (weight 0, their reward cells hold NaN, which must never be
    read); with ``side_observations`` other arms' rewards are revealed too, and every
    learner fits every observed entry (the feedback is used as given); ``"few"``: the played
    arm and at most one other (the per-slot update of one context on the CPU).
    """
    gen = torch.Generator().manual_seed(13)
    k = 6 if side_observations == "few" else K  # "few": at most 2 of 6 arms observed
    problem = LinearProblem(R, k, D, seed=14)
    learner = build(name, R, k, D)
    lam = learner.lam
    xs, ys, ws = [], [], []
    for b in (1, 1, 3, 1, 3, 3, 1):
        context = problem.context(b)
        action = torch.randint(k, (R, b), generator=gen)
        decision = forced_decision(action, k)
        reward = problem.reward(context)
        if side_observations == "few":
            other = torch.randint(k, (R, b), generator=gen)
            observed = torch.nn.functional.one_hot(action, k).bool()
            observed |= torch.nn.functional.one_hot(other, k).bool() & (
                torch.rand(R, b, 1, generator=gen) < 0.5
            )
        elif side_observations:
            observed = torch.rand(R, b, k, generator=gen) < 0.8
        else:
            observed = torch.nn.functional.one_hot(action, k).bool()
            observed &= torch.rand(R, b, 1, generator=gen) < 0.8
        feedback = Feedback(
            reward=reward.masked_fill(~observed, float("nan")),
            observed=observed,
            only_played=side_observations is False,
        )
        learner.update(context, decision, feedback)
        fitted = observed.to(F64)
        xs.append(context.x.transpose(0, 1))  # [B, R, d]
        ys.append(reward.transpose(0, 1))
        ws.append(fitted.transpose(0, 1))
    ref_inv, ref_theta = _dense_refit(lam, torch.cat(xs), torch.cat(ys), torch.cat(ws))
    torch.testing.assert_close(learner.a_inv, ref_inv, rtol=0, atol=1e-10)
    torch.testing.assert_close(learner.theta, ref_theta, rtol=0, atol=1e-10)
    assert torch.equal(learner.rounds, torch.full((R,), 13))


@pytest.mark.parametrize("name", RIDGE)
def test_one_batch_of_three_equals_three_single_rounds(name):
    gen = torch.Generator().manual_seed(15)
    problem = LinearProblem(R, K, D, seed=16)
    context = problem.context(3)
    action = torch.randint(K, (R, 3), generator=gen)
    reward = problem.reward(context)
    batched, single = build(name, R, K, D), build(name, R, K, D)
    decision = forced_decision(action, K)
    batched.update(context, decision, feedback_for(batched, decision, reward))
    for j in range(3):
        ctx_j = Context(x=context.x[:, j : j + 1])
        dec_j = forced_decision(action[:, j : j + 1], K)
        single.update(ctx_j, dec_j, feedback_for(single, dec_j, reward[:, j : j + 1]))
    for key, value in batched.state_dict().items():
        torch.testing.assert_close(single.state_dict()[key], value, rtol=0, atol=1e-12, msg=key)


# ---------------------------------------------------------------------------------------
# Exact probabilities of SquareCB and epsilon-greedy for a known theta (docs/reference/learners.md),
# computed with exact rational arithmetic (fractions), independently of the library.


def _uniform_mix(p: list[Fraction], floor: Fraction) -> list[Fraction]:
    """``(1 - lam) p + lam / K`` with the smallest ``lam in [0, 1]`` giving ``min >= floor``."""
    k, p_min = len(p), min(p)
    if p_min >= floor:
        return p
    lam = (floor - p_min) / (Fraction(1, k) - p_min)
    return [(1 - lam) * q + lam / k for q in p]


def _igw(r: list[Fraction], gamma: Fraction, mu: Fraction) -> list[Fraction]:
    """SquareCB's inverse gap weighting, reward form, for distinct rewards."""
    b = r.index(max(r))
    p = [1 / (mu + gamma * (r[b] - rk)) for rk in r]
    p[b] = 1 - sum(q for i, q in enumerate(p) if i != b)
    return p


def _set_predictions(learner: RidgeLearner, predictions: list[list[str]]) -> Context:
    """Set ``theta`` so that ``x^T theta_k`` is ``predictions[r][k]`` for ``x = (1, 2)``.

    ``theta_k = (r_k - 0.2, 0.1)``; returns the context ``[R, 1, 2]``.
    """
    r = torch.tensor([[float(v) for v in row] for row in predictions], dtype=F64)  # [R, K]
    theta = torch.stack([r - 0.2, torch.full_like(r, 0.1)], -1)  # [R, K, 2]
    learner.theta.copy_(theta)
    return Context(x=torch.tensor([1.0, 2.0], dtype=F64).expand(len(predictions), 1, 2))


def _to_tensor(rows: list[list[Fraction]]) -> torch.Tensor:
    return torch.tensor([[float(q) for q in row] for row in rows], dtype=F64)[:, None, :]


def test_squarecb_probs_are_igw_then_the_floor_by_hand():
    # gamma = 40, mu = K = 3, eps_floor = 0.1. Trials 0 and 1: IGW puts 1/35 and 1/19 on
    # their weakest arms, below the floor, so the uniform mix lifts them to exactly 0.1.
    # Trial 2: every IGW probability is >= 0.2, the floor leaves it alone.
    predictions = [["0.9", "0.5", "0.1"], ["0.2", "0.6", "0.3"], ["0.5", "0.48", "0.45"]]
    learner = SquareCB(3, 3, 2, gamma=40.0, eps_floor=0.1).to(F64)
    context = _set_predictions(learner, predictions)
    gamma, mu, floor = Fraction(40), Fraction(3), Fraction(1, 10)
    expected = []
    for row in predictions:
        igw = _igw([Fraction(v) for v in row], gamma, mu)
        expected.append(_uniform_mix(igw, floor))
    # the hand values of trial 0 before the floor: 1/19 and 1/35 off the best arm
    assert _igw([Fraction(v) for v in predictions[0]], gamma, mu)[1:] == [
        Fraction(1, 19),
        Fraction(1, 35),
    ]
    assert min(expected[0]) == floor and min(expected[1]) == floor
    assert expected[2] == _igw([Fraction(v) for v in predictions[2]], gamma, mu)
    decision = learner.act(context, torch.Generator().manual_seed(0))
    torch.testing.assert_close(decision.probs, _to_tensor(expected), rtol=0, atol=1e-12)
    # an explicit mu = 6 (>= K): trial 0's IGW is 1/(6 + 16), 1/(6 + 32) off the best arm
    learner = SquareCB(3, 3, 2, gamma=40.0, mu=6.0, eps_floor=0.0).to(F64)
    context = _set_predictions(learner, predictions)
    expected = [_igw([Fraction(v) for v in row], gamma, Fraction(6)) for row in predictions]
    assert expected[0][1:] == [Fraction(1, 22), Fraction(1, 38)]
    decision = learner.act(context, torch.Generator().manual_seed(0))
    torch.testing.assert_close(decision.probs, _to_tensor(expected), rtol=0, atol=1e-12)


@pytest.mark.parametrize("rounds", [0, 3, 12, 40])
def test_epsilon_greedy_probs_decay_by_hand(rounds):
    """``eps_t = max(eps_min, eps0 / (1 + decay t))``, then the eps_floor mix.

    eps0 = 1, decay = 0.25, eps_min = 0.1, K = 4, eps_floor = 0.02: eps_t is 1, 4/7,
    1/4 and 1/10 (the floor of 1/11) at t = 0, 3, 12, 40; at t = 40 the off-greedy arms
    hold 1/40 >= 0.02. ``t`` counts real (unobserved, so theta-preserving) updates.
    """
    predictions = [["0.1", "0.2", "0.9", "0.3"], ["0.8", "0.1", "0.4", "0.2"]]
    learner = EpsilonGreedy(2, 4, 2, eps0=1.0, decay=0.25, eps_min=0.1, eps_floor=0.02)
    learner = learner.to(F64)
    context = _set_predictions(learner, predictions)
    nothing = Feedback(
        reward=torch.zeros(2, 1, 4, dtype=F64), observed=torch.zeros(2, 1, 4, dtype=torch.bool)
    )
    for _ in range(rounds):
        learner.update(context, forced_decision(torch.zeros(2, 1, dtype=torch.long), 4), nothing)
    assert learner.rounds.tolist() == [rounds, rounds]
    eps = max(Fraction(1, 10), 1 / (1 + Fraction(1, 4) * rounds))
    assert eps == {0: 1, 3: Fraction(4, 7), 12: Fraction(1, 4), 40: Fraction(1, 10)}[rounds]
    expected = []
    for greedy in (2, 0):
        p = [eps / 4 + (1 - eps if k == greedy else 0) for k in range(4)]
        expected.append(_uniform_mix(p, Fraction(2, 100)))
    decision = learner.act(context, torch.Generator().manual_seed(0))
    torch.testing.assert_close(decision.probs, _to_tensor(expected), rtol=0, atol=1e-12)


def test_epsilon_greedy_floor_lifts_a_small_eps_by_hand():
    """Per-trial round counts 0, 1000, 100000 (eps0 = 0.5, decay = 1e-3, eps_min = 0.01):
    eps = 1/2, 1/4 and 0.01 (0.5/101 is below eps_min); K = 4, so trial 2's off-greedy
    arms hold 0.0025 < eps_floor = 0.004 and the uniform mix lifts them to 0.004."""
    predictions = [
        ["0.1", "0.2", "0.9", "0.3"],
        ["0.8", "0.1", "0.4", "0.2"],
        ["0.1", "0.2", "0.3", "0.7"],
    ]
    learner = EpsilonGreedy(3, 4, 2, eps0=0.5, decay=1e-3, eps_min=0.01, eps_floor=0.004)
    learner = learner.to(F64)
    context = _set_predictions(learner, predictions)
    learner.rounds.copy_(torch.tensor([0, 1000, 100_000]))
    expected = []
    for eps, greedy in ((Fraction(1, 2), 2), (Fraction(1, 4), 0), (Fraction(1, 100), 3)):
        p = [eps / 4 + (1 - eps if k == greedy else 0) for k in range(4)]
        expected.append(_uniform_mix(p, Fraction(4, 1000)))
    assert min(expected[2]) == Fraction(4, 1000)
    assert expected[0][2] == Fraction(5, 8) and expected[1][0] == Fraction(13, 16)
    decision = learner.act(context, torch.Generator().manual_seed(0))
    torch.testing.assert_close(decision.probs, _to_tensor(expected), rtol=0, atol=1e-12)


def test_epsilon_greedy_defaults_are_the_spec_values():
    """eps0 = 0.5, decay = 1e-3, eps_min = 0.01, eps_floor = 1e-3 (docs/reference/learners.md): at
    t = 1000, eps = 0.5 / 2 = 1/4; at t = 10^6, 0.5 / 1001 < 0.01 so eps = 0.01 and the
    off-greedy arms of K = 3 hold 1/300 > 1e-3 (no floor mix)."""
    learner = EpsilonGreedy(2, 3, 2).to(F64)
    context = _set_predictions(learner, [["0.9", "0.1", "0.2"], ["0.1", "0.2", "0.9"]])
    learner.rounds.copy_(torch.tensor([1000, 1_000_000]))
    expected = [
        [Fraction(1, 12) + Fraction(3, 4), Fraction(1, 12), Fraction(1, 12)],
        [Fraction(1, 300), Fraction(1, 300), Fraction(1, 300) + Fraction(99, 100)],
    ]
    decision = learner.act(context, torch.Generator().manual_seed(0))
    torch.testing.assert_close(decision.probs, _to_tensor(expected), rtol=0, atol=1e-12)
