"""Softmax routing policies learned by policy gradient: the shared base and the baselines of
HPG (docs/papers/hpg.md): EXP3 (constant class), log-linear REINFORCE, and on the
log-quadratic class projected Euclidean policy gradient and flattened natural policy gradient
(the paper's Table-1 baseline). Every ``from_problem`` takes ``eta_scale``, which multiplies
the step whether it is the default or given as ``eta``.

(Over 400 lines: the softmax-policy base and the four baselines it serves share their
weights and steps.)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.functional.availability import played_probs
from torchroute.functional.hypentropy import projected_eig_step
from torchroute.functional.projections import project_l1_ball
from torchroute.functional.random import Source
from torchroute.functional.sampling import sample_categorical
from torchroute.learners.base import Learner
from torchroute.types import Context, Decision, Feedback, Problem


def trial_dims(problem: Problem) -> Tensor:
    """The true query dimension of each trial, ``[R]``: ``Problem.labels['dim']`` when the env
    zero-pads several dimensions into one run, else ``Problem.dim`` for every trial."""
    if "dim" in problem.labels:
        return problem.labels["dim"].to(torch.float64).cpu()
    return torch.full((problem.num_trials,), float(problem.dim), dtype=torch.float64)


def require_horizon(problem: Problem, horizon: int | None, who: str) -> int:
    """``horizon`` or ``Problem.horizon``; a one-line error when neither is known."""
    value = horizon if horizon is not None else problem.horizon
    if value is None:
        raise ValueError(f"{who}: horizon (T) is unknown; pass horizon=<rounds>")
    check_number(who, "horizon", value, ge=1, integer=True)
    return int(value)


class SoftmaxPolicy(Learner):
    """A policy ``pi(m | q) = softmax_m(score_m(q))`` sampled every round.

    Subclasses implement :meth:`scores` (``[R, B, d] -> [R, B, K]``) and :meth:`update`.
    The device check plays them on the low-rank experts env.
    """

    protocol = "low_rank"
    samples_from_probs = True

    def scores(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def policy(self, x: Tensor) -> Tensor:
        """``pi(. | q)`` of the current state, ``[R, B, K]``."""
        return torch.softmax(self.scores(x), dim=-1)

    def act(self, context: Context, generator: Source = None) -> Decision:
        self._check_context(context)
        probs = self.policy(context.x)
        return Decision(probs=probs, action=sample_categorical(probs, generator))

    def played_policy(self, context: Context) -> Tensor:
        """``pi(. | q)`` as ``act`` played it, ``[R, B, K]``: restricted to
        ``context.available`` (0 on a masked arm, the rest renormalised) when it is set."""
        return played_probs(self.policy(context.x), context.available)

    def _played_reward(self, context: Context, decision: Decision, feedback: Feedback) -> Tensor:
        """The reward of the played arm, ``[R, B]``; checks shapes (and finiteness on CPU)."""
        self._check_context(context)
        self._check_feedback(context, feedback)
        reward = feedback.reward.gather(-1, decision.action[..., None])[..., 0]
        if reward.device.type == "cpu" and not bool(torch.isfinite(reward).all()):
            raise ValueError(f"{type(self).__name__}: Feedback.reward must be finite, got NaN/inf")
        return reward

    def _natural_weights(
        self, context: Context, decision: Decision, reward: Tensor, power: int = 1
    ) -> Tensor:
        """``r (1[m = m_t] - 1/K) / (pi_{m_t} ||q||^(2 power))``, ``[R, B, K]`` (0 for
        ``q = 0``): the minimum-norm natural step of a log-linear class whose features have
        squared norm ``||q||^(2 power)`` (``power=2``: the flattened ``vec(q q^T)``).

        With ``context.available``: the step of the problem restricted to the ``K'``
        available arms (``pi`` restricted, ``1/K'`` on them, 0 on a masked arm)."""
        x = context.x.to(reward.dtype)
        pi = played_probs(self.policy(x), context.available)
        played = pi.gather(-1, decision.action[..., None])[..., 0]  # [R, B]
        sq = x.square().sum(-1).pow(power)
        inv = torch.where(sq > 0, 1.0 / torch.where(sq > 0, sq, 1.0), 0.0)
        one_hot = torch.nn.functional.one_hot(decision.action, self.num_arms).to(reward.dtype)
        if context.available is None:
            center = torch.full_like(one_hot, 1.0 / self.num_arms)
        else:
            avail = context.available.to(reward.dtype)
            center = avail / avail.sum(-1, keepdim=True)
        return (reward * inv / played)[..., None] * (one_hot - center)

    def _advantage_weights(self, context: Context, decision: Decision, reward: Tensor) -> Tensor:
        """``r (1[m = m_t] - pi_m)``, ``[R, B, K]`` (minus the REINFORCE gradient's scale).

        ``pi`` is recomputed from the state (unchanged since ``act``), restricted to
        ``context.available`` as ``act`` played it (so a masked arm's weight is 0), and the
        update reads only the played arm of ``decision``.
        """
        one_hot = torch.nn.functional.one_hot(decision.action, self.num_arms).to(reward.dtype)
        return reward[..., None] * (one_hot - self.played_policy(context).to(reward.dtype))


class EXP3(SoftmaxPolicy):
    """EXP3 over models (the constant policy class): ``pi = (1 - gamma) softmax(w) + gamma/K``.

    Loss-based importance weighting: ``w_m -= eta (r_max - r) 1[m = m_t] / pi_m``.

    Args:
        num_trials, num_arms: ``R``, ``K``.
        eta: step size ``> 0``.
        gamma: uniform exploration in ``[0, 1]``.
        reward_max: the largest reward (losses are ``r_max - r``).
    """

    def __init__(
        self, num_trials: int, num_arms: int, eta: float, gamma: float = 0.0, reward_max=1.0
    ) -> None:
        super().__init__(num_trials, num_arms)
        check_number("EXP3", "eta", eta, gt=0)
        check_number("EXP3", "gamma", gamma, ge=0, le=1)
        check_number("EXP3", "reward_max", reward_max)
        self.eta, self.gamma, self.reward_max = float(eta), float(gamma), float(reward_max)
        self.register_buffer("log_weights", torch.zeros(num_trials, num_arms))

    @classmethod
    def from_problem(
        cls,
        problem: Problem,
        eta: float | None = None,
        horizon: int | None = None,
        eta_scale: float = 1.0,
        **kw,
    ) -> EXP3:
        """Default ``eta = sqrt(2 log K / (T K))`` (Auer et al. 2002), times ``eta_scale``."""
        check_number("EXP3", "eta_scale", eta_scale, gt=0)
        k = problem.num_arms
        if eta is None:
            t = require_horizon(problem, horizon, "EXP3")
            eta = math.sqrt(2 * math.log(max(k, 2)) / (t * k))
        return cls(problem.num_trials, k, eta * eta_scale, **kw)

    def policy(self, x: Tensor) -> Tensor:
        probs = torch.softmax(self.log_weights, -1).to(x.dtype)
        probs = (1 - self.gamma) * probs + self.gamma / self.num_arms
        return probs[:, None].expand(*x.shape[:2], self.num_arms)

    def update(self, context, decision, feedback, generator=None) -> dict[str, Tensor]:
        reward = self._played_reward(context, decision, feedback)
        one_hot = torch.nn.functional.one_hot(decision.action, self.num_arms).to(reward.dtype)
        probs = self.played_policy(context).to(reward.dtype)  # what act sampled from
        played = probs.gather(-1, decision.action[..., None])[..., 0]
        loss = ((self.reward_max - reward) / played)[..., None] * one_hot
        self.log_weights -= self.eta * loss.sum(1).to(self.log_weights)
        self.log_weights -= self.log_weights.amax(-1, keepdim=True)  # keep weights bounded
        self._tick(context)
        return {}


class LogLinearPG(SoftmaxPolicy):
    """Log-linear policy ``softmax_m(theta_m^T q)`` by REINFORCE with a natural-gradient step.

    The REINFORCE gradient of one context is ``g = r (e_{m_t} - pi) (x) q`` (``G = -g``).
    ``step="npg"`` (default) is the KL / entropic step (docs/papers/hpg.md; NPG, Kakade 2001; NPG is
    mirror descent with a KL regulariser on the policy, Geist et al. 2019): precondition
    ``g`` by the pseudo-inverse of the policy's Fisher information at the query,
    ``F_q = (diag(pi) - pi pi^T) (x) q q^T``. Its minimum-norm solution is
    ``F_q^+ g = r (e_{m_t} - 1/K) / pi_{m_t} (x) q / ||q||^2``, so

        ``theta_m <- theta_m + eta r (1[m = m_t] - 1/K) / pi_{m_t} q / ||q||^2``,

    which moves the policy at ``q`` by exactly the KL mirror (exponential-weights) step
    ``pi'(m | q) ~ pi(m | q) exp(eta r 1[m = m_t] / pi_{m_t})``; other queries ``q'`` move
    by the fraction ``q'^T q / ||q||^2`` of it. A zero query makes no step (``F_q = 0``).
    ``step="euclidean"``: ``theta_m <- theta_m + eta r (1[m = m_t] - pi_m) q``. With
    ``B > 1`` contexts the per-context steps are summed. Either step is followed by the
    projection of each ``theta_m`` on the Euclidean ball of radius ``radius``.

    Args:
        num_trials, num_arms, dim: ``R``, ``K``, ``d``.
        eta: step size ``> 0``.
        radius: Euclidean radius of each ``theta_m`` (``None``: no projection).
        step: ``"npg"`` or ``"euclidean"``.
    """

    STEPS = ("npg", "euclidean")

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        eta: float,
        radius: float | None = None,
        step: str = "npg",
    ) -> None:
        super().__init__(num_trials, num_arms)
        check_number("LogLinearPG", "dim", dim, ge=1, integer=True)
        check_number("LogLinearPG", "eta", eta, gt=0)
        if radius is not None:
            check_number("LogLinearPG", "radius", radius, gt=0)
        if step not in self.STEPS:
            raise ValueError(f"LogLinearPG: step must be one of {self.STEPS}, got {step!r}")
        self.dim, self.eta, self.radius, self.step = int(dim), float(eta), radius, step
        self.register_buffer("theta", torch.zeros(num_trials, num_arms, dim))

    @classmethod
    def from_problem(
        cls,
        problem: Problem,
        rank: int = 4,
        eta: float | None = None,
        horizon: int | None = None,
        eta_scale: float = 1.0,
        **kw,
    ) -> LogLinearPG:
        """Defaults ``radius = 2 s`` and the step's theory rate, times ``eta_scale`` (an
        ablation knob): ``npg``: ``eta = sqrt(2 log K / (K T))`` (at the query the step is
        an EXP3 step with gains ``r / pi``, Auer et al. 2002); ``euclidean``: the OGD rate
        ``eta = radius / sqrt(2 T)`` (``1 / sqrt(2 T)`` without a radius). ``eta_scale``
        also multiplies a given ``eta``."""
        check_number("LogLinearPG", "eta_scale", eta_scale, gt=0)
        kw.setdefault("radius", 2.0 * rank)
        if eta is None:
            t = require_horizon(problem, horizon, "LogLinearPG")
            if kw.get("step", "npg") == "npg":
                k = problem.num_arms
                eta = math.sqrt(2 * math.log(max(k, 2)) / (k * t))
            else:
                scale = kw["radius"] if kw["radius"] is not None else 1.0
                eta = scale / math.sqrt(2 * t)
        eta = eta * eta_scale
        return cls(problem.num_trials, problem.num_arms, problem.dim, eta, **kw)

    def scores(self, x: Tensor) -> Tensor:
        return torch.einsum("rbd,rkd->rbk", x, self.theta.to(x.dtype))

    def update(self, context, decision, feedback, generator=None) -> dict[str, Tensor]:
        reward = self._played_reward(context, decision, feedback)
        if self.step == "npg":
            weights = self._natural_weights(context, decision, reward)
        else:
            weights = self._advantage_weights(context, decision, reward)
        step = torch.einsum("rbk,rbd->rkd", weights, context.x.to(weights.dtype))
        theta = self.theta + self.eta * step.to(self.theta)
        if self.radius is not None:
            norm = theta.norm(dim=-1, keepdim=True)
            theta = theta * (self.radius / norm.clamp_min(self.radius))
        self.theta.copy_(theta)
        self._tick(context)
        return {}


