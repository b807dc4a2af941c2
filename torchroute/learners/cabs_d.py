"""CABS-D (CABS Algorithm 2; ``docs/papers/cabs.md`` (CABS-D)) and the neural SquareCB expert.

CABS-D mixes two experts, SquareCB on bandit feedback and CABS-C, with exponential weights
over meta-copies ``(m, g)`` on the geometric grid ``gamma^(g) = 2^(g-1) / T``,
``g = 1..L``, ``L = ceil(log2 T) + 1`` **[spec]**; the copies differ only in the implicit
exploration ``gamma^(g)`` of their loss estimates. Weights are kept in log space.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import Tensor, nn

from torchroute.checks import check_igw, check_number
from torchroute.functional.random import Source
from torchroute.functional.sampling import probability_floor, sample_categorical
from torchroute.functional.squarecb import squarecb_probs
from torchroute.learners.base import Learner
from torchroute.learners.cabs_c import CABSC, check_oracle, neural_init, solver_predict
from torchroute.learners.linear import SquareCB
from torchroute.learners.neural import NeuralUCB
from torchroute.types import Context, Decision, Feedback, Problem


class NeuralSquareCB(NeuralUCB):
    """SquareCB (CABS Algorithm 3) on the per-trial MLPs of :class:`NeuralUCB`.

    ``p = IGW(f(x); gamma, mu = K)`` mixed with the uniform distribution so that
    ``p_k >= eps_floor``; the MLPs train on the played arm's reward as in NeuralUCB
    (``nu = 0``: no ``Z`` statistics). Other arguments as :class:`NeuralUCB`.
    """

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        gamma: float = 4.0,
        mu: float | None = None,
        eps_floor: float = 1e-3,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("nu", 0.0)
        super().__init__(num_trials, num_arms, dim, **kwargs)
        check_igw(type(self).__name__, num_arms, gamma, mu, eps_floor)
        self.gamma, self.mu, self.eps_floor = float(gamma), mu, float(eps_floor)

    def probs(self, context: Context) -> Tensor:
        """``[R, B, K]`` floored IGW distribution on the MLP's predictions."""
        with torch.no_grad():
            f, _ = self(context.x)
        return probability_floor(squarecb_probs(f, self.gamma, self.mu), self.eps_floor)

    def act(self, context: Context, generator: Source = None) -> Decision:
        self._check_context(context)
        probs = self.probs(context)
        return Decision(probs=probs, action=sample_categorical(probs, generator))


def _squarecb_probs(expert: Learner, context: Context) -> Tensor:
    if isinstance(expert, NeuralSquareCB):
        return expert.probs(context)
    assert isinstance(expert, SquareCB)
    rewards = solver_predict(expert, context.x)
    return probability_floor(squarecb_probs(rewards, expert.gamma, expert.mu), expert.eps_floor)


