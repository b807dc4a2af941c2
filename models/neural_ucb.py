"""A stand-alone NeuralUCB head, batched over ``R`` trials (``ALGORITHMS.md`` section 2).

The same batched MLP math as the online learner :class:`torchroute.learners.neural.NeuralUCB`
(which holds its weights in buffers and trains itself); here the weights are
``nn.Parameter`` s, so any ``torch.optim`` optimizer can train the head, and the summed loss
over trials gives each trial its own gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from torchroute.functional.ridge import ridge_width
from torchroute.learners.neural import mlp_forward, mlp_init, z_inverse_update


class NeuralUCBHead(nn.Module):
    """``R`` MLPs ``f(x, k)`` (ReLU trunk of width ``h``, one output per arm) plus ``Z_k^{-1}``.

    The trunk output is the last-layer feature ``phi(x)``; per trial and arm the head keeps
    ``Z_k^{-1}`` with ``Z_k = lambda I + sum phi phi^T`` (updated by :meth:`observe`) and
    scores ``f(x, k) + nu sqrt(phi^T Z_k^{-1} phi)``.

    Args:
        num_trials: ``R``.
        dim: ``d`` input features.
        num_arms: ``K``.
        hidden: ``h`` (64 in the CABS paper).
        num_layers: trunk depth.
        lam: ``lambda`` (1e-3 in the CABS paper).
        generator: draws the initial weights.

    Shapes:
        ``forward``: ``x [R, B, d]`` -> ``(f [R, B, K], phi [R, B, h])``;
        ``score``: ``x [R, B, d]`` -> ``[R, B, K]``; ``z_inv``: ``[R, K, h, h]``.
    """

    def __init__(
        self,
        num_trials: int,
        dim: int,
        num_arms: int,
        hidden: int = 64,
        num_layers: int = 1,
        lam: float = 1e-3,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if lam <= 0:
            raise ValueError(f"lam must be > 0, got {lam}")
        self.num_trials, self.dim, self.num_arms = num_trials, dim, num_arms
        self.hidden, self.lam = hidden, lam
        init = mlp_init(num_trials, dim, num_arms, hidden, num_layers, generator)
        self.weights = nn.ParameterDict({n: nn.Parameter(v) for n, v in init.items()})
        eye = torch.eye(hidden) / lam
        self.register_buffer("z_inv", eye.expand(num_trials, num_arms, hidden, hidden).clone())

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return mlp_forward(dict(self.weights.items()), x)

    def width(self, phi: Tensor) -> Tensor:
        """``sqrt(phi^T Z_k^{-1} phi)``: ``phi [R, B, h]`` -> ``[R, B, K]``."""
        return ridge_width(self.z_inv, phi)

    def score(self, x: Tensor, nu: float = 1.0) -> Tensor:
        """UCB scores ``f(x, k) + nu sqrt(phi^T Z_k^{-1} phi)``, ``[R, B, K]``."""
        f, phi = self(x)
        return f + nu * self.width(phi) if nu != 0 else f

    @torch.no_grad()
    def observe(self, x: Tensor, weight: Tensor) -> None:
        """Add ``w[r, b, k] phi phi^T`` to ``Z_k``: ``x [R, B, d]``, ``weight [R, B, K]``.

        Bandit feedback: ``weight`` is the one-hot of the played arm; full feedback: ones.
        """
        _, phi = self(x)
        self.z_inv.copy_(z_inverse_update(self.z_inv, phi, weight))

    def loss(self, x: Tensor, target: Tensor, mask: Tensor) -> Tensor:
        """Per-trial mean squared error on the observed entries: ``[R, B, *]`` -> ``[R]``."""
        f, _ = self(x)
        m = mask.to(f.dtype)
        return ((f - target) ** 2 * m).sum((1, 2)) / m.sum((1, 2)).clamp_min(1.0)