class EuclideanQuadPG(SoftmaxPolicy):
    """Projected Euclidean policy gradient on the log-quadratic class ``softmax_m(q^T W_m q)``.

    ``W_m <- Proj(W_m + eta sum_b w[b, m] q_b q_b^T)`` with the REINFORCE weights
    ``w = r (1[m = m_t] - pi_m)`` and ``Proj`` the Euclidean projection onto
    ``||W_m||_* <= tau`` (``ball="nuclear"``, HPG's set: the eigenvalues projected on the
    l1 ball, a soft-threshold that drops zeros) or ``||W_m||_F <= tau``
    (``ball="frobenius"``, a rescaling). The nuclear ball keeps ``W_m = U diag(lam) U^T``
    with ``capacity`` slots and the rank-one eigen-update of HPG (``O(d k^2 + k^3)`` per
    model and round; smallest ``|lam|`` dropped beyond ``capacity``, counted in
    ``dropped``); the Frobenius ball keeps dense ``W_m [d, d]`` (docs/papers/hpg.md,
    baselines).

    Args:
        num_trials, num_arms, dim: ``R``, ``K``, ``d``.
        tau: radius ``> 0``.
        eta: step size ``> 0``.
        ball: ``"nuclear"`` (default) or ``"frobenius"``.
        capacity: eigen slots per model for the nuclear ball (default ``min(d, 32)``).
    """

    BALLS = ("nuclear", "frobenius")

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        tau: float,
        eta: float,
        ball: str = "nuclear",
        capacity: int | None = None,
    ) -> None:
        super().__init__(num_trials, num_arms)
        name = type(self).__name__
        check_number(name, "dim", dim, ge=1, integer=True)
        check_number(name, "tau", tau, gt=0)
        check_number(name, "eta", eta, gt=0)
        if ball not in self.BALLS:
            raise ValueError(f"{name}: ball must be one of {self.BALLS}, got {ball!r}")
        self.dim, self.tau, self.eta, self.ball = int(dim), float(tau), float(eta), ball
        r, m = num_trials, num_arms
        if ball == "frobenius":
            self.register_buffer("weights", torch.zeros(r, m, dim, dim))
        else:
            capacity = min(int(dim), 32) if capacity is None else capacity
            check_number(name, "capacity", capacity, ge=1, integer=True)
            self.capacity = min(int(capacity), int(dim))
            self.register_buffer("basis", torch.zeros(r, m, dim, self.capacity))
            self.register_buffer("lam", torch.zeros(r, m, self.capacity))

    @staticmethod
    def default_eta(problem: Problem, tau: float, horizon: int | None) -> float:
        """The block-OGD step ``tau sqrt(M / (2 T))`` (``M`` blocks of radius ``tau``)."""
        t = require_horizon(problem, horizon, "EuclideanQuadPG")
        return tau * math.sqrt(problem.num_arms / (2 * t))

    @staticmethod
    def stable_eta(query_norm: float) -> float:
        """``2 / (5 query_norm^4)``: the stable step of gradient ascent on the policy's
        expected reward, which is ``(5/2) ||q||^4``-smooth in ``W_m`` for rewards in
        ``[0, 1]`` (softmax logits ``q^T W_m q``). At short horizons the OGD step exceeds
        it: at ``T = 200``, ``M = 12``, ``tau = 8`` one round moves the played arm's score by
        about 2.5 for ``||q||^2 = 2``, and the policy settles on the first good arm before
        every arm was tried."""
        return 2.0 / (5.0 * query_norm**4)

    @classmethod
    def from_problem(
        cls,
        problem: Problem,
        rank: int = 4,
        tau: float | None = None,
        eta: float | None = None,
        horizon: int | None = None,
        eta_scale: float = 1.0,
        ball: str = "nuclear",
        capacity: int | None = None,
        query_norm: float | None = None,
    ) -> EuclideanQuadPG:
        """Defaults ``tau = 2 s`` (HPG's) and :meth:`default_eta` (capped by the stable step
        when ``query_norm`` bounds ``||q||``; ``None``: the OGD step alone); ``eta_scale``
        multiplies the step, default or given."""
        name = cls.__name__
        check_number(name, "eta_scale", eta_scale, gt=0)
        check_number(name, "rank", rank, ge=1, integer=True)
        if query_norm is not None:
            check_number(name, "query_norm", query_norm, gt=0)
        tau = 2.0 * rank if tau is None else tau
        if eta is None:
            eta = cls.default_eta(problem, tau, horizon)
            if query_norm is not None:
                eta = min(eta, cls.stable_eta(query_norm))
        return cls(
            problem.num_trials, problem.num_arms, problem.dim, tau, eta * eta_scale, ball, capacity
        )

    def scores(self, x: Tensor) -> Tensor:
        if self.ball == "frobenius":
            return torch.einsum("rbd,rkde,rbe->rbk", x, self.weights.to(x.dtype), x)
        proj = torch.einsum("rkdc,rbd->rbkc", self.basis.to(x.dtype), x)
        return (proj.square() * self.lam.to(x.dtype)[:, None]).sum(-1)

    def _step_weights(self, context: Context, decision: Decision, reward: Tensor) -> Tensor:
        """The per-context coefficients of ``q q^T`` in the step, ``[R, B, K]``."""
        return self._advantage_weights(context, decision, reward)

    def update(self, context, decision, feedback, generator=None) -> dict[str, Tensor]:
        reward = self._played_reward(context, decision, feedback)
        weights = self._step_weights(context, decision, reward)
        x = context.x.to(weights.dtype)
        if self.ball == "frobenius":
            step = torch.einsum("rbk,rbd,rbe->rkde", weights, x, x)
            w = self.weights + self.eta * step.to(self.weights)
            norm = w.flatten(-2).norm(dim=-1)[..., None, None]
            self.weights.copy_(w * (self.tau / norm.clamp_min(self.tau)))
            self._tick(context)
            return {}
        r, b, d = x.shape
        q = x.to(self.lam.dtype)[:, None].expand(r, self.num_arms, b, d)
        coef = (self.eta * weights).transpose(1, 2).to(self.lam.dtype)  # [R, K, B]
        u, lam, mask, dropped = projected_eig_step(
            self.basis,
            self.lam,
            self.lam != 0,
            q,
            coef,
            lambda vals: project_l1_ball(vals, self.tau),
            self.capacity,
        )
        self.basis.copy_(u)
        self.lam.copy_(lam)
        self._tick(context)
        rank = mask.sum(-1).to(self.lam.dtype).mean(-1)
        return {"rank": rank, "dropped": dropped.to(self.lam.dtype).sum(-1)}

    def dense_weights(self) -> Tensor:
        """``W_m``, ``[R, K, d, d]`` (a copy)."""
        if self.ball == "frobenius":
            return self.weights.clone()
        return torch.einsum("rkdc,rkc,rkec->rkde", self.basis, self.lam, self.basis)


