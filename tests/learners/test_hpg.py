"""HPG, parameter-free HPG and the policy-gradient baselines against dense references
written here from docs/papers/hpg.md (full ``eigh``, bisection, scalar loops)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.learners.helpers import F64, feedback_for, forced_decision
from torchroute.learners import EXP3, HPG, EuclideanQuadPG, LogLinearPG, ParameterFreeHPG
from torchroute.types import Context, Feedback, Problem

R, K, D = 2, 3, 5


def _unit_queries(t, r=R, d=D, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(t, r, 1, d, generator=g, dtype=F64), dim=-1)


def _bisect_project(vals, tau, beta):
    """Soft-threshold by bisection on ``nu`` (independent of the closed form)."""
    a = vals.abs()
    if (beta * torch.sinh(a)).sum() <= tau:
        return vals
    lo, hi = 0.0, float(a.max())
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if (beta * torch.sinh((a - mid).clamp_min(0))).sum() > tau:
            lo = mid
        else:
            hi = mid
    return vals.sign() * (a - 0.5 * (lo + hi)).clamp_min(0)


def _dense_hpg_step(theta_dense, q, coef, tau, beta):
    """``Theta += coef q q^T``, full ``eigh``, bisection projection; returns (Theta, W)."""
    vals, vecs = torch.linalg.eigh(theta_dense + coef * torch.outer(q, q))
    vals = _bisect_project(vals, tau, beta)
    theta_new = vecs @ torch.diag(vals) @ vecs.T
    return theta_new, vecs @ torch.diag(beta * torch.sinh(vals)) @ vecs.T


def _learner_w(learner):
    lam = learner.beta.to(F64)[:, None, None] * torch.sinh(learner.theta)
    return (learner.basis * lam[..., None, :]) @ learner.basis.transpose(-1, -2)


def _play(learner, xs, rewards_of, gen):
    for t in range(xs.shape[0]):
        context = Context(x=xs[t])
        decision = learner.act(context, gen)
        learner.update(context, decision, feedback_for(learner, decision, rewards_of(t)), gen)
        yield decision


def test_hpg_matches_a_dense_eigh_reference():
    tau, beta, eta = 1.5, 0.3, 0.8
    learner = HPG(R, K, D, tau=tau, beta=beta, eta=eta, capacity=D).to(F64)
    xs = _unit_queries(40)
    g = torch.Generator().manual_seed(1)
    rewards = torch.rand(40, R, 1, K, generator=g, dtype=F64) * 2 - 0.5
    theta_ref = torch.zeros(R, K, D, D, dtype=F64)
    w_ref = torch.zeros(R, K, D, D, dtype=F64)
    gen = torch.Generator().manual_seed(2)
    for t, decision in enumerate(_play(learner, xs, lambda t: rewards[t], gen)):
        for r in range(R):
            q = xs[t, r, 0]
            scores = torch.stack([q @ w_ref[r, m] @ q for m in range(K)])
            pi = torch.softmax(scores, 0)
            torch.testing.assert_close(decision.probs[r, 0], pi, rtol=0, atol=1e-9)
            played = int(decision.action[r, 0])
            reward = float(rewards[t, r, 0, played])
            for m in range(K):
                coef = eta * reward * (float(m == played) - float(pi[m]))
                theta_ref[r, m], w_ref[r, m] = _dense_hpg_step(theta_ref[r, m], q, coef, tau, beta)
        torch.testing.assert_close(_learner_w(learner), w_ref, rtol=0, atol=1e-9)
    nuclear = torch.linalg.matrix_norm(w_ref, ord="nuc")
    assert (nuclear <= tau * (1 + 1e-9)).all() and (nuclear > 0.5 * tau).any()  # binding


def test_hpg_theorem3_defaults_and_per_trial_dims():
    problem = Problem(
        4, 8, 256, rho=torch.zeros(4), arm_names=tuple("abcdefgh"), horizon=1000,
        labels={"dim": torch.tensor([64.0, 64.0, 256.0, 256.0])},
    )  # fmt: skip
    learner = HPG.from_problem(problem, rank=4)
    torch.testing.assert_close(learner.tau.float(), torch.full((4,), 8.0))
    torch.testing.assert_close(
        learner.beta.float(), torch.tensor([8 / 64, 8 / 64, 8 / 256, 8 / 256])
    )
    eta = [math.sqrt(8 * math.log(d) / 1000) for d in (64, 64, 256, 256)]
    torch.testing.assert_close(learner.eta.float(), torch.tensor(eta))
    assert learner.capacity == 32


def test_zero_padding_is_exact():
    """A trial run at d with queries zero-padded to D > d gives the same policy."""
    small = HPG(1, K, 4, tau=1.0, beta=0.25, eta=0.7, capacity=4).to(F64)
    big = HPG(1, K, 9, tau=1.0, beta=0.25, eta=0.7, capacity=4).to(F64)
    xs = _unit_queries(30, r=1, d=4, seed=3)
    pad = torch.nn.functional.pad(xs, (0, 5))
    g = torch.Generator().manual_seed(4)
    rewards = torch.rand(30, 1, 1, K, generator=g, dtype=F64)
    a = list(_play(small, xs, lambda t: rewards[t], torch.Generator().manual_seed(5)))
    b = list(_play(big, pad, lambda t: rewards[t], torch.Generator().manual_seed(5)))
    for da, db in zip(a, b):
        torch.testing.assert_close(da.probs, db.probs, rtol=0, atol=1e-10)
        assert torch.equal(da.action, db.action)


def test_parameter_free_hpg_matches_a_scalar_reference():
    horizon = 30
    learner = ParameterFreeHPG(1, K, D, horizon=horizon, capacity=D).to(F64)
    xs = _unit_queries(horizon, r=1, seed=6)
    g = torch.Generator().manual_seed(7)
    rewards = torch.rand(horizon, 1, 1, K, generator=g, dtype=F64) * 6 - 3  # some get clipped
    clip = 2 + math.sqrt(2 * math.log(2 * horizon**2))
    theta_ref = torch.zeros(K, D, D, dtype=F64)
    w_ref = torch.zeros(K, D, D, dtype=F64)
    wealth, neg, grad_sq, z_max = [1.0] * K, [0.0] * K, 0.0, 2.0 * D
    gen = torch.Generator().manual_seed(8)
    for t, decision in enumerate(_play(learner, xs, lambda t: rewards[t], gen)):
        q = xs[t, 0, 0]
        y = [neg[m] / (t + 1) * wealth[m] for m in range(K)]
        z = [min(max(v, 0.0), z_max) for v in y]
        dir_scores = [float(q @ w_ref[m] @ q) for m in range(K)]
        pi = torch.softmax(torch.tensor([z[m] * dir_scores[m] for m in range(K)], dtype=F64), 0)
        torch.testing.assert_close(decision.probs[0, 0], pi, rtol=0, atol=1e-9)
        played = int(decision.action[0, 0])
        rbar = min(max(float(rewards[t, 0, 0, played]), -clip), clip)
        eta = math.sqrt(K * math.log(3 * D) / (2 * (1 + grad_sq)))
        for m in range(K):
            adv = rbar * (float(m == played) - float(pi[m]))  # G_m = -adv q q^T
            g_m = -adv * dir_scores[m] / clip
            s = 0.0 if y[m] == z[m] else math.copysign(1.0, y[m] - z[m])
            g_t = 0.5 * (g_m + abs(g_m) * s)
            wealth[m] -= g_t * y[m]
            neg[m] -= g_t
            grad_sq += adv**2
            theta_ref[m], w_ref[m] = _dense_hpg_step(theta_ref[m], q, eta * adv, 1.0, 1.0 / D)
        torch.testing.assert_close(_learner_w(learner)[0], w_ref, rtol=0, atol=1e-9)
        torch.testing.assert_close(learner.wealth[0], torch.tensor(wealth, dtype=F64))
    assert any(abs(v) > 1e-6 for v in neg)


def test_baselines_one_step_by_hand():
    x = _unit_queries(1)[0]  # [R, 1, D]
    reward = torch.tensor([[[0.2, 0.7, -0.4]], [[1.0, 0.0, 0.5]]], dtype=F64)
    action = torch.tensor([[1], [2]])
    decision = forced_decision(action, K)
    # log-linear, Euclidean step: theta = 0 -> pi uniform, step eta r (e - 1/K) q
    loglin = LogLinearPG(R, K, D, eta=0.5, radius=None, step="euclidean").to(F64)
    loglin.update(Context(x), decision, feedback_for(loglin, decision, reward))
    for r in range(R):
        a = int(action[r, 0])
        for m in range(K):
            want = 0.5 * float(reward[r, 0, a]) * (float(m == a) - 1 / K) * x[r, 0]
            torch.testing.assert_close(loglin.theta[r, m], want)
    # Euclidean quadratic: same with q q^T, then the Frobenius ball of radius 0.01
    quad = EuclideanQuadPG(R, K, D, tau=0.01, eta=0.5, ball="frobenius").to(F64)
    quad.update(Context(x), decision, feedback_for(quad, decision, reward))
    for r in range(R):
        a = int(action[r, 0])
        for m in range(K):
            step = 0.5 * float(reward[r, 0, a]) * (float(m == a) - 1 / K)
            want = step * torch.outer(x[r, 0], x[r, 0])
            want = want * min(1.0, 0.01 / float(want.norm()))
            torch.testing.assert_close(quad.weights[r, m], want)
    # EXP3: w_a -= eta (1 - r) / p_a with p = (1 - gamma) / K + gamma / K = 1/K
    exp3 = EXP3(R, K, eta=0.1, gamma=0.3).to(F64)
    exp3.update(Context(x), decision, feedback_for(exp3, decision, reward))
    for r in range(R):
        a = int(action[r, 0])
        w = torch.zeros(K, dtype=F64)
        w[a] = -0.1 * (1 - float(reward[r, 0, a])) * K
        torch.testing.assert_close(exp3.log_weights[r], w - w.max())


def _one_step(learner, x, played, reward):
    """Force arm ``played`` on the single context ``x [d]`` with reward ``reward``."""
    k = learner.num_arms
    decision = forced_decision(torch.tensor([[played]]), k)
    rewards = torch.zeros(1, 1, k, dtype=F64)
    rewards[0, 0, played] = reward
    learner.update(Context(x.view(1, 1, -1)), decision, feedback_for(learner, decision, rewards))


def test_loglinear_npg_step_by_hand():
    """K = 2, theta = 0, q = (3, 4), r = 0.5, arm 0, eta = 0.2: pi = (1/2, 1/2) and
    F^+ g = r (e_0 - 1/2) / pi_0 q / ||q||^2 = (0.5, -0.5) q / 25."""
    learner = LogLinearPG(1, 2, 2, eta=0.2, radius=None).to(F64)
    _one_step(learner, torch.tensor([3.0, 4.0], dtype=F64), 0, 0.5)
    want = torch.tensor([[[0.012, 0.016], [-0.012, -0.016]]], dtype=F64)
    torch.testing.assert_close(learner.theta, want, rtol=0, atol=1e-15)


def test_loglinear_npg_step_is_the_natural_gradient_and_the_kl_step():
    """From a nonzero theta: the step is eta F^+ g with the Fisher information and the
    REINFORCE gradient of log pi taken by autograd, and pi(. | q) moves by the KL mirror
    (exponential-weights) step pi' ~ pi exp(eta r 1[m = m_t] / pi_{m_t})."""
    k, d, eta, reward, played = 3, 2, 0.4, 0.7, 2
    theta0 = 0.5 * torch.randn(k, d, generator=torch.Generator().manual_seed(11), dtype=F64)
    q = torch.tensor([0.6, -1.3], dtype=F64)  # not unit norm
    learner = LogLinearPG(1, k, d, eta=eta, radius=None).to(F64)
    learner.theta.copy_(theta0[None])
    _one_step(learner, q, played, reward)

    def log_pi(flat):
        return torch.log_softmax(flat.view(k, d) @ q, 0)

    jac = torch.autograd.functional.jacobian(log_pi, theta0.reshape(-1))  # [K, K d]
    pi = torch.softmax(theta0 @ q, 0)
    fisher = torch.einsum("m,mi,mj->ij", pi, jac, jac)
    natural = torch.linalg.pinv(fisher, hermitian=True, rtol=1e-10) @ (reward * jac[played])
    want = theta0.reshape(-1) + eta * natural
    torch.testing.assert_close(learner.theta.reshape(-1), want, rtol=0, atol=1e-12)
    gain = torch.zeros(k, dtype=F64)
    gain[played] = reward / pi[played]
    kl_step = pi * torch.exp(eta * gain)
    torch.testing.assert_close(torch.softmax(learner.theta[0] @ q, 0), kl_step / kl_step.sum())


