"""Hypentropy Policy Gradient (HPG) and its parameter-free variant (docs/papers/hpg.md,
paper 000 Algorithm 1 / Section 5.2): log-quadratic policies ``softmax_m(q^T W_m q)`` with
``W_m`` kept as a low-rank eigendecomposition in mirror space."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.functional.hypentropy import basis_coordinates, mirror_step, quadratic_form
from torchroute.learners.policy_baselines import SoftmaxPolicy, require_horizon, trial_dims
from torchroute.types import Problem


def _per_trial(value: float | Tensor, num_trials: int, name: str, owner: str) -> Tensor:
    """A float or an ``[R]`` tensor of positive finite values -> ``[R]`` float64."""
    out = torch.as_tensor(value, dtype=torch.float64).expand(num_trials).clone()
    if not bool(torch.isfinite(out).all()) or not bool((out > 0).all()):
        raise ValueError(f"{owner}: {name} must be finite and > 0, got {value!r}")
    return out


class _LowRankQuadPolicy(SoftmaxPolicy):
    """State of ``M`` mirror iterates per trial: ``U [R, M, d, k]``, ``theta [R, M, k]``."""

    device_tolerance = "solver"  # eigen-updates of the mirror iterates

    def __init__(
        self, num_trials: int, num_arms: int, dim: int, capacity: int | None, beta
    ) -> None:
        super().__init__(num_trials, num_arms)
        name = type(self).__name__
        check_number(name, "dim", dim, ge=1, integer=True)
        capacity = min(int(dim), 32) if capacity is None else capacity
        check_number(name, "capacity", capacity, ge=1, integer=True)
        self.dim, self.capacity = int(dim), min(int(capacity), int(dim))
        r, m, k = num_trials, num_arms, self.capacity
        self.register_buffer("basis", torch.zeros(r, m, dim, k))
        self.register_buffer("theta", torch.zeros(r, m, k))
        self.register_buffer("beta", _per_trial(beta, r, "beta", name))
        # per-round scratch, not state: the last basis coordinates (see _coordinates) and
        # the memory the next basis is written into
        self._coordinates_cache: tuple | None = None
        self._spare: Tensor | None = None

    def direction_scores(self, x: Tensor) -> Tensor:
        """``q^T W_m q`` for every model, ``[R, B, M]``."""
        q = x[:, None]  # [R, 1, B, d]
        beta = self.beta.to(x.dtype)[:, None]  # [R, 1]
        basis, theta = self.basis.to(x.dtype), self.theta.to(x.dtype)
        proj = self._coordinates(x) if x.dtype == self.basis.dtype else None
        return quadratic_form(basis, theta, beta, q, proj).transpose(1, 2)

    def _coordinates(self, x: Tensor) -> Tensor:
        """``q U_m`` for every query and model, ``[R, M, B, k]`` in the state's dtype.

        One read of the basis per round: ``act``'s scores, ``update``'s scores and the mirror
        step see the same ``x`` and basis, so the last result is reused while both tensors
        are the same objects, unmodified (their version counters unchanged).
        """
        basis = self.basis
        if x.is_inference() or basis.is_inference():  # no version counters to key on
            return basis_coordinates(basis, x.to(basis.dtype)[:, None])
        key = (x._version, basis._version)
        cached = self._coordinates_cache
        if cached is not None and cached[0] is x and cached[1] is basis and cached[2] == key:
            return cached[3]
        proj = basis_coordinates(basis, x.to(basis.dtype)[:, None])
        self._coordinates_cache = (x, basis, key, proj)
        return proj

    def _spare_basis(self) -> Tensor:
        """A tensor like ``basis`` (not sharing its memory) to write the next basis into:
        a fresh one of that size would cost its page faults every round."""
        spare, basis = self._spare, self.basis
        if (
            spare is None
            or spare.shape != basis.shape
            or spare.dtype != basis.dtype
            or spare.device != basis.device
        ):
            spare = self._spare = torch.empty_like(basis)
        return spare

    def _step(self, x: Tensor, coef: Tensor, tau: Tensor) -> dict[str, Tensor]:
        """Mirror step with ``Theta_m += sum_b coef[r, b, m] q_b q_b^T``, then projection."""
        r, b, d = x.shape
        q = x.to(self.theta.dtype)[:, None].expand(r, self.num_arms, b, d)
        mask = self.theta != 0
        basis, theta, mask, dropped = mirror_step(
            self.basis,
            self.theta,
            mask,
            q,
            coef.transpose(1, 2).to(self.theta.dtype),
            tau.to(self.theta.dtype)[:, None],
            self.beta.to(self.theta.dtype)[:, None],
            self.capacity,
            proj=self._coordinates(x),
            out=self._spare_basis(),
        )
        _swap_storage(self.basis, basis)
        self.theta.copy_(theta)
        rank = mask.sum(-1).to(self.theta.dtype).mean(-1)  # [R]
        return {"rank": rank, "dropped": dropped.to(self.theta.dtype).sum(-1)}


def _swap_storage(a: Tensor, b: Tensor) -> None:
    """Exchange the memory of ``a`` and ``b`` (same shape, dtype and device): ``a`` takes
    ``b``'s values without a copy while the tensor objects stay, so a registered buffer
    remains the object its callers hold (``named_buffers()``, e.g. in replay)."""
    held = torch.empty(0, dtype=a.dtype, device=a.device).set_(a)
    a.set_(b)
    b.set_(held)


class HPG(_LowRankQuadPolicy):
    """Hypentropy Policy Gradient (docs/papers/hpg.md): one mirror step per round for every model.

    ``c_m = eta r (1[m = m_t] - pi_m)``; ``Theta_m <- Proj(Theta_m + c_m q q^T)`` with the
    hypentropy projection onto ``||W_m||_* <= tau``. Each round costs ``O(M (d k^2 + k^3))``.

    Args:
        num_trials, num_arms, dim: ``R``, ``K = M``, ``d``.
        tau, beta, eta: radius, hypentropy scale and step (floats or ``[R]`` tensors, > 0).
        capacity: slots per model (``k_max``, default ``min(d, 32)``); when more eigenvalues
            survive the projection the smallest ``|theta|`` are dropped (counted in the
            ``dropped`` metric; an approximation, exact while it stays 0).
    """

    family = "HPG"

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        tau: float | Tensor,
        beta: float | Tensor,
        eta: float | Tensor,
        capacity: int | None = None,
    ) -> None:
        super().__init__(num_trials, num_arms, dim, capacity, beta)
        self.register_buffer("tau", _per_trial(tau, num_trials, "tau", "HPG"))
        self.register_buffer("eta", _per_trial(eta, num_trials, "eta", "HPG"))

    @classmethod
    def from_problem(
        cls,
        problem: Problem,
        rank: int = 4,
        tau: float | None = None,
        beta: float | None = None,
        eta: float | None = None,
        capacity: int | None = None,
        horizon: int | None = None,
        eta_scale: float = 1.0,
    ) -> HPG:
        """Theorem-3 defaults: ``tau = 2 s``, ``beta = 2 s / d``, ``eta = sqrt(M log d / T)``
        with ``d`` each trial's true dimension (``Problem.labels['dim']`` when present);
        ``eta_scale`` multiplies the step (an ablation knob, 1 = Theorem 3)."""
        check_number("HPG", "eta_scale", eta_scale, gt=0)
        check_number("HPG", "rank", rank, ge=1, integer=True)
        dims = trial_dims(problem)
        m = problem.num_arms
        tau = 2.0 * rank if tau is None else tau
        beta = 2.0 * rank / dims if beta is None else beta
        if eta is None:
            t = require_horizon(problem, horizon, "HPG")
            eta = torch.sqrt(m * torch.log(dims.clamp_min(2)) / t)
        eta = eta * eta_scale
        return cls(problem.num_trials, m, problem.dim, tau, beta, eta, capacity)

    def scores(self, x: Tensor) -> Tensor:
        return self.direction_scores(x)

    def update(self, context, decision, feedback, generator=None) -> dict[str, Tensor]:
        weights = self._advantage_weights(
            context, decision, self._played_reward(context, decision, feedback)
        )
        coef = self.eta.to(weights.dtype)[:, None, None] * weights  # [R, B, M]
        metrics = self._step(context.x, coef, self.tau)
        self._tick(context)
        return metrics


class ParameterFreeHPG(_LowRankQuadPolicy):
    """Parameter-free HPG (section 6; paper Section 5.2 / E.2): ``W_m = z_m w_m``.

    Direction ``w_m``: HPG with ``tau = 1``, ``beta = 1/d`` and the adaptive step
    ``eta_t = sqrt(M log(3d) / (2 (1 + sum_{s<t} sum_m ||G_{s,m}||_2^2)))``, on the clipped
    estimator ``G_m = -r_bar (1[m = m_t] - pi_m) q q^T``, ``r_bar = clip(r, -Rc, Rc)``,
    ``Rc = 2 + sqrt(2 log(2 T^2))``. Magnitude ``z_m in [0, Z]`` (``Z = 2d``): a
    Krichevsky-Trofimov bettor on ``g = <G_m, w_m> / Rc`` with the Cutkosky-Orabona
    constraint reduction (play ``z = clip(y, 0, Z)``, feed ``(g + |g| sign(y - z)) / 2``).
    With ``B > 1`` contexts per round, ``g`` is the batch mean (it stays in ``[-1, 1]``).

    Args:
        num_trials, num_arms, dim: ``R``, ``K = M``, ``d``.
        dims: each trial's true dimension (``[R]`` or a float; default ``d``).
        horizon: ``T`` (sets ``Rc``).
        capacity: slots per model (default ``min(d, 32)``).
    """

    family = "HPG"

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        horizon: int,
        dims: float | Tensor | None = None,
        capacity: int | None = None,
    ) -> None:
        dims_t = _per_trial(float(dim) if dims is None else dims, num_trials, "dims", "PF-HPG")
        super().__init__(num_trials, num_arms, dim, capacity, 1.0 / dims_t)
        check_number("ParameterFreeHPG", "horizon", horizon, ge=1, integer=True)
        self.clip = 2.0 + math.sqrt(2 * math.log(2 * float(horizon) ** 2))
        r, m = num_trials, num_arms
        self.register_buffer("log3d", torch.log(3 * dims_t))
        self.register_buffer("z_max", (2 * dims_t))
        self.register_buffer("grad_sq", torch.zeros(r))  # sum_{s<t} sum_m ||G_{s,m}||^2
        self.register_buffer("wealth", torch.ones(r, m))
        self.register_buffer("neg_grad", torch.zeros(r, m))  # sum_{s<t} -g~_s
        self.register_buffer("bets", torch.zeros(r, dtype=torch.long))

    @classmethod
    def from_problem(
        cls, problem: Problem, capacity: int | None = None, horizon: int | None = None
    ) -> ParameterFreeHPG:
        t = require_horizon(problem, horizon, "ParameterFreeHPG")
        dims = trial_dims(problem)
        return cls(problem.num_trials, problem.num_arms, problem.dim, t, dims, capacity)

    def _bet(self) -> tuple[Tensor, Tensor]:
        """KT bet ``y [R, M]`` and the played magnitude ``z = clip(y, 0, Z)``."""
        t = (self.bets + 1).to(self.wealth.dtype)[:, None]
        y = self.neg_grad / t * self.wealth
        z = torch.minimum(y.clamp_min(0), self.z_max.to(y.dtype)[:, None])
        return y, z

    def scores(self, x: Tensor) -> Tensor:
        _, z = self._bet()
        return self.direction_scores(x) * z.to(x.dtype)[:, None, :]

    def update(self, context, decision, feedback, generator=None) -> dict[str, Tensor]:
        reward = self._played_reward(context, decision, feedback)
        reward = reward.clamp(-self.clip, self.clip)
        weights = self._advantage_weights(context, decision, reward)  # -G_m / (q q^T), [R, B, M]
        # magnitude: g_m = <G_m, w_m> / Rc, batch mean
        g = -(weights * self.direction_scores(context.x.to(weights.dtype))).mean(1) / self.clip
        y, z = self._bet()
        g = g.to(y.dtype)
        g_tilde = 0.5 * (g + g.abs() * torch.sign(y - z))
        self.wealth -= g_tilde * y
        self.neg_grad -= g_tilde
        self.bets += 1
        # direction: adaptive step, then HPG's mirror step with tau = 1
        sq_norm = context.x.to(weights.dtype).square().sum(-1)  # [R, B]
        g_norm_sq = (weights * sq_norm[..., None]).square().sum((1, 2))  # [R]
        eta = torch.sqrt(
            self.num_arms * self.log3d / (2 * (1 + self.grad_sq))
        )  # [R], uses rounds s < t
        self.grad_sq += g_norm_sq.to(self.grad_sq)
        coef = eta.to(weights.dtype)[:, None, None] * weights
        metrics = self._step(context.x, coef, torch.ones_like(self.grad_sq))
        metrics["magnitude"] = z.mean(-1).to(self.theta.dtype)
        self._tick(context)
        return metrics