class FlattenedNPG(EuclideanQuadPG):
    """Flattened natural policy gradient on the log-quadratic class (Agarwal et al.; the
    ``d_q sqrt(M T log T)`` baseline of the HPG paper's Table 1).

    The class is log-linear in the flattened ``d^2``-dimensional features ``vec(q q^T)``,
    so the natural step of :class:`LogLinearPG` applies with ``q`` replaced by
    ``vec(q q^T)`` (``||vec(q q^T)||^2 = ||q||^4``): the minimum-norm
    ``F_q^+ g = r (e_{m_t} - 1/K) / pi_{m_t} (x) q q^T / ||q||^4``, so

        ``W_m <- Proj(W_m + eta r (1[m = m_t] - 1/K) / pi_{m_t} q q^T / ||q||^4)``,

    which moves the logits at ``q`` by the exponential-weights step with gains
    ``r / pi_{m_t}``; a zero query makes no step. ``Proj`` and the arguments are those of
    :class:`EuclideanQuadPG` (the same nuclear ball as HPG by default).
    """

    @staticmethod
    def default_eta(problem: Problem, tau: float, horizon: int | None) -> float:
        """``sqrt(2 log K / (K T))``: the EXP3 rate of the step at the query."""
        t = require_horizon(problem, horizon, "FlattenedNPG")
        k = problem.num_arms
        return math.sqrt(2 * math.log(max(k, 2)) / (k * t))

    @staticmethod
    def stable_eta(query_norm: float) -> float:
        """No cap: the step is divided by ``||q||^4`` already (at the query it is the
        exponential-weights step), whatever the norm of the query."""
        return math.inf

    def _step_weights(self, context: Context, decision: Decision, reward: Tensor) -> Tensor:
        return self._natural_weights(context, decision, reward, power=2)  # ||vec(q q^T)||^2