class CABSD(Learner):
    """CABS-D: exponential weights over SquareCB and CABS-C meta-copies (CABS Algorithm 2).

    Per round: ``p_1 = SquareCB(x)``, ``p_2 = CABS-C(x)`` (one graph ``A``),
    ``mu = softmax(log w)`` over the ``2 L`` copies, ``q = sum mu_(m,g) p_m``, ``i ~ q``;
    both experts learn (SquareCB from ``r`` only, CABS-C from ``r`` and its surrogates, each
    with its own ``p``); loss estimates
    ``l^_(1,g) = l_i p_1i / (q_i + gamma_g)``,
    ``l^_(2,g) = sum_{j in N} l_j p_2j / (sum_{k: A[k,j]} q_k + gamma_g)`` with
    ``l_i = 1 - r``, ``l_j = 1 - s_j`` (``N``: the played arm and its kept surrogates);
    ``eta = min(gamma_1, sqrt(ln(2L) / (1 + Delta)))``, ``Delta += sum mu l^^2``,
    ``log w -= eta l^``. With ``B > 1`` contexts the loss estimates of a round add up.
    Like :class:`CABSC`, ``update`` reuses ``act``'s graph and distributions for the same
    ``Context`` object and recomputes them otherwise.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d``.
        rho: ``[R]``.
        oracle: as :class:`CABSC`.
        horizon: ``T`` (sets the grid).
        gamma: the experts' exploitation strength (4 in the CABS experiments).
        solver: ``"ridge"`` or ``"neural"`` (both experts).
        lam: ridge regulariser.
        mu: SquareCB's IGW constant (``K`` when ``None``).
        neural: :class:`NeuralUCB` arguments for ``solver="neural"``.
        **cabs_c: further :class:`CABSC` arguments (``targets``, ``iqr``, ``graph``,
            ``oracle_input``, ``eps_floor``).

    Shapes:
        as :class:`CABSC`; ``update`` also returns ``cabs_c_weight`` ``[R]``.
    """

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        rho: Tensor,
        oracle: nn.Module,
        horizon: int,
        gamma: float = 4.0,
        solver: Literal["ridge", "neural"] = "ridge",
        lam: float = 10.0,
        mu: float | None = None,
        neural: dict[str, Any] | None = None,
        **cabs_c: Any,
    ) -> None:
        super().__init__(num_trials, num_arms)
        check_number(type(self).__name__, "horizon", horizon, ge=1, integer=True)
        self.dim = int(dim)
        eps_floor = cabs_c.get("eps_floor", 1e-3)
        self.cabs_c = CABSC(
            num_trials, num_arms, dim, rho, oracle, gamma, solver, lam, neural=neural, **cabs_c
        )
        if solver == "ridge":
            self.squarecb: Learner = SquareCB(num_trials, num_arms, dim, gamma, mu, eps_floor, lam)
        else:
            self.squarecb = NeuralSquareCB(
                num_trials, num_arms, dim, gamma, mu, eps_floor, **(neural or {})
            )
        self.horizon = int(horizon)
        levels = math.ceil(math.log2(self.horizon)) + 1 if self.horizon > 1 else 1
        grid = torch.tensor([2.0**g / self.horizon for g in range(levels)])
        self.register_buffer("grid", grid.expand(num_trials, levels).clone())  # [R, L]
        self.register_buffer("log_weights", torch.zeros(num_trials, 2, levels))  # log w, [R, 2, L]
        self.register_buffer("delta", torch.zeros(num_trials))  # Delta_t
        self._pending: tuple[Context, Tensor, Tensor, Tensor, Tensor] | None = None

    @classmethod
    def from_problem(cls, problem: Problem, oracle: nn.Module | None = None, **hp: Any) -> CABSD:
        """``cls(R, K, d, rho, oracle, T, **hp)``; needs ``problem.horizon``."""
        oracle = check_oracle(problem, oracle, cls.__name__)
        if problem.horizon is None:
            raise ValueError("CABSD needs Problem.horizon (T) for its gamma grid")
        return cls(
            problem.num_trials,
            problem.num_arms,
            problem.dim,
            problem.rho,
            oracle,
            problem.horizon,
            **neural_init(problem, hp),
        )

    def mixture(self) -> Tensor:
        """``mu_(m,g) [R, 2, L]``: the normalised weights."""
        r = self.num_trials
        return torch.softmax(self.log_weights.reshape(r, -1), -1).reshape(self.log_weights.shape)

    def _expert_probs(self, context: Context, graph: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        p1 = _squarecb_probs(self.squarecb, context)
        p2 = self.cabs_c.probs(context, graph).to(p1.dtype)
        w = self.mixture().sum(-1).to(p1.dtype)  # [R, 2]
        q = w[:, 0, None, None] * p1 + w[:, 1, None, None] * p2
        return p1, p2, q

    def act(self, context: Context, generator: Source = None) -> Decision:
        self._check_context(context)
        graph = self.cabs_c.draw_graph(context, generator)
        p1, p2, q = self._expert_probs(context, graph)
        self._pending = (context, graph, p1, p2, q)
        return Decision(probs=q, action=sample_categorical(q, generator))

    def update(
        self,
        context: Context,
        decision: Decision,
        feedback: Feedback,
        generator: Source = None,
    ) -> dict[str, Tensor]:
        self._check_context(context)
        self._check_feedback(context, feedback)
        pending, self._pending = self._pending, None
        if pending is not None and pending[0] is context:
            graph, p1, p2, q = pending[1:]
        else:  # a decision made elsewhere: fresh graph, distributions of the current state
            graph = self.cabs_c.draw_graph(context, generator)
            p1, p2, q = self._expert_probs(context, graph)
        action, dtype = decision.action, self.log_weights.dtype
        p1, p2, q = p1.to(dtype), p2.to(dtype), q.to(dtype)
        played = torch.nn.functional.one_hot(action, self.num_arms).bool()
        bandit = Feedback(
            reward=torch.where(played, feedback.reward, 0.0), observed=played, only_played=True
        )
        self.squarecb.update(context, Decision(probs=p1, action=action), bandit, generator)
        metrics, s, mask = self.cabs_c.learn(context, graph, p2, action, feedback, generator)
        # Loss estimates of the 2 L meta-copies (step 4), summed over the B contexts.
        reward = feedback.reward.to(dtype).gather(2, action[..., None])  # [R, B, 1]
        loss = torch.where(played, 1.0 - reward, 1.0 - s.to(dtype))  # [R, B, K]
        grid = self.grid.to(dtype)[:, None, :]  # [R, 1, L]
        q_i = q.gather(2, action[..., None])  # [R, B, 1]
        l1 = (1.0 - reward) * p1.gather(2, action[..., None]) / (q_i + grid)  # [R, B, L]
        seen = (graph.to(dtype) * q[..., :, None]).sum(-2)  # sum_{k: A[k,j]} q_k, [R, B, K]
        hood = (played | mask).to(dtype)
        l2 = ((hood * loss * p2)[..., None] / (seen[..., None] + grid[:, :, None, :])).sum(2)
        est = torch.stack([l1.sum(1), l2.sum(1)], 1)  # [R, 2, L]
        levels = self.grid.shape[1]
        mix = self.mixture()
        eta = torch.minimum(torch.sqrt(math.log(2 * levels) / (1.0 + self.delta)), self.grid[:, 0])
        self.delta = self.delta + (mix * est * est).sum((1, 2))
        log_w = self.log_weights - eta[:, None, None] * est
        self.log_weights = (
            log_w - torch.logsumexp(log_w.reshape(self.num_trials, -1), -1)[:, None, None]
        )
        self._tick(context)
        metrics["played_prob"] = q.gather(2, action[..., None])[..., 0].mean(1)
        metrics["cabs_c_weight"] = self.mixture()[:, 1].sum(-1)
        return metrics
