"""NeuralUCB: the batched head and the online learner (shapes, Z inverse, trials, learning)."""

from __future__ import annotations

import io

import pytest
import torch

from torchroute.learners.neural import FullFeedbackNeuralUCB, NeuralUCB, mlp_forward
from torchroute.models.neural_ucb import NeuralUCBHead
from torchroute.types import Context, Decision, Feedback

R, K, D = 3, 4, 6


def _feedback(reward: torch.Tensor, action: torch.Tensor, full: bool) -> Feedback:
    observed = torch.ones_like(reward, dtype=torch.bool)
    if not full:
        observed = torch.nn.functional.one_hot(action, reward.shape[-1]).bool()
    return Feedback(reward=reward * observed, observed=observed)


def _learner(**kwargs) -> NeuralUCB:
    return NeuralUCB(R, K, D, hidden=8, generator=torch.Generator().manual_seed(0), **kwargs)


def test_head_shapes_and_score():
    head = NeuralUCBHead(R, D, K, hidden=8, generator=torch.Generator().manual_seed(0))
    x = torch.randn(R, 5, D)
    f, phi = head(x)
    assert f.shape == (R, 5, K) and phi.shape == (R, 5, 8) and (phi >= 0).all()
    assert head.z_inv.shape == (R, K, 8, 8)
    width = head.width(phi)
    torch.testing.assert_close(head.score(x, nu=2.0), f + 2.0 * width)
    assert head.loss(x, torch.zeros(R, 5, K), torch.ones(R, 5, K)).shape == (R,)


def test_head_sherman_morrison_matches_dense_inverse():
    gen = torch.Generator().manual_seed(1)
    head = NeuralUCBHead(R, D, K, hidden=8, lam=0.5, generator=gen).double()
    eye = torch.eye(8, dtype=torch.float64)
    gram = 0.5 * eye.expand(R, K, 8, 8).clone()
    for _ in range(6):
        x = torch.randn(R, 2, D, generator=gen, dtype=torch.float64)
        weight = (torch.rand(R, 2, K, generator=gen) < 0.5).double()
        head.observe(x, weight)
        _, phi = head(x)
        gram += torch.einsum("rbk,rbi,rbj->rkij", weight, phi, phi)
    torch.testing.assert_close(head.z_inv, torch.linalg.inv(gram), rtol=1e-9, atol=1e-10)


def test_learner_shapes_and_z_inverse():
    learner = _learner(steps=0, lam=1.0).double()  # steps=0: phi stays fixed
    gen = torch.Generator().manual_seed(2)
    gram = torch.eye(8, dtype=torch.float64).expand(R, K, 8, 8).clone()
    for _ in range(5):
        x = torch.randn(R, 1, D, generator=gen, dtype=torch.float64)
        dec = learner.act(Context(x), gen)
        assert dec.probs.shape == (R, 1, K) and dec.action.shape == (R, 1)
        assert torch.equal(dec.probs.sum(-1), torch.ones(R, 1, dtype=torch.float64))
        _, phi = mlp_forward(learner.params(), x)
        onehot = torch.nn.functional.one_hot(dec.action, K).double()
        gram += torch.einsum("rbk,rbi,rbj->rkij", onehot, phi, phi)
        learner.update(
            Context(x),
            dec,
            _feedback(torch.rand(R, 1, K, dtype=torch.float64), dec.action, full=False),
        )
    torch.testing.assert_close(learner.z_inv, torch.linalg.inv(gram), rtol=1e-8, atol=1e-10)
    assert learner.replay_count.tolist() == [5] * R and learner.rounds.tolist() == [5] * R


def _run(learner, xs, rewards, gen, full=False):
    out = []
    for t in range(xs.shape[1]):
        ctx = Context(xs[:, t : t + 1])
        dec = learner.act(ctx, gen)
        learner.update(ctx, dec, _feedback(rewards[:, t : t + 1], dec.action, full))
        out.append(dec.action)
    return torch.cat(out, 1)


