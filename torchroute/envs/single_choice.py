"""Single-choice routing on a table: replay a shuffled stream, one arm per query."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Literal

import pandas as pd
import torch
from torch import Tensor

from torchroute.data.table import RoutingTable
from torchroute.envs.base import Env
from torchroute.functional.random import Source
from torchroute.functional.utility import utility
from torchroute.types import Context, Decision, Feedback, Outcome, Problem, TrainSplit


class SingleChoiceEnv(Env):
    """Replays the queries of one split of a routing table to ``R`` batched trials.

    Trial ``r`` sees the split in its own random order (a permutation drawn from
    ``seeds[r]``) with its own cost sensitivity ``rho[r]``. The utility of arm ``k`` on a
    query is ``clip(Y - rho C, 0, 1)`` (docs/reference/problem.md). The env reveals the
    played arm, the arms of ``Decision.observe``, or every arm with ``feedback="full"``.

    Args:
        table: the routing table; contexts are ``features`` or ``table.embeddings``.
        rho: ``R`` cost sensitivities (``>= 0``).
        seeds: ``R`` stream seeds (one permutation per trial; the same seed gives the same
            order whatever the other trials are).
        split: the split (or splits) replayed.
        horizon: rounds ``T``; the whole split when ``None``.
        features: ``[n, d]`` bandit features for every table row (defaults to the
            table's embeddings).
        feedback: ``"bandit"`` (the played arm and the requested ones) or ``"full"``.
        device: where every tensor lives.
        dtype: floating dtype of contexts and rewards.

    Shapes:
        ``context(t)``: ``x [R, 1, d]``, ``index [R, 1]``, ``embedding [R, 1, e]`` (the
        table's embeddings, when it has them); ``step`` returns ``Feedback`` ``[R, 1, K]``
        and the outcome ``{utility, regret, score, cost}``, each ``[R, 1]``, plus
        ``share [R, 1, K]`` (the one-hot of the played arm).

    Example:
        >>> env = SingleChoiceEnv(table, rho=[0.0, 500.0], seeds=[0, 0])  # doctest: +SKIP
        >>> learner = LinUCB.from_problem(env.problem())                 # doctest: +SKIP
    """

    curve_keys = ("regret",)
    single_choice = True

    def __init__(
        self,
        table: RoutingTable,
        rho: Sequence[float] | Tensor,
        seeds: Sequence[int] | Tensor,
        split: str | Sequence[str] = "test",
        horizon: int | None = None,
        features: Tensor | None = None,
        feedback: Literal["bandit", "full"] = "bandit",
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        rho_t = torch.as_tensor(rho, dtype=torch.float64).reshape(-1)
        seeds_t = torch.as_tensor(seeds, dtype=torch.long).reshape(-1)
        if rho_t.numel() != seeds_t.numel():
            raise ValueError(f"rho has {rho_t.numel()} entries but seeds has {seeds_t.numel()}")
        if rho_t.numel() == 0:
            raise ValueError("rho and seeds must name at least one trial")
        if (rho_t < 0).any() or not torch.isfinite(rho_t).all():
            raise ValueError(f"rho must be finite and >= 0, got {rho_t.tolist()}")
        if feedback not in ("bandit", "full"):
            raise ValueError(f"feedback must be 'bandit' or 'full', got {feedback!r}")
        feats = table.embeddings if features is None else torch.as_tensor(features)
        if feats is None:
            raise ValueError(
                f"{table.source}: the table has no embeddings and no features were given; "
                "embed the text first (torchroute.models.embed_table) or pass features=[n, d]"
            )
        if feats.ndim != 2 or feats.shape[0] != table.num_queries:
            raise ValueError(
                f"features must be [n={table.num_queries}, d], got {tuple(feats.shape)}"
            )
        if not torch.isfinite(feats).all():
            raise ValueError(f"{table.source}: the features contain NaN or infinite values")
        rows = torch.as_tensor(table.rows(split), dtype=torch.long)
        n_stream = rows.numel()
        horizon = n_stream if horizon is None else int(horizon)
        if not 1 <= horizon <= n_stream:
            raise ValueError(
                f"rounds={horizon} but split {split!r} of {table.source} holds {n_stream} "
                f"queries; ask for 1..{n_stream} rounds"
            )
        self.table = table
        self.split = split
        self.horizon = horizon
        self.feedback = feedback
        self.num_trials = rho_t.numel()
        self.num_arms = table.num_arms
        self.dim = feats.shape[1]
        self.seeds = seeds_t
        # One permutation per trial from its own seed (set-up only, not the hot path).
        perms = torch.stack(
            [
                torch.randperm(n_stream, generator=torch.Generator().manual_seed(int(s)))
                for s in seeds_t
            ]
        )[:, :horizon]
        self._stream = rows[perms].to(device)  # [R, T] table rows
        self._features = feats.to(device=device, dtype=dtype)  # [n, d]
        emb = table.embeddings
        self._embeddings = None if emb is None else emb.to(device=device, dtype=dtype)  # [n, e]
        self._scores = table.scores.to(device=device, dtype=dtype)  # [n, K]
        self._costs = table.costs.to(device=device, dtype=dtype)  # [n, K]
        self.rho = rho_t.to(device=device, dtype=dtype)  # [R]
        # Per-arm score and cost sums over the first ``_arm_rounds`` rounds of each stream,
        # a cache that lets ``summarize`` add only the rounds played since its last call.
        self._arm_rounds = 0
        self._arm_sums = torch.zeros(2, self.num_trials, self.num_arms, dtype=torch.float64)
        self._arm_sums = self._arm_sums.to(device)  # [2, R, K]

    @property
    def device(self) -> torch.device:
        """The device of the env's tensors."""
        return self._stream.device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the contexts and rewards."""
        return self._features.dtype

    def trials(self) -> pd.DataFrame:
        """``rho`` and ``seed`` of every trial."""
        return pd.DataFrame(
            {"rho": self.rho.double().cpu().numpy(), "seed": self.seeds.cpu().numpy()}
        )

    def select_trials(self, index: Sequence[int] | Tensor) -> SingleChoiceEnv:
        """The trials ``index`` (their streams, rho, seeds and cached sums) as a new env."""
        idx = self.trial_index(index)
        env = copy.copy(self)
        env.num_trials = idx.numel()
        env.seeds = self.seeds[idx]
        on = idx.to(self.device)
        env._stream, env.rho, env._arm_sums = self._stream[on], self.rho[on], self._arm_sums[:, on]
        return env

    def problem(self) -> Problem:
        """R, K, d, rho, arm names, mean train prices, the train and validation splits (when
        present; the validation split only when the env does not replay it)."""
        train, validation = self.full_feedback_split("train"), self.full_feedback_split("val")
        prices = None if train is None else train.costs.mean(0)
        return Problem(
            num_trials=self.num_trials,
            num_arms=self.num_arms,
            dim=self.dim,
            rho=self.rho,
            arm_names=tuple(self.table.arm_names),
            prices=prices,
            embed_dim=None if self._embeddings is None else self._embeddings.shape[1],
            train=train,
            horizon=self.horizon,
            device=self.device,
            dtype=self.dtype,
            validation=validation,
        )

    def full_feedback_split(self, split: str) -> TrainSplit | None:
        """Features, scores, costs (and embeddings) of the table's ``split`` rows, or ``None``
        when the table has no such rows or the env replays them (never shown in advance)."""
        replayed = {self.split} if isinstance(self.split, str) else set(self.split)
        if split not in self.table.split or (split != "train" and split in replayed):
            return None
        rows = torch.as_tensor(self.table.rows(split), device=self.device)
        emb = None if self._embeddings is None else self._embeddings[rows]
        return TrainSplit(
            self._features[rows], self._scores[rows], self._costs[rows], embeddings=emb
        )

    def context(self, t: int) -> Context:
        """The contexts of round ``t`` (0-based): ``x [R, 1, d]``, ``index [R, 1]``."""
        index = self._stream[:, t : t + 1]  # [R, 1]
        emb = None if self._embeddings is None else self._embeddings[index]
        return Context(x=self._features[index], index=index, embedding=emb)

    def utilities(self, index: Tensor) -> Tensor:
        """``clip(Y - rho C, 0, 1)`` of the rows ``index [R, B]`` -> ``[R, B, K]``."""
        return utility(self._scores[index], self._costs[index], self.rho[:, None, None])

    def step(
        self, context: Context, decision: Decision, generator: Source = None
    ) -> tuple[Feedback, Outcome]:
        """Reveal the played arm's (and the requested arms') feedback and the round's metrics.

        Args:
            context: the context returned by :meth:`context`.
            decision: the learner's decision (``action [R, B]``, optional ``observe``).
            generator: unused (the table is deterministic given the stream).
        """
        self.check_decision(decision)
        if decision.is_subset:
            raise ValueError(
                "SingleChoiceEnv routes each query to one arm (Decision.action [R, B]), but "
                f"the learner chose subsets {tuple(decision.action.shape)} ([R, B, m])"
            )
        index = context.index
        utility_ = self.utilities(index)  # [R, B, K]
        scores, costs = self._scores[index], self._costs[index]
        action = decision.action[..., None]  # [R, B, 1]
        only_played = self.feedback == "bandit" and decision.observe is None
        if self.feedback == "full":
            observed = torch.ones_like(utility_, dtype=torch.bool)
        else:
            observed = torch.zeros_like(utility_, dtype=torch.bool).scatter_(-1, action, True)
            if decision.observe is not None:
                observed |= decision.observe
        zero = utility_.new_zeros(())
        feedback = Feedback(
            reward=torch.where(observed, utility_, zero),
            observed=observed,
            score=torch.where(observed, scores, zero),
            cost=torch.where(observed, costs, zero),
            only_played=only_played,
        )
        chosen = utility_.gather(-1, action)[..., 0]
        outcome = {
            "utility": chosen,
            "regret": utility_.amax(-1) - chosen,
            "score": scores.gather(-1, action)[..., 0],
            "cost": costs.gather(-1, action)[..., 0],
            "share": torch.zeros_like(scores).scatter_(-1, action, 1.0),
        }
        return feedback, outcome

    def summarize(self, sums: dict[str, Tensor], rounds: int) -> dict[str, Tensor]:
        """``avg_utility``, ``avg_regret``, ``accuracy`` (mean score), ``avg_cost``: ``[R]``.

        With the ``share`` sums, also ``share [R, K]`` (the fraction of rounds each arm was
        played) and the per-arm references over the ``rounds`` queries each trial replayed:
        ``arm_accuracy [R, K]`` (mean score of always playing arm ``k``) and
        ``arm_cost [R, K]`` (its mean cost). The results hold them as ``<name>_<k>``.
        """
        n = max(rounds, 1)
        out = {
            "avg_utility": sums["utility"] / n,
            "avg_regret": sums["regret"] / n,
            "accuracy": sums["score"] / n,
            "avg_cost": sums["cost"] / n,
        }
        if "share" in sums:
            arm = self._arm_totals(rounds).to(sums["share"].device) / n  # [2, R, K]
            out |= {"share": sums["share"] / n, "arm_accuracy": arm[0], "arm_cost": arm[1]}
        return out

    def _arm_totals(self, rounds: int) -> Tensor:
        """Score and cost sums of every arm over each trial's first ``rounds`` queries."""
        if rounds < self._arm_rounds:
            self._arm_rounds, self._arm_sums = 0, torch.zeros_like(self._arm_sums)
        rows = self._stream[:, self._arm_rounds : rounds]  # [R, t] rows not summed yet
        part = torch.stack([self._scores[rows], self._costs[rows]])  # [2, R, t, K]
        self._arm_sums = self._arm_sums + part.sum(2, dtype=torch.float64)
        self._arm_rounds = rounds
        return self._arm_sums

    def fingerprint(self) -> dict[str, Any]:
        """Table hash, split, horizon, feedback mode, seeds and rho (resume compares it)."""
        return {
            "env": type(self).__name__,
            "table": self.table.fingerprint(),
            "split": list(self.split) if not isinstance(self.split, str) else self.split,
            "horizon": self.horizon,
            "feedback": self.feedback,
            "seeds": self.seeds.tolist(),
            "rho": self.rho.detach().cpu().double().tolist(),
        }