def test_loglinear_npg_batch_projection_and_zero_query():
    """B = 2 contexts sum their steps; the radius ball projects; q = 0 makes no step."""
    k, d = 3, 4
    g = torch.Generator().manual_seed(12)
    x = torch.randn(1, 2, d, generator=g, dtype=F64)
    action = torch.tensor([[0, 2]])
    rewards = torch.rand(1, 2, k, generator=g, dtype=F64)
    both = LogLinearPG(1, k, d, eta=0.3, radius=None).to(F64)
    decision = forced_decision(action, k)
    both.update(Context(x), decision, feedback_for(both, decision, rewards))
    want = torch.zeros(k, d, dtype=F64)
    for b in range(2):
        a = int(action[0, b])
        coef = 0.3 * float(rewards[0, b, a]) / (1 / k) / float(x[0, b].square().sum())
        for m in range(k):
            want[m] += coef * (float(m == a) - 1 / k) * x[0, b]
    torch.testing.assert_close(both.theta[0], want)
    small = LogLinearPG(1, k, d, eta=0.3, radius=0.05).to(F64)
    small.update(Context(x), decision, feedback_for(small, decision, rewards))
    norms = want.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(small.theta[0], want * (0.05 / norms.clamp_min(0.05)))
    still = LogLinearPG(1, k, d, eta=0.3).to(F64)
    _one_step(still, torch.zeros(d, dtype=F64), 1, 1.0)
    assert torch.equal(still.theta, torch.zeros(1, k, d, dtype=F64))


