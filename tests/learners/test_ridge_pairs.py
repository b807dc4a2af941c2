"""The per-pair ridge update of a round in which each trial observes a few arms (CABS-C)."""

from __future__ import annotations

import torch

from torchroute.learners import RidgeLearner
from torchroute.types import Context, Decision, Feedback

F64 = torch.float64


def _dense_refit(lam: float, xs: torch.Tensor, ys: torch.Tensor, ws: torch.Tensor):
    """``inv(lam I + X^T W X)`` and ``theta`` per trial and arm: ``xs [N, R, d]``, ``ys, ws
    [N, R, K]``."""
    eye = torch.eye(xs.shape[-1], dtype=F64)
    a = lam * eye + torch.einsum("nrk,nri,nrj->rkij", ws, xs, xs)
    b = torch.einsum("nrk,nri,nrk->rki", ws, xs, ys)
    return torch.linalg.inv(a), torch.linalg.solve(a, b[..., None])[..., 0]


def test_uneven_observed_arms_match_a_dense_refit_and_leave_the_others_untouched():
    """Trials observe 0 to 3 of 8 arms per round (B = 1, side observations): the state
    matches a float64 dense refit, and every unobserved (trial, arm) keeps its bits."""
    r, k, d, lam = 6, 8, 5, 2.0
    gen = torch.Generator().manual_seed(3)
    learner = RidgeLearner(r, k, d, lam).to(F64)
    xs, ys, ws = [], [], []
    for t in range(12):
        x = torch.randn(r, 1, d, generator=gen, dtype=F64)
        counts = torch.randint(0, 4, (r,), generator=gen)
        counts[t % r] = 0  # one trial observes nothing this round
        counts[(t + 1) % r] = 3  # and one observes three arms
        ranks = torch.rand(r, k, generator=gen).argsort(-1).argsort(-1)
        observed = (ranks < counts[:, None])[:, None]  # [R, 1, K]
        reward = torch.randn(r, 1, k, generator=gen, dtype=F64)
        action = observed[:, 0].to(torch.int8).argmax(-1)[:, None]
        before_a, before_t = learner.a_inv.clone(), learner.theta.clone()
        learner.update(
            Context(x=x),
            Decision(probs=torch.full((r, 1, k), 1.0 / k, dtype=F64), action=action),
            Feedback(reward=reward.masked_fill(~observed, float("nan")), observed=observed),
        )
        untouched = ~observed[:, 0]
        assert torch.equal(learner.a_inv[untouched], before_a[untouched])
        assert torch.equal(learner.theta[untouched], before_t[untouched])
        xs.append(x.transpose(0, 1))
        ys.append(torch.where(observed, reward, 0.0).transpose(0, 1))
        ws.append(observed.to(F64).transpose(0, 1))
    ref_inv, ref_theta = _dense_refit(lam, torch.cat(xs), torch.cat(ys), torch.cat(ws))
    torch.testing.assert_close(learner.a_inv, ref_inv, rtol=0, atol=1e-10)
    torch.testing.assert_close(learner.theta, ref_theta, rtol=0, atol=1e-10)