def test_trial_equivariance():
    gen = torch.Generator().manual_seed(3)
    xs, rewards = torch.randn(R, 12, D, generator=gen), torch.rand(R, 12, K, generator=gen)
    learner = _learner(nu=0.5, batch_size=4)
    _run(learner, xs[:, :6], rewards[:, :6], gen)
    perm = torch.tensor([2, 0, 1])
    permuted = _learner(nu=0.5, batch_size=4)
    permuted.load_state_dict({k: v[perm] for k, v in learner.state_dict().items()})
    a = _run(learner, xs[:, 6:], rewards[:, 6:], torch.Generator().manual_seed(9))
    b = _run(permuted, xs[perm, 6:], rewards[perm, 6:], torch.Generator().manual_seed(9))
    assert torch.equal(a[perm], b)
    for key, value in learner.state_dict().items():
        torch.testing.assert_close(permuted.state_dict()[key], value[perm], msg=key)


@pytest.mark.parametrize("cls", [NeuralUCB, FullFeedbackNeuralUCB])
def test_state_dict_round_trip(cls):
    gen = torch.Generator().manual_seed(4)
    xs, rewards = torch.randn(R, 10, D, generator=gen), torch.rand(R, 10, K, generator=gen)
    learner = cls(R, K, D, hidden=8, generator=torch.Generator().manual_seed(0))
    _run(learner, xs[:, :5], rewards[:, :5], gen, full=cls.full_feedback)
    buf = io.BytesIO()
    torch.save(learner.state_dict(), buf)
    buf.seek(0)
    restored = cls(R, K, D, hidden=8, generator=torch.Generator().manual_seed(99))
    restored.load_state_dict(torch.load(buf, weights_only=True))
    state = gen.get_state()
    a = _run(learner, xs[:, 5:], rewards[:, 5:], gen, full=cls.full_feedback)
    gen.set_state(state)
    b = _run(restored, xs[:, 5:], rewards[:, 5:], gen, full=cls.full_feedback)
    assert torch.equal(a, b)
    for key, value in learner.state_dict().items():
        assert torch.equal(restored.state_dict()[key], value), key


def test_update_sees_only_played_arm_in_bandit_mode():
    learner = _learner()
    x = torch.randn(R, 1, D)
    dec = Decision(probs=torch.full((R, 1, K), 1.0 / K), action=torch.zeros(R, 1, dtype=torch.long))
    full = Feedback(reward=torch.rand(R, 1, K), observed=torch.ones(R, 1, K, dtype=torch.bool))
    learner.update(Context(x), dec, full)
    assert learner.replay_mask[:, 0].tolist() == [[True, False, False, False]] * R
    with pytest.raises(ValueError, match="d=6"):
        learner.act(Context(torch.randn(R, 1, D + 1)))


def _bandit_problem(seed: int, rounds: int):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(D, K, generator=gen)
    xs = torch.randn(R, rounds, D, generator=gen)
    mean = torch.sigmoid(2.0 * xs @ w)  # [R, T, K]
    noisy = (mean + 0.1 * torch.randn(mean.shape, generator=gen)).clamp(0, 1)
    return xs, mean, noisy


@pytest.mark.parametrize("cls", [NeuralUCB, FullFeedbackNeuralUCB])
def test_learns_better_than_random(cls):
    rounds = 300
    xs, mean, noisy = _bandit_problem(5, rounds)
    learner = cls(
        R,
        K,
        D,
        hidden=16,
        lr=1e-2,
        generator=torch.Generator().manual_seed(0),
        **({"nu": 0.1} if cls is NeuralUCB else {}),
    )
    actions = _run(learner, xs, noisy, torch.Generator().manual_seed(1), full=cls.full_feedback)
    late = slice(rounds // 2, None)
    got = mean[:, late].gather(-1, actions[:, late, None])[..., 0].mean()
    random = mean[:, late].mean()
    best = mean[:, late].amax(-1).mean()
    # closes well over half of the gap between uniform routing and the oracle-best arm
    assert got > random + 0.6 * (best - random), (float(got), float(random), float(best))
