"""Multinomial subset routing with sum-max rewards and long-run cost constraints (paper 002).

docs/papers/subset.md. Per round each trial's learner draws ``M`` experts i.i.d. from its
distribution (``Decision.action [R, 1, M]``); the routed subset is the set of distinct
draws; the reward ``r_t(A) = sum_n max_{i in A} V^(t)[n, i]`` is the only feedback
(``Feedback.set_reward``); the realised cost is ``l_t = sum_{i in A} c_i``. The target is
the box ``S_ori = [lower, upper]`` for the time average of ``l_t``.

Metrics (``summarize``): ``avg_reward``; ``r1`` = objective regret against the final policy
(the last decision's ``probs``), ``r1_opt`` against the cvxpy ``OPT`` policy (evaluated
exactly on every realised ``V^(t)``, also a curve); ``r2`` = Euclidean distance of the
average cost vector to ``S_ori``; ``feasible`` = ``r2 <= 1e-9`` and ``feasible_1e3`` =
``r2 <= 1e-3`` (the paper states no rule for judging feasibility; both are reported);
``qT_value_<p>`` = the expected reward per round of the final policy in block ``p`` (what
R1 against ``q_T`` at any round ``t`` is formed from: ``mean_{s<t} value[block(s)]`` minus
the average reward up to ``t``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from torchroute.envs.base import Env
from torchroute.envs.streams import env_noise_keys, trial_source
from torchroute.envs.subset.opt import solve_opt
from torchroute.functional.projections import box_distance, safe_box
from torchroute.functional.random import Source, gamma
from torchroute.functional.subset import expected_sum_max, subset_mask, sum_max_reward
from torchroute.functional.threads import single_threaded
from torchroute.types import Context, Decision, Feedback, Problem

FEASIBLE_TOL = 1e-9
#: the stated looser tolerance (an average cost within 1e-3 of the box)
FEASIBLE_TOL_LOOSE = 1e-3


@dataclass(frozen=True)
class SubsetProblem(Problem):
    """A :class:`Problem` plus what subset learners know up front (docs/papers/subset.md).

    Attributes:
        draws: ``M``.
        costs: ``[R, d, K]`` per-expert cost vectors ``c_i`` (columns).
        lower, upper: ``[R, d]`` the target box ``S_ori`` (``-inf`` / ``+inf``: no bound).
        num_facets: ``N``.
        context_names: the name of each coordinate of a one-hot context ``x [R, B, X]``
            (a finite context set, e.g. a table's query groups); empty when unnamed.
    """

    draws: int = 1
    costs: Tensor | None = None
    lower: Tensor | None = None
    upper: Tensor | None = None
    num_facets: int = 1
    context_names: tuple[str, ...] = ()

    def safe_set(self) -> tuple[Tensor, Tensor]:
        """The safe surrogate box ``(lo, hi)``, each ``[R, d]``."""
        return safe_box(self.lower, self.upper, self.draws, self.costs.amax(-1))


def check_subset_inputs(
    who: str, values: Tensor, costs: Tensor, lower: Tensor, upper: Tensor, draws: int
) -> None:
    """One-line errors for the bad inputs of docs/papers/subset.md (names the field)."""
    r, k = values.shape[0], values.shape[-1]
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"{who}: facet values must be finite, got NaN/inf")
    if isinstance(draws, bool) or not isinstance(draws, int) or not 1 <= draws <= k:
        raise ValueError(f"{who}: draws (M) must be an integer in 1..K={k}, got {draws!r}")
    if costs.ndim != 3 or costs.shape[0] != r or costs.shape[2] != k:
        raise ValueError(
            f"{who}: costs must be [R={r}, d, K={k}] (one cost vector per expert), "
            f"got {tuple(costs.shape)}"
        )
    d = costs.shape[1]
    if tuple(lower.shape) != (r, d) or tuple(upper.shape) != (r, d):
        raise ValueError(
            f"{who}: the target box (lower, upper) must be [R={r}, d={d}], got "
            f"{tuple(lower.shape)} and {tuple(upper.shape)}"
        )
    if not bool(torch.isfinite(costs).all()) or bool((costs < 0).any()):
        raise ValueError(f"{who}: costs must be finite and >= 0")
    # reachable per-round costs: at least the cheapest expert, at most the M dearest
    least = costs.amin(-1)
    most = costs.topk(draws, dim=-1).values.sum(-1)
    if bool((upper < least).any() | (lower > most).any() | (lower > upper).any()):
        raise ValueError(
            f"{who}: the target box [lower, upper] lies outside the reachable costs "
            "[cheapest expert, sum of the M dearest] of some coordinate"
        )


class SubsetEnv(Env):
    """Sum-max subset routing over block-wise mean facet values, with optional Beta noise.

    Args:
        means: ``[R, P, N, K]`` mean facet values per block (``P`` equal blocks of the
            horizon; ``P = 1`` for a stationary world).
        costs: ``[R, d, K]``. lower, upper: ``[R, d]`` target box.
        draws: ``M``.
        horizon: ``T``.
        trials: one row of labels per trial (e.g. ``seed, env, constraint``).
        kappa: Beta concentration of ``V^(t) ~ Beta(kappa m, kappa (1 - m))``; ``None``:
            ``V^(t)`` is the block mean.
        opt_floor: the floor ``gamma`` of the ``OPT`` policy (``None``: ``1 / (10 K)``).
        device, dtype: where the tensors live.
    """

    curve_keys: tuple[str, ...] = ("reward", "r1_opt")
    #: rounds of a block share one value distribution (``qT_value_<p>`` is meaningful)
    stationary_blocks: bool = True
    #: attributes with a leading trial dimension (what :meth:`select_trials` slices)
    _trial_tensors: tuple[str, ...] = (
        "means", "costs", "lower", "upper", "q_opt", "last_probs", "noise_keys",
    )  # fmt: skip

    def __init__(
        self,
        means: Tensor,
        costs: Tensor,
        lower: Tensor,
        upper: Tensor,
        draws: int,
        horizon: int,
        trials: pd.DataFrame,
        kappa: float | None = None,
        opt_floor: float | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        name = type(self).__name__
        check_subset_inputs(name, means, costs, lower, upper, draws)
        if kappa is not None and not kappa > 0:
            raise ValueError(f"{name}: kappa must be > 0 or null, got {kappa!r}")
        self.num_trials, _, self.num_facets, self.num_arms = means.shape
        self.horizon, self.draws, self.kappa = int(horizon), int(draws), kappa
        self._labels = trials.reset_index(drop=True)
        self._dtype = dtype
        self.means = means.to(device, torch.float64)
        self.costs = costs.to(device, torch.float64)
        self.lower, self.upper = lower.to(device, torch.float64), upper.to(device, torch.float64)
        self.dim_cost = costs.shape[1]
        self.curve_keys = ("reward", "r1_opt", *(f"cost_{j}" for j in range(self.dim_cost)))
        self.opt_floor = 1.0 / (10 * self.num_arms) if opt_floor is None else float(opt_floor)
        self._t = 0
        self._monte_carlo: dict[tuple[int, bytes], Tensor] = {}  # see _noisy_values
        self._last_block_values: tuple[Tensor, Tensor] | None = None  # (q, [R, P])
        self.q_opt = self._solve_opt().to(device)
        self.last_probs = torch.full(
            (self.num_trials, self.num_arms), 1.0 / self.num_arms, device=device
        )
        # [R] keys of the trials' own noise streams (from their labels, :meth:`trials`)
        self.noise_keys = env_noise_keys(self.trials(), device)

    # ----------------------------------------------------------------- set-up
    def _opt_inputs(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """``(values [P, N, K], weights [P])`` of trial ``r`` for the ``OPT`` solve."""
        values, weights = np.unique(self.means[r].cpu().numpy(), axis=0, return_counts=True)
        return values, weights.astype(float)

    def _solve_opt(self) -> Tensor:
        lo, hi = self.safe_set()
        cache: dict[bytes, np.ndarray] = {}
        out = []
        for r in range(self.num_trials):  # set-up only
            values, weights = self._opt_inputs(r)
            args = (values, weights, self.costs[r].cpu().numpy(), lo[r].cpu().numpy())
            args = (*args, hi[r].cpu().numpy())
            key = b"".join(np.ascontiguousarray(a).tobytes() for a in args)
            if key not in cache:
                cache[key] = solve_opt(*args, draws=self.draws, gamma=self.opt_floor)
            out.append(torch.as_tensor(cache[key]))
        return torch.stack(out)

    def safe_set(self) -> tuple[Tensor, Tensor]:
        """The safe box ``(lo, hi)`` of each trial, ``[R, d]``."""
        return safe_box(self.lower, self.upper, self.draws, self.costs.amax(-1))

    # --------------------------------------------------------------- protocol
    @property
    def device(self) -> torch.device:
        return self.means.device

    def trials(self) -> pd.DataFrame:
        """The labels, plus the target box ``lower_j, upper_j`` (``+-inf``: no bound)."""
        frame = self._labels.copy()
        for j in range(self.dim_cost):
            frame[f"lower_{j}"] = self.lower[:, j].cpu().numpy()
            frame[f"upper_{j}"] = self.upper[:, j].cpu().numpy()
        return frame

    def _numeric_labels(self) -> dict[str, Tensor]:
        out = {}
        for column in self._labels.columns:
            if pd.api.types.is_numeric_dtype(self._labels[column]):
                values = np.array(self._labels[column].to_numpy(), dtype=float)
                out[column] = torch.tensor(values, dtype=torch.float64)
            else:
                codes = pd.Categorical(self._labels[column]).codes
                out[column] = torch.tensor(np.array(codes), dtype=torch.float64)
        return out

    def select_trials(self, index: Sequence[int] | Tensor) -> SubsetEnv:
        """The trials ``index`` (labels, means, costs, targets, OPT, state) as a new env."""
        idx = self.trial_index(index)
        env = copy.copy(self)
        env._last_block_values = None  # another set of trials
        env.num_trials = idx.numel()
        env._labels = self._labels.iloc[idx.numpy()].reset_index(drop=True)
        on = idx.to(self.device)
        for name in self._trial_tensors:
            setattr(env, name, getattr(self, name)[on])
        return env

    def problem(self) -> SubsetProblem:
        r = self.num_trials
        return SubsetProblem(
            num_trials=r,
            num_arms=self.num_arms,
            dim=self.context(0).x.shape[-1],
            rho=torch.zeros(r, dtype=torch.float64),
            arm_names=tuple(f"expert{i}" for i in range(self.num_arms)),
            horizon=self.horizon,
            device=self.device,
            dtype=self._dtype,
            labels=self._numeric_labels(),
            draws=self.draws,
            costs=self.costs.to(self._dtype),
            lower=self.lower.to(self._dtype),
            upper=self.upper.to(self._dtype),
            num_facets=self.num_facets,
        )

    def context(self, t: int) -> Context:
        self._t = t
        return Context(x=torch.ones(self.num_trials, 1, 1, device=self.device, dtype=self._dtype))

    def block(self, t: int) -> int:
        """The block of round ``t`` (``P`` equal blocks of the horizon)."""
        p = self.means.shape[1]
        return min(t * p // self.horizon, p - 1)

    def values(self, t: int, context: Context, generator: Source) -> Tensor:
        """The facet values ``V^(t)`` of round ``t``, ``[R, N, K]`` float64.

        The Beta noise of each trial comes from its own stream
        (:func:`torchroute.envs.streams.trial_source` of ``generator``), so a trial's values
        do not depend on the trials beside it. On the CPU it is drawn on one intra-op thread
        (:func:`torchroute.functional.threads.single_threaded`): its sampler runs a few
        hundred operators on tensors of ``R N K`` elements, and with torch's default threads
        on a busy machine each one waits for a descheduled worker (20x the CPU time measured
        at ``R = 160, N = 3, K = 50``).
        """
        mean = self.means[:, self.block(t)]
        if self.kappa is None:
            return mean
        m = mean.clamp(1e-6, 1 - 1e-6)
        with single_threaded(self.device):  # many small operators: no fork-join per operator
            streams = trial_source(generator, self.noise_keys)
            a = gamma(streams, self.kappa * m)
            b = gamma(streams, self.kappa * (1 - m))
            return a / (a + b).clamp_min(1e-300)

    def check_decision(self, decision: Decision) -> None:
        super().check_decision(decision)
        if not decision.is_subset or decision.action.shape[-1] != self.draws:
            raise ValueError(
                f"{type(self).__name__} expects Decision.action [R, B, M={self.draws}] "
                f"(M draws), got {tuple(decision.action.shape)}"
            )

    def step(
        self, context: Context, decision: Decision, generator: Source = None
    ) -> tuple[Feedback, dict[str, Tensor]]:
        self.check_decision(decision)
        t = self._t
        values = self.values(t, context, generator)  # [R, N, K]
        mask = subset_mask(decision.action[:, 0], self.num_arms)  # [R, K]
        reward = sum_max_reward(values, mask)  # [R]
        cost = torch.einsum("rdk,rk->rd", self.costs, mask.to(self.costs.dtype))  # [R, d]
        opt = expected_sum_max(self.q_opt.to(values.dtype), values, self.draws)  # [R]
        self.last_probs = decision.probs[:, -1].detach().to(self.last_probs)
        zeros = torch.zeros(*decision.probs.shape, dtype=self._dtype, device=self.device)
        feedback = Feedback(
            reward=zeros,
            observed=torch.zeros_like(zeros, dtype=torch.bool),
            set_reward=reward[:, None].to(self._dtype),
        )
        # computed in float64, reported in the env's dtype (a no-op for float64 runs)
        outcome = {"reward": reward[:, None], "r1_opt": (opt - reward)[:, None]}
        for j in range(self.dim_cost):
            outcome[f"cost_{j}"] = cost[:, j, None]
        return feedback, {key: value.to(self._dtype) for key, value in outcome.items()}

    def policy_value(self, q: Tensor, rounds: int) -> Tensor:
        """``(1/t) sum_{s<t} E_{A ~ q}[r_s(A)]`` of a fixed policy ``q [R, K]``, ``[R]``.

        With noise the expectation over ``V^(s)`` replaces the realised values (200 Monte
        Carlo draws of ``V`` per block from a generator seeded per trial; exact over ``A``).
        """
        p = self.means.shape[1]
        counts = torch.bincount(
            torch.tensor([self.block(t) for t in range(rounds)], dtype=torch.long), minlength=p
        ).to(self.device, torch.float64)  # [P]
        return (self.block_values(q) * counts).sum(-1) / rounds

    def block_values(self, q: Tensor) -> Tensor:
        """``E_{A ~ q, V}[r(A)]`` per block of a fixed policy ``q [R, K]``, ``[R, P]``.

        The Monte Carlo draws of ``V`` are made once per (seed, world) and kept, and the
        last answer is kept too (the loop's last log and the run's result ask for the same
        policy)."""
        last = self._last_block_values
        if last is not None and last[0].shape == q.shape and torch.equal(last[0], q):
            return last[1]
        if self.kappa is None:
            per_block = expected_sum_max(q[:, None], self.means, self.draws)  # [R, P]
        else:
            seeds = self._labels.get("seed", pd.Series(range(self.num_trials))).to_numpy()
            rows = []
            for r in range(self.num_trials):  # end of run only
                values = self._noisy_values(int(seeds[r]), self.means[r])
                rows.append(expected_sum_max(q[r, None, None], values, self.draws).mean(0))
            per_block = torch.stack(rows)
        self._last_block_values = (q.clone(), per_block)
        return per_block

    def _noisy_values(self, seed: int, means: Tensor) -> Tensor:
        """200 draws of ``V`` per block, ``[200, P, N, K]``, for one trial's ``means
        [P, N, K]`` from a generator seeded by ``seed`` (the same for trials of one seed and
        one world; kept)."""
        key = (seed, means.cpu().numpy().tobytes())
        values = self._monte_carlo.get(key)
        if values is None:
            g = torch.Generator(device=self.device).manual_seed(seed + 7919)
            m = means.clamp(1e-6, 1 - 1e-6).expand(200, *means.shape)
            a = torch._standard_gamma(self.kappa * m, generator=g)
            b = torch._standard_gamma(self.kappa * (1 - m), generator=g)
            values = self._monte_carlo[key] = a / (a + b)
        return values

    def summarize(self, sums: dict[str, Tensor], rounds: int) -> dict[str, Tensor]:
        avg_cost = torch.stack([sums[f"cost_{j}"] for j in range(self.dim_cost)], -1) / rounds
        r2 = box_distance(
            avg_cost.to(self.lower), self.lower.to(avg_cost.device), self.upper.to(avg_cost.device)
        )
        avg_reward = sums["reward"] / rounds
        out = {"avg_reward": avg_reward}
        block_values = None
        if rounds >= self.horizon:
            q_ref = self.last_probs.to(torch.float64)
            if self.stationary_blocks:
                block_values = self.block_values(q_ref)  # [R, P]
            out["r1"] = self.policy_value(q_ref, rounds).to(avg_reward) - avg_reward
        out["r1_opt"] = sums["r1_opt"] / rounds
        out["r2"] = r2
        out["feasible"] = (r2 <= FEASIBLE_TOL).to(avg_reward.dtype)
        out["feasible_1e3"] = (r2 <= FEASIBLE_TOL_LOOSE).to(avg_reward.dtype)
        if block_values is not None:
            for p in range(block_values.shape[1]):
                out[f"qT_value_{p}"] = block_values[:, p].to(avg_reward)
        for j in range(self.dim_cost):
            out[f"avg_cost_{j}"] = avg_cost[:, j]
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"last_probs": self.last_probs.clone(), "means": self.means.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the last policy and the block means (the regime schedule: never re-drawn)."""
        self.last_probs = state["last_probs"].to(self.last_probs)
        self.means = state["means"].to(self.means)
        self._last_block_values = None

    def fingerprint(self) -> dict[str, Any]:
        return {
            "env": type(self).__name__,
            "trials": self.trials().to_dict("list"),
            "horizon": self.horizon,
            "draws": self.draws,
            "kappa": self.kappa,
            "means": float(self.means.sum()),
            "costs": float(self.costs.sum()),
        }
