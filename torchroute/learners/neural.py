"""NeuralUCB (Neural-LinUCB form) trained online, batched over trials (``ALGORITHMS.md`` §2).

Each trial owns an MLP ``f(x, k)``: a shared ReLU trunk of width ``h`` whose output is the
last-layer feature ``phi(x)``, then one linear output per arm. The weights of all ``R``
trials are stacked (``w [R, d_in, d_out]``) and applied with ``torch.baddbmm``, so one
forward or gradient step serves every trial without a Python loop, and the summed loss
gives each trial exactly its own gradient. Uncertainty: per arm
``Z_k = lambda I + sum phi phi^T`` kept as ``Z_k^{-1}`` (Sherman–Morrison / Woodbury),
bonus ``nu sqrt(phi^T Z_k^{-1} phi)``.

The functions below are the batched MLP math; :class:`torchroute.models.NeuralUCBHead` wraps
the same functions as a stand-alone module.
"""

from __future__ import annotations

import itertools
import math
from typing import Literal

import torch
from torch import Tensor

from torchroute.functional.ridge import ridge_width, woodbury
from torchroute.functional.sampling import argmax_random_ties, one_hot_probs
from torchroute.learners.base import Learner
from torchroute.types import Context, Decision, Feedback

_MASK32 = 0xFFFFFFFF


def mlp_param_names(num_layers: int) -> list[str]:
    """Names of the stacked weights: ``w0, b0, ..., w{L-1}, b{L-1}, w_out, b_out``."""
    names = [f"{p}{i}" for i in range(num_layers) for p in ("w", "b")]
    return [*names, "w_out", "b_out"]


def mlp_init(
    num_trials: int,
    dim: int,
    num_arms: int,
    hidden: int = 64,
    num_layers: int = 1,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
) -> dict[str, Tensor]:
    """He-uniform weights for ``R`` independent MLPs (zero biases).

    Returns:
        ``{"w0": [R, d, h], "b0": [R, h], ..., "w_out": [R, h, K], "b_out": [R, K]}``.
    """
    sizes = [dim] + [hidden] * num_layers
    params: dict[str, Tensor] = {}
    for i, (d_in, d_out) in enumerate(itertools.pairwise(sizes)):
        bound = math.sqrt(6.0 / d_in)
        w = torch.rand(num_trials, d_in, d_out, generator=generator, dtype=dtype)
        params[f"w{i}"], params[f"b{i}"] = (
            (2 * w - 1) * bound,
            torch.zeros(num_trials, d_out, dtype=dtype),
        )
    bound = 1.0 / math.sqrt(hidden)
    w = torch.rand(num_trials, hidden, num_arms, generator=generator, dtype=dtype)
    params["w_out"], params["b_out"] = (
        (2 * w - 1) * bound,
        torch.zeros(num_trials, num_arms, dtype=dtype),
    )
    return params