def test_loglinear_defaults_and_bad_step():
    problem = Problem(1, 8, 4, rho=torch.zeros(1), arm_names=tuple("abcdefgh"), horizon=2000)
    npg = LogLinearPG.from_problem(problem, rank=4, eta_scale=10.0)
    assert npg.step == "npg" and npg.radius == 8.0
    assert abs(npg.eta - 10 * math.sqrt(2 * math.log(8) / (8 * 2000))) < 1e-15
    ogd = LogLinearPG.from_problem(problem, rank=4, step="euclidean")
    assert abs(ogd.eta - 8.0 / math.sqrt(4000)) < 1e-15
    with pytest.raises(ValueError, match="step must be one of"):
        LogLinearPG(1, 2, 2, eta=0.1, step="mirror")


def test_bad_input_one_line_errors():
    with pytest.raises(ValueError, match="tau must be finite and > 0"):
        HPG(R, K, D, tau=0.0, beta=0.1, eta=0.1)
    with pytest.raises(ValueError, match="capacity must be an integer >= 1"):
        HPG(R, K, D, tau=1.0, beta=0.1, eta=0.1, capacity=0)
    with pytest.raises(ValueError, match="tau must be a finite number > 0"):
        EuclideanQuadPG(R, K, D, tau=-1.0, eta=0.1)
    learner = HPG(R, K, D, tau=1.0, beta=0.1, eta=0.1).to(F64)
    with pytest.raises(ValueError, match="built for d=5 features but the context has d=4"):
        learner.act(Context(x=torch.zeros(R, 1, 4, dtype=F64)))
    x = _unit_queries(1)[0]
    decision = learner.act(Context(x))
    reward = torch.full((R, 1, K), math.nan, dtype=F64)
    bad = Feedback(reward, torch.ones(R, 1, K, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"Feedback\.reward must be finite"):
        learner.update(Context(x), decision, bad)
    problem = Problem(R, K, D, rho=torch.zeros(R), arm_names=("a", "b", "c"))
    with pytest.raises(ValueError, match=r"horizon \(T\) is unknown"):
        HPG.from_problem(problem)


def test_every_buffer_follows_to():
    learner = HPG(R, K, D, tau=1.0, beta=0.1, eta=0.1)
    pf = ParameterFreeHPG(R, K, D, horizon=10)
    for module in (learner, pf):
        dbl = module.to(F64)
        assert all(b.dtype in (F64, torch.long, torch.bool) for b in dbl.buffers())
        moved = module.to("meta")
        for name, buf in moved.named_buffers():
            assert buf.device.type == "meta", name


class _Devices(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.devices = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(value, torch.Tensor):
                self.devices.add(value.device.type)
        return out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cls", ["HPG", "ParameterFreeHPG"])
def test_cuda_hot_path_creates_no_cpu_tensors(cls):
    learner = (
        HPG(R, K, D, tau=1.0, beta=0.2, eta=0.5) if cls == "HPG" else ParameterFreeHPG(R, K, D, 9)
    ).to("cuda")
    assert all(b.is_cuda for b in learner.buffers())
    gen = torch.Generator("cuda").manual_seed(0)
    xs = _unit_queries(3).float().cuda()
    for t in range(3):
        context = Context(x=xs[t])
        with _Devices() as seen:
            decision = learner.act(context, gen)
            reward = torch.rand(R, 1, K, device="cuda", generator=gen)
            learner.update(context, decision, feedback_for(learner, decision, reward), gen)
        assert seen.devices == {"cuda"}, seen.devices
    assert torch.isfinite(learner.theta).all()
