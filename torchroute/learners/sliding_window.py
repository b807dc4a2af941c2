"""Sliding-window LinUCB and LinTS: the ridge models see only the last ``W`` contexts.

Each trial keeps a ring buffer of its last ``W`` contexts (``x``, the observed rewards and
which arms were observed); a new context enters the statistics and the one it replaces in
the ring leaves them (a downdate ``G_k -= w x x^T``, ``b_k -= w y x``). Every ``W``
contexts the statistics are recomputed from the ring, so rounding does not build up. Each
trial's ring position is its own context count modulo ``W`` (a batched gather and scatter,
no per-trial loop).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from torchroute.checks import check_number
from torchroute.functional.random import Source
from torchroute.learners.gram_base import GramRidgeLearner, GramThompson, gram_terms


class _SlidingWindow(GramRidgeLearner):
    """The ring buffer and its statistics; subclasses score.

    Buffers (besides the statistics): ``ring_x [R, W, d]``, ``ring_reward [R, W, K]``,
    ``ring_weight [R, W, K]`` (0: not observed, or an empty slot).
    """

    chosen_on_validation: ClassVar[tuple[str, ...]] = ("window", "new_arm_bonus", "warm_weight")

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        window: int,
        lam: float,
        new_arm_bonus: float,
        objective: str = "utility",
        cost_model: str = "price",
    ) -> None:
        super().__init__(num_trials, num_arms, dim, lam, new_arm_bonus, objective, cost_model)
        check_number(type(self).__name__, "window", window, ge=1, integer=True)
        self.window = int(window)
        self.register_buffer("ring_x", torch.zeros(num_trials, self.window, self.dim))
        self.register_buffer("ring_reward", torch.zeros(num_trials, self.window, num_arms))
        self.register_buffer("ring_weight", torch.zeros(num_trials, self.window, num_arms))
        # contexts seen (the most of any trial), when to recompute; mirrors ``rounds``
        self._contexts = 0

    def _absorb(self, x: Tensor, reward: Tensor, weight: Tensor) -> None:
        b = x.shape[1]
        if b > self.window:
            raise ValueError(
                f"{type(self).__name__}: a round of B={b} contexts exceeds the window W="
                f"{self.window}"
            )
        # each trial's next slots: its context count modulo W (trials may differ)
        slots = (self.rounds[:, None] + torch.arange(b, device=x.device)) % self.window  # [R, B]
        old = []
        for name, new in (("ring_x", x), ("ring_reward", reward), ("ring_weight", weight)):
            ring = getattr(self, name)
            index = slots[..., None].expand(-1, -1, ring.shape[-1])  # [R, B, d or K]
            old.append(ring.gather(1, index))
            ring.scatter_(1, index, new)
        start, self._contexts = self._contexts, self._contexts + b
        if start // self.window != self._contexts // self.window:
            self._recompute()
            return
        gram_in, target_in = gram_terms(x, reward, weight)
        gram_out, target_out = gram_terms(*old)
        self.gram.add_(gram_in - gram_out)
        self.target.add_(target_in - target_out)

    def _recompute(self) -> None:
        """The statistics of the ring's contexts, summed afresh."""
        gram, target = gram_terms(self.ring_x, self.ring_reward, self.ring_weight)
        self.gram.copy_(gram)
        self.target.copy_(target)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args)
        rounds = state_dict.get(prefix + "rounds")
        if rounds is not None and rounds.numel():
            self._contexts = int(rounds.max())  # once per load, not per round


class SlidingWindowLinUCB(_SlidingWindow):
    """LinUCB on the last ``window`` contexts: ``x^T theta_k + alpha sqrt(x^T V_k^{-1} x)``.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d``.
        window: ``W``, the contexts the models remember.
        alpha: width of the confidence bonus.
        lam: ridge regulariser.
        new_arm_bonus: added to the score of an arm never observed (see
            :class:`~torchroute.learners.gram_base.GramRidgeLearner`).
        objective: ``"utility"`` (the default) or ``"quality_cost"`` (the quality is
            learnt, the score is ``... - rho c_k``; see
            :class:`~torchroute.learners.gram_base.GramRidgeLearner`).
        cost_model: ``"price"`` (the default) or ``"ridge"``: the costs ``c_k`` of
            ``quality_cost`` (:class:`~torchroute.learners.gram_base.GramRidgeLearner`).

    Shapes:
        ``act``: ``x [R, B, d]`` -> one-hot ``probs [R, B, K]``, ``action [R, B]``.
    """

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        window: int = 500,
        alpha: float = 1.0,
        lam: float = 1.0,
        new_arm_bonus: float = 0.0,
        objective: str = "utility",
        cost_model: str = "price",
    ) -> None:
        super().__init__(
            num_trials, num_arms, dim, window, lam, new_arm_bonus, objective, cost_model
        )
        check_number(type(self).__name__, "alpha", alpha, ge=0)
        self.alpha = float(alpha)

    def _scores(self, x: Tensor, generator: Source) -> Tensor:
        mean, _, quad = self.posterior(x)
        return mean + self.alpha * quad.sqrt()


class SlidingWindowLinTS(_SlidingWindow, GramThompson):
    """Linear Thompson sampling on the last ``window`` contexts:
    ``N(x^T theta_k, v^2 x^T V_k^{-1} x)`` per arm.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d``.
        window: ``W``, the contexts the models remember.
        v: posterior scale.
        lam: ridge regulariser.
        new_arm_bonus: added to the score of an arm never observed.
        objective: ``"utility"`` (the default) or ``"quality_cost"`` (a draw of
            ``y_k - rho c_k``; see :class:`~torchroute.learners.gram_base.GramRidgeLearner`).
        cost_model: ``"price"`` (the default) or ``"ridge"``: the costs ``c_k`` of
            ``quality_cost`` (:class:`~torchroute.learners.gram_base.GramRidgeLearner`).

    Shapes:
        ``act``: ``x [R, B, d]`` -> one-hot ``probs [R, B, K]``, ``action [R, B]``.
    """

    def __init__(
        self,
        num_trials: int,
        num_arms: int,
        dim: int,
        window: int = 500,
        v: float = 1.0,
        lam: float = 1.0,
        new_arm_bonus: float = 0.0,
        objective: str = "utility",
        cost_model: str = "price",
    ) -> None:
        super().__init__(
            num_trials, num_arms, dim, window, lam, new_arm_bonus, objective, cost_model
        )
        self._set_scale(v)
