"""NeuralUCB (Neural-LinUCB form) trained online, batched over trials.

Specification: ``docs/reference/learners.md``.

Each trial owns an MLP ``f(x, k)`` (:mod:`torchroute.functional.mlp`); the weights of all
``R`` trials are stacked ``nn.Parameter`` s ``[R, ...]`` trained by a ``torch.optim``
optimizer on the loss summed over trials. Uncertainty: per arm
``Z_k = lambda I + sum phi phi^T`` kept as ``Z_k^{-1}`` (Sherman–Morrison / Woodbury),
bonus ``nu sqrt(phi^T Z_k^{-1} phi)``.

(Over 400 lines: the warm start, :meth:`NeuralUCB.warm_start`, sits beside the training
step, replay and ``Z`` update it reuses.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor, nn

from torchroute.checks import check_number
from torchroute.functional.availability import mask_scores
from torchroute.functional.mlp import mlp_forward, mlp_init, mlp_param_names, z_inverse_update_
from torchroute.functional.random import Source, uniform
from torchroute.functional.ridge import ridge_width
from torchroute.functional.sampling import argmax_random_ties, one_hot_probs
from torchroute.learners.base import Learner
from torchroute.learners.ridge_base import RidgeLearner
from torchroute.types import Context, Decision, Feedback, Problem

if TYPE_CHECKING:
    from torchroute.learners.warm_options import WarmStart
    from torchroute.learners.warm_start import WarmRows


class NeuralUCB(Learner):
    """NeuralUCB with last-layer uncertainty (Neural-LinUCB form), trained online.

    NeuralUCB (Zhou et al. 2020) in the last-layer form of Neural-LinUCB (Xu et al. 2020), the
    neural reward model of the CABS paper (``docs/reference/learners.md``).
    ``act`` plays the argmax of ``f(x, k) + nu sqrt(phi^T Z_k^{-1} phi)`` (random tie-break).
    ``update`` adds the observed arms' ``phi phi^T`` to ``Z_k`` (only when ``nu != 0``), stores
    the contexts with their observed rewards in a per-trial replay (``[R, capacity, ...]``,
    oldest overwritten), then takes ``steps`` optimizer steps, each on the squared error of
    ``batch_size`` replay rows drawn uniformly (with ``generator``) among the filled ones, over
    every observed arm of each row. ``feedback.observed`` is used as given.

    Prices: ``f`` estimates the utility at the reference prices (``Problem.prices``); with
    ``Context.prices`` (a known price change) ``act`` moves its scores by
    ``-rho (p_now - p_ref)`` and ``update`` stores the observed utility moved to the
    reference prices (:meth:`~torchroute.learners.Learner.reference_feedback`).

    The weights are ``nn.Parameter`` s stacked over trials, trained by ``torch.optim.Adam`` or
    ``torch.optim.SGD`` on the loss summed over trials: trials get their own gradients, and as
    both optimizers act elementwise each trial follows exactly its own optimizer. The
    optimizer state travels in ``state_dict()`` as extra state. Being parameters, the weights
    can also be trained offline by any ``torch.optim`` optimizer, with :meth:`loss`.

    Args:
        num_trials: ``R``.
        num_arms: ``K``.
        dim: ``d`` context features.
        hidden: trunk width ``h`` (64 in the CABS paper).
        num_layers: trunk depth.
        nu: exploration width (0: greedy on ``f``).
        lam: ``lambda`` of ``Z_k`` (1e-3 in the CABS paper).
        lr: learning rate (1e-3 in the CABS paper).
        optimizer: ``"adam"`` (default) or plain ``"sgd"``.
        weight_decay: L2 penalty on the weights (added to the gradient).
        capacity: replay size per trial.
        batch_size: mini-batch size per optimizer step.
        steps: optimizer steps per ``update``.
        generator: draws the initial weights.
        dtype: dtype of the weights and the state.
        sample_weights: keep a per-cell sample weight in the replay (``replay_w``) so that
            :meth:`fit_weighted` can train on a weighted squared error.
        new_arm_bonus: added to the score of an arm never observed (a ``seen [R, K]``
            count of observations; a model that has just arrived is tried soon); 0 (the
            default) adds nothing and no state.

    Shapes:
        ``act``: ``x [R, B, d]`` -> one-hot ``probs [R, B, K]``, ``action [R, B]``;
        ``forward``: ``x [R, B, d]`` -> ``(f [R, B, K], phi [R, B, h])``;
        ``z_inv``: ``[R, K, h, h]``; ``update`` returns ``{"loss": [R]}``.

    Example:
        >>> learner = NeuralUCB.from_problem(env.problem(), hidden=64)  # doctest: +SKIP
    """

    reads_prices = True

    device_tolerance = "neural"  # MLPs trained with Adam

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
        generator: Source = None,
        dtype: torch.dtype = torch.float32,
        sample_weights: bool = False,
        new_arm_bonus: float = 0.0,
    ) -> None:
        super().__init__(num_trials, num_arms)
        name = type(self).__name__
        self._init_new_arm_bonus(new_arm_bonus)
        for arg, value, bounds in (
            ("dim", dim, {"ge": 1, "integer": True}),
            ("hidden", hidden, {"ge": 1, "integer": True}),
            ("num_layers", num_layers, {"ge": 1, "integer": True}),
            ("nu", nu, {"ge": 0}),
            ("lam", lam, {"gt": 0}),
            ("lr", lr, {"gt": 0}),
            ("weight_decay", weight_decay, {"ge": 0}),
            ("capacity", capacity, {"ge": 1, "integer": True}),
            ("batch_size", batch_size, {"ge": 1, "integer": True}),
            ("steps", steps, {"ge": 0, "integer": True}),
        ):
            check_number(name, arg, value, **bounds)
        if optimizer not in ("adam", "sgd"):
            raise ValueError(f"{name}: optimizer must be 'adam' or 'sgd', got {optimizer!r}")
        self.dim, self.hidden, self.num_layers = int(dim), int(hidden), int(num_layers)
        self.nu, self.lam, self.lr, self.optimizer = float(nu), float(lam), float(lr), optimizer
        self.weight_decay, self.capacity = float(weight_decay), int(capacity)
        self.batch_size, self.steps = int(batch_size), int(steps)
        self.param_names = mlp_param_names(self.num_layers)
        init = mlp_init(
            num_trials, self.dim, num_arms, self.hidden, self.num_layers, generator, dtype
        )
        for key, value in init.items():
            self.register_parameter(key, nn.Parameter(value))
        eye = torch.eye(self.hidden, dtype=dtype) / self.lam
        self.register_buffer("z_inv", eye.expand(num_trials, num_arms, *eye.shape).clone())
        r, c = num_trials, self.capacity
        self.register_buffer("replay_x", torch.zeros(r, c, self.dim, dtype=dtype))
        self.register_buffer("replay_y", torch.zeros(r, c, num_arms, dtype=dtype))
        self.register_buffer("replay_mask", torch.zeros(r, c, num_arms, dtype=torch.bool))
        self.register_buffer("replay_count", torch.zeros(r, dtype=torch.long))
        self.sample_weights = bool(sample_weights)
        if self.sample_weights:
            self.register_buffer("replay_w", torch.zeros(r, c, num_arms, dtype=dtype))
        self._optim = self._make_optimizer()

    # the ridge learners' new-arm bonus: a ``seen [R, K]`` count and a score bonus
    _init_new_arm_bonus = RidgeLearner._init_new_arm_bonus
    _add_new_arm_bonus = RidgeLearner._add_new_arm_bonus

    @classmethod
    def from_problem(cls, problem: Problem, **hparams: Any) -> NeuralUCB:
        """``cls(R, K, d, **hparams)``; initial weights from ``problem.init_rng`` when set."""
        if problem.init_rng is not None:
            hparams.setdefault("generator", problem.init_rng)
        return cls(problem.num_trials, problem.num_arms, problem.dim, **hparams)

    # ----------------------------------------------------------------- optimizer state
    def _make_optimizer(self) -> torch.optim.Optimizer:
        params = list(self.params().values())
        if self.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.lr, weight_decay=self.weight_decay)
        return torch.optim.SGD(params, lr=self.lr, weight_decay=self.weight_decay)

    def get_extra_state(self) -> dict[str, Any]:
        """The optimizer's ``state_dict()`` (moments ``[R, ...]``; Adam's ``step`` is a scalar)."""
        return self._optim.state_dict()

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Load an optimizer ``state_dict()`` saved by :meth:`get_extra_state`."""
        if ("betas" in state["param_groups"][0]) != (self.optimizer == "adam"):
            raise ValueError(
                f"{type(self).__name__}: the checkpoint's optimizer state does not belong to "
                f"optimizer={self.optimizer!r}"
            )
        # Optimizer.load_state_dict keeps tensors that already have the right device and
        # dtype; clone them so that this learner never shares moments with the source.
        state = {
            "state": {
                i: {k: v.clone() if isinstance(v, Tensor) else v for k, v in s.items()}
                for i, s in state["state"].items()
            },
            "param_groups": state["param_groups"],
        }
        self._optim = self._make_optimizer()
        self._optim.load_state_dict(state)

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> NeuralUCB:
        super()._apply(fn, recurse)
        if "_optim" in self.__dict__:
            # Re-bind the optimizer to the (possibly new) parameters; load_state_dict casts the
            # moments to each parameter's device and dtype (Adam's step stays a CPU scalar).
            state = self._optim.state_dict()
            self._optim = self._make_optimizer()
            self._optim.load_state_dict(state)
        return self

    # ----------------------------------------------------------------- model
    def params(self) -> dict[str, Tensor]:
        """The stacked MLP weights ``{"w0": [R, d, h], ..., "b_out": [R, K]}`` (parameters)."""
        return {key: getattr(self, key) for key in self.param_names}

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``x [R, B, d]`` -> ``(f [R, B, K], phi [R, B, h])``."""
        return mlp_forward(self.params(), x.to(self.w_out.dtype))

    def predict(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``x [R, B, d]`` -> ``(f, bonus)``, both ``[R, B, K]``, bonus ``sqrt(phi^T Z^-1 phi)``."""
        f, phi = self(x)
        return f, ridge_width(self.z_inv, phi)

    def loss(
        self, x: Tensor, reward: Tensor, observed: Tensor, weight: Tensor | None = None
    ) -> Tensor:
        """Per-trial mean (weighted) squared error over the observed entries of a mini-batch.

        Args:
            x: ``[R, M, d]`` contexts.
            reward: ``[R, M, K]``; entries where ``observed`` is False are never read.
            observed: ``[R, M, K]`` bool.
            weight: optional sample weights ``[R, M, K]``: ``sum w err^2 / #observed``.

        Returns:
            ``[R]`` (0 for a trial without observed entries).
        """
        f, _ = self(x)
        err = torch.where(observed, f - torch.where(observed, reward.to(f.dtype), 0.0), 0.0)
        count = observed.sum((1, 2)).clamp_min(1).to(f.dtype)
        sq = err * err
        if weight is not None:
            sq = sq * torch.where(observed, weight.to(f.dtype), 0.0)
        return sq.sum((1, 2)) / count

    # ----------------------------------------------------------------- bandit interface
    def act(self, context: Context, generator: Source = None) -> Decision:
        """The arm with the largest ``f(x, k) + nu sqrt(phi^T Z_k^-1 phi)``.

        Returns:
            One-hot ``probs [R, B, K]`` and ``action [R, B]``.
        """
        self._check_context(context)
        with torch.no_grad():
            if self.nu != 0:
                f, bonus = self.predict(context.x)
                scores = f + self.nu * bonus  # [R, B, K]
            else:  # greedy: the bonus (a read of every Z_k^-1) would be multiplied by 0
                scores = f = self(context.x)[0]
        scores = self.priced_scores(self._add_new_arm_bonus(scores), context)
        action = argmax_random_ties(mask_scores(scores, context.available), generator)
        return Decision(probs=one_hot_probs(action, self.num_arms, f.dtype), action=action)

    def update(
        self,
        context: Context,
        decision: Decision,
        feedback: Feedback,
        generator: Source = None,
    ) -> dict[str, Tensor]:
        """Store the observations, update ``Z_k^-1`` and take the SGD steps on the replay.

        Returns:
            ``{"loss": [R]}``, the training loss per trial.
        """
        self._check_context(context)
        self._check_feedback(context, feedback)
        feedback = self.reference_feedback(context, feedback)  # at the reference prices
        return self._learn(context, feedback.reward, feedback.observed, None, generator)

    def fit_weighted(
        self,
        context: Context,
        action: Tensor,
        target: Tensor,
        weight: Tensor,
        generator: Source = None,
    ) -> dict[str, Tensor]:
        """:meth:`update` on targets ``[R, B, K]`` with sample weights ``[R, B, K]`` (0: unseen).

        The replay keeps the weights and the optimizer steps take the weighted squared error
        (needs ``sample_weights=True``); ``Z_k`` counts every cell with ``w > 0`` once.
        """
        if not self.sample_weights:
            raise ValueError(f"{type(self).__name__}.fit_weighted needs sample_weights=True")
        self._check_context(context)
        return self._learn(context, target, weight > 0, weight, generator)

    def _learn(
        self,
        context: Context,
        target: Tensor,
        observed: Tensor,
        weight: Tensor | None,
        generator: Source,
    ) -> dict[str, Tensor]:
        x = context.x.to(self.w_out.dtype)  # [R, B, d]
        reward = torch.where(observed, target.to(x.dtype), 0.0)
        if self.sample_weights:
            weight = observed.to(x.dtype) if weight is None else weight
            weight = torch.where(observed, weight.to(x.dtype), 0.0)
        with torch.no_grad():
            if self.nu != 0:
                _, phi = self(x)
                z_inverse_update_(self.z_inv, phi, observed)
            self._store(x, reward, observed, weight)
            if self.new_arm_bonus:
                self.seen.add_(observed.sum(1).to(self.seen.dtype))
        loss = x.new_zeros(self.num_trials)
        for _ in range(self.steps):
            loss = self.train_step(*self.sample_replay(generator))
        self._tick(context)
        return {"loss": loss}

    def _store(
        self, x: Tensor, reward: Tensor, observed: Tensor, weight: Tensor | None = None
    ) -> None:
        """Write the last ``min(B, capacity)`` contexts into the ring buffer of each trial."""
        b = x.shape[1]
        keep = min(b, self.capacity)
        offset = torch.arange(b - keep, b, device=x.device)
        slot = (self.replay_count[:, None] + offset) % self.capacity  # [R, keep]
        rows = torch.arange(self.num_trials, device=x.device)[:, None]
        self.replay_x[rows, slot] = x[:, b - keep :]
        self.replay_y[rows, slot] = reward[:, b - keep :]
        self.replay_mask[rows, slot] = observed[:, b - keep :]
        if weight is not None:
            self.replay_w[rows, slot] = weight[:, b - keep :]
        self.replay_count += b

    def sample_replay(self, generator: Source = None) -> tuple[Tensor, ...]:
        """A mini-batch drawn uniformly, with replacement, among each trial's filled rows.

        Returns:
            ``(x [R, M, d], reward [R, M, K], observed [R, M, K])`` with ``M = batch_size``
            (rows of a trial with an empty replay observe nothing), plus the sample weights
            ``[R, M, K]`` when ``sample_weights``.
        """
        filled = self.replay_count.clamp(max=self.capacity)[:, None]  # [R, 1]
        u = uniform(generator, (self.num_trials, self.batch_size), device=filled.device)
        idx = torch.minimum((u * filled).long(), (filled - 1).clamp_min(0))  # [R, M]
        rows = torch.arange(self.num_trials, device=idx.device)[:, None]
        batch = self.replay_x[rows, idx], self.replay_y[rows, idx], self.replay_mask[rows, idx]
        return (*batch, self.replay_w[rows, idx]) if self.sample_weights else batch

    def train_step(
        self, x: Tensor, reward: Tensor, observed: Tensor, weight: Tensor | None = None
    ) -> Tensor:
        """One optimizer step on ``loss(x, reward, observed, weight).sum()``; the ``[R]`` loss."""
        params = list(self.params().values())
        with torch.enable_grad():
            per_trial = self.loss(x, reward, observed, weight)
            grads = torch.autograd.grad(per_trial.sum(), params)
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        self._optim.step()
        for p in params:
            p.grad = None
        return per_trial.detach()

    def warm_start(self, rows: WarmRows, problem: Problem, warm: WarmStart) -> None:
        """``max(warm.epochs)`` passes of mini-batch :meth:`train_step` s over the rows
        (batches of ``batch_size``, a fixed shuffle), each trial keeping the weights after
        the listed epoch count whose greedy policy scores best on ``problem.validation``
        (several ``warm.epochs``); then the last ``capacity`` rows go into the replay and
        ``Z_k`` takes every observed row's last-layer features. Rows of
        ``problem.hidden_arms`` are never observed."""
        from torchroute.learners.warm_start import PerTrialBest, arm_scale, greedy_value

        r, n, dt, dev = self.num_trials, rows.x.shape[0], self.w_out.dtype, self.w_out.device
        x = rows.x.to(dev, dt)
        known = arm_scale(problem, dev) > 0  # [R, K]
        observed = (rows.weight > 0).to(dev)[None] & known[:, None]  # [R, n, K]
        weight = rows.weight.to(dev, dt)[None].expand(r, -1, -1)
        target = torch.where(observed, rows.target.to(dev, dt), 0.0)
        sample_w = None if rows.action is None else weight
        gen = torch.Generator().manual_seed(0)
        best = PerTrialBest()
        val = problem.require_validation(type(self).__name__) if warm.chooses else None
        for epoch in range(1, max(warm.epochs) + 1):
            order = torch.randperm(n, generator=gen).to(dev)
            for lo in range(0, n, self.batch_size):
                idx = order[lo : lo + self.batch_size]
                w_b = None if sample_w is None else sample_w[:, idx]
                self.train_step(
                    x[idx][None].expand(r, -1, -1), target[:, idx], observed[:, idx], w_b
                )
            if val is not None and epoch in warm.epochs:
                with torch.no_grad():
                    score = greedy_value(
                        self(val.features.to(dev, dt)[None].expand(r, -1, -1))[0], val, problem.rho
                    )
                best.offer({k: v.detach().clone() for k, v in self.params().items()}, score)
        with torch.no_grad():
            if best.state is not None:
                for k, v in self.params().items():
                    v.copy_(best.state[k])
            tail = slice(n - min(n, self.capacity), n)
            kept_w = weight[:, tail] if self.sample_weights else None
            self._store(x[tail][None].expand(r, -1, -1), target[:, tail], observed[:, tail], kept_w)
            if self.nu != 0:
                for lo in range(0, n, 1024):
                    _, phi = self(x[lo : lo + 1024][None].expand(r, -1, -1))
                    z_inverse_update_(self.z_inv, phi, observed[:, lo : lo + 1024])


class FullFeedbackNeuralUCB(NeuralUCB):
    """NeuralUCB that asks for every arm's reward each round (a full-information baseline).

    ``act`` returns ``Decision.observe`` all True, so the environment reveals every arm and
    every arm's output trains each round; ``nu = 0`` by default (greedy), as in the CABS
    experiments. Arguments as :class:`NeuralUCB`.
    """

    feedback = "full"

    def __init__(
        self, num_trials: int, num_arms: int, dim: int, nu: float = 0.0, **kwargs: Any
    ) -> None:
        super().__init__(num_trials, num_arms, dim, nu=nu, **kwargs)

    def act(self, context: Context, generator: Source = None) -> Decision:
        """NeuralUCB's greedy decision (``nu = 0``), asking to observe every arm."""
        decision = super().act(context, generator)
        observe = torch.ones_like(decision.probs, dtype=torch.bool)
        return Decision(probs=decision.probs, action=decision.action, observe=observe)