def mlp_forward(params: dict[str, Tensor], x: Tensor) -> tuple[Tensor, Tensor]:
    """Batched MLP: ``x [R, B, d]`` -> ``(f [R, B, K], phi [R, B, h])``."""
    h = x
    for i in range(len(params) // 2 - 1):
        h = torch.relu(torch.baddbmm(params[f"b{i}"][:, None, :], h, params[f"w{i}"]))
    f = torch.baddbmm(params["b_out"][:, None, :], h, params["w_out"])
    return f, h


def z_inverse_update(z_inv: Tensor, phi: Tensor, weight: Tensor) -> Tensor:
    """``Z_k <- Z_k + sum_b w[b, k] phi_b phi_b^T`` on the inverse (Sherman–Morrison/Woodbury).

    Args:
        z_inv: ``[R, K, h, h]``.
        phi: ``[R, B, h]`` features.
        weight: ``[R, B, K]`` (0 leaves arm ``k`` unchanged, 1 adds the observation).

    Returns:
        the updated ``[R, K, h, h]``.
    """
    r, k, h, _ = z_inv.shape
    phis = phi[:, None].expand(r, k, phi.shape[1], h)  # [R, K, B, h]
    dummy = z_inv.new_zeros(r, k, h)
    w = weight.transpose(1, 2).to(z_inv.dtype)  # [R, K, B]
    return woodbury(z_inv, dummy, phis, torch.zeros_like(w), w)[0]


def _hash32(x: Tensor) -> Tensor:
    """A 32-bit integer mix (int64 arithmetic that never overflows)."""
    x = x & _MASK32
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _MASK32
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _MASK32
    return (x >> 16) ^ x


class NeuralUCB(Learner):
    """NeuralUCB with last-layer uncertainty (Neural-LinUCB form), trained online by SGD.

    Each round: ``act`` scores ``f(x, k) + nu sqrt(phi^T Z_k^{-1} phi)`` and plays the
    argmax; ``update`` stores the observed rewards in a per-trial replay buffer
    (``[R, capacity, ...]``, oldest overwritten), adds the observed arms' ``phi phi^T`` to
    ``Z_k``, then takes ``steps`` gradient steps on the squared error of mini-batches of
    ``batch_size`` stored contexts (all observed arms of each). Mini-batch indices are a
    hash of a per-trial seed and the write count, so runs are reproducible and the state is
    all in buffers (weights, optimizer moments, replay, seeds): ``state_dict()`` round-trips.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d`` context features.
        hidden: trunk width ``h`` (64 in the CABS paper).
        num_layers: trunk depth.
        nu: exploration width (0: greedy).
        lam: ``lambda`` of ``Z_k`` (1e-3 in the CABS paper).
        lr: learning rate (1e-3 in the CABS paper).
        optimizer: ``"adam"`` (default) or plain ``"sgd"``.
        weight_decay: L2 penalty on the weights.
        capacity: replay size per trial.
        batch_size: mini-batch size per gradient step.
        steps: gradient steps per ``update``.
        generator: draws the initial weights and per-trial seeds.
        dtype: dtype of the state.

    Shapes:
        ``act``: ``x [R, B, d]`` -> one-hot ``probs [R, B, K]``, ``action [R, B]``.
    """

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        hidden: int = 64,
        num_layers: int = 1,
        nu: float = 1.0,
        lam: float = 1e-3,
        lr: float = 1e-3,
        optimizer: Literal["adam", "sgd"] = "adam",
        weight_decay: float = 0.0,
        capacity: int = 4096,
        batch_size: int = 32,
        steps: int = 1,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__(num_trials, num_arms)
        if optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
        if lam <= 0 or capacity < 1 or batch_size < 1 or steps < 0:
            raise ValueError("need lam > 0, capacity >= 1, batch_size >= 1, steps >= 0")
        self.dim, self.hidden, self.num_layers = dim, hidden, num_layers
        self.nu, self.lam, self.lr, self.optimizer = nu, lam, lr, optimizer
        self.weight_decay, self.capacity = weight_decay, capacity
        self.batch_size, self.steps = batch_size, steps
        self.param_names = mlp_param_names(num_layers)
        params = mlp_init(num_trials, dim, num_arms, hidden, num_layers, generator, dtype)
        for name, value in params.items():
            self.register_buffer(name, value)
            if optimizer == "adam":
                self.register_buffer(f"adam_m_{name}", torch.zeros_like(value))
                self.register_buffer(f"adam_v_{name}", torch.zeros_like(value))
        eye = torch.eye(hidden, dtype=dtype) / lam
        self.register_buffer("z_inv", eye.expand(num_trials, num_arms, hidden, hidden).clone())
        self.register_buffer("replay_x", torch.zeros(num_trials, capacity, dim, dtype=dtype))
        self.register_buffer("replay_y", torch.zeros(num_trials, capacity, num_arms, dtype=dtype))
        self.register_buffer(
            "replay_mask", torch.zeros(num_trials, capacity, num_arms, dtype=torch.bool)
        )
        self.register_buffer("replay_count", torch.zeros(num_trials, dtype=torch.long))
        self.register_buffer("opt_steps", torch.zeros(num_trials, dtype=torch.long))
        seed = torch.randint(0, 2**31 - 1, (num_trials,), generator=generator)
        self.register_buffer("seed", seed)

    def params(self) -> dict[str, Tensor]:
        """The stacked MLP weights (views of the buffers)."""
        return {n: getattr(self, n) for n in self.param_names}

    def _check_context(self, context: Context) -> None:
        super()._check_context(context)
        if context.x.shape[-1] != self.dim:
            raise ValueError(
                f"{type(self).__name__} was built for d={self.dim} features but "
                f"the context has d={context.x.shape[-1]}"
            )

    def predict(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``x [R, B, d]`` -> ``(f, bonus)``, both ``[R, B, K]``, bonus ``sqrt(phi^T Z^-1 phi)``."""
        f, phi = mlp_forward(self.params(), x.to(self.z_inv.dtype))
        return f, ridge_width(self.z_inv, phi)

    def act(self, context: Context, generator: torch.Generator | None = None) -> Decision:
        self._check_context(context)
        with torch.no_grad():
            f, bonus = self.predict(context.x)
            scores = f + self.nu * bonus if self.nu != 0 else f
        action = argmax_random_ties(scores, generator)
        return Decision(probs=one_hot_probs(action, self.num_arms, f.dtype), action=action)

    def update(self, context: Context, decision: Decision, feedback: Feedback) -> dict[str, Tensor]:
        self._check_context(context)
        x = context.x.to(self.z_inv.dtype)  # [R, B, d]
        observed = feedback.observed
        if not self.full_feedback:  # bandit learners learn from the played arm only
            arms = torch.arange(self.num_arms, device=x.device)
            observed = observed & (decision.action[..., None] == arms)
        reward = feedback.reward.to(x.dtype) * observed
        r, b, _ = x.shape
        with torch.no_grad():
            if self.nu != 0:
                _, phi = mlp_forward(self.params(), x)
                self.z_inv.copy_(z_inverse_update(self.z_inv, phi, observed))
            rows = torch.arange(r, device=x.device)[:, None]
            slot = (self.replay_count[:, None] + torch.arange(b, device=x.device)) % self.capacity
            self.replay_x[rows, slot] = x
            self.replay_y[rows, slot] = reward
            self.replay_mask[rows, slot] = observed
            self.replay_count += b
        loss = x.new_zeros(r)
        for step in range(self.steps):
            loss = self._sgd_step(step)
        self._tick(context)
        return {"loss": loss}

    def _sample(self, step: int) -> Tensor:
        """Replay rows ``[R, batch]`` drawn uniformly among the filled slots (hash-based)."""
        base = _hash32(self.seed + _hash32(self.replay_count * self.steps + step))  # [R]
        j = torch.arange(self.batch_size, device=base.device)
        u = _hash32(base[:, None] + j * 0x9E3779B).to(torch.float64) / 2.0**32  # [R, batch]
        filled = self.replay_count.clamp(max=self.capacity).to(torch.float64)[:, None]
        return (u * filled).long()

    def _sgd_step(self, step: int) -> Tensor:
        idx = self._sample(step)  # [R, M]
        rows = torch.arange(idx.shape[0], device=idx.device)[:, None]
        x, y = self.replay_x[rows, idx], self.replay_y[rows, idx]
        mask = self.replay_mask[rows, idx].to(x.dtype)  # [R, M, K]
        names = self.param_names
        with torch.enable_grad():
            leaves = {n: getattr(self, n).detach().requires_grad_(True) for n in names}
            f, _ = mlp_forward(leaves, x)
            per_trial = ((f - y) ** 2 * mask).sum((1, 2)) / mask.sum((1, 2)).clamp_min(1.0)
            grads = torch.autograd.grad(per_trial.sum(), [leaves[n] for n in names])
        with torch.no_grad():
            self.opt_steps += 1
            t = self.opt_steps.to(x.dtype)
            for name, g in zip(names, grads):
                p = getattr(self, name)
                if self.weight_decay:
                    g = g + self.weight_decay * p
                if self.optimizer == "sgd":
                    p.sub_(self.lr * g)
                    continue
                m, v = getattr(self, f"adam_m_{name}"), getattr(self, f"adam_v_{name}")
                m.mul_(0.9).add_(0.1 * g)
                v.mul_(0.999).add_(0.001 * g * g)
                shape = (-1,) + (1,) * (p.ndim - 1)
                m_hat = m / (1 - 0.9**t).reshape(shape)
                v_hat = v / (1 - 0.999**t).reshape(shape)
                p.sub_(self.lr * m_hat / (v_hat.sqrt() + 1e-8))
        return per_trial.detach()


class FullFeedbackNeuralUCB(NeuralUCB):
    """NeuralUCB that observes (and trains on) every arm each round; ``nu = 0`` by default."""

    full_feedback = True

    def __init__(self, num_trials: int, num_arms: int, dim: int, nu: float = 0.0, **kwargs) -> None:
        super().__init__(num_trials, num_arms, dim, nu=nu, **kwargs)
