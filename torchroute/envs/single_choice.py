"""Single-choice routing on a table: replay a shuffled stream, one arm per query."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from torchroute.data.table import RoutingTable
from torchroute.types import Context, Decision, Feedback, Outcome


class SingleChoiceEnv:
    """Replays the queries of one split of a routing table to ``R`` batched trials.

    Trial ``r`` sees the split in its own random order (a permutation drawn from
    ``seeds[r]``) with its own cost sensitivity ``rho[r]``. The utility of arm ``k`` on a
    query is ``clip(Y - rho C, 0, 1)`` (ALGORITHMS.md section 1).

    Args:
        table: the routing table; contexts are ``features`` or ``table.embeddings``.
        rho: ``R`` cost sensitivities (``>= 0``).
        seeds: ``R`` stream seeds (one permutation per trial; the same seed gives the same
            order whatever the other trials are).
        split: the split (or splits) replayed.
        horizon: rounds ``T``; the whole split when ``None``.
        features: ``[n, d]`` context features for every table row (overrides embeddings).
        feedback: ``"bandit"`` (the played arm only) or ``"full"`` (every arm).
        device: where every tensor lives.
        dtype: floating dtype of contexts and rewards.

    Shapes:
        ``context(t).x``: ``[R, 1, d]``; ``step`` returns ``Feedback`` ``[R, 1, K]`` and
        ``Outcome`` ``[R, 1]``.
    """

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
        self._scores = table.scores.to(device=device, dtype=dtype)  # [n, K]
        self._costs = table.costs.to(device=device, dtype=dtype)  # [n, K]
        self.rho = rho_t.to(device=device, dtype=dtype)  # [R]

    @property
    def device(self) -> torch.device:
        return self._stream.device

    def context(self, t: int) -> Context:
        """The contexts of round ``t`` (0-based): ``x [R, 1, d]``, ``index [R, 1]``."""
        index = self._stream[:, t : t + 1]  # [R, 1]
        return Context(x=self._features[index], index=index)

    def utilities(self, index: Tensor) -> Tensor:
        """``clip(Y - rho C, 0, 1)`` of the rows ``index [R, B]`` -> ``[R, B, K]``."""
        rho = self.rho[:, None, None]
        return (self._scores[index] - rho * self._costs[index]).clamp_(0.0, 1.0)

    def step(
        self, context: Context, decision: Decision, full: bool | None = None
    ) -> tuple[Feedback, Outcome]:
        """Reveal the feedback of ``decision`` and the round's metrics.

        Args:
            context: the context returned by :meth:`context`.
            decision: the learner's decision (``action [R, B]``).
            full: reveal every arm (defaults to ``feedback == "full"``).
        """
        index = context.index
        utility = self.utilities(index)  # [R, B, K]
        scores, costs = self._scores[index], self._costs[index]
        action = decision.action[..., None]  # [R, B, 1]
        full = self.feedback == "full" if full is None else full
        if full:
            observed = torch.ones_like(utility, dtype=torch.bool)
        else:
            observed = torch.zeros_like(utility, dtype=torch.bool).scatter_(-1, action, True)
        feedback = Feedback(
            reward=utility * observed,
            observed=observed,
            score=scores * observed,
            cost=costs * observed,
        )
        outcome = Outcome(
            utility=utility.gather(-1, action)[..., 0],
            best_utility=utility.amax(-1),
            score=scores.gather(-1, action)[..., 0],
            cost=costs.gather(-1, action)[..., 0],
        )
        return feedback, outcome

    def train_mean_utility(self, split: str = "train") -> Tensor:
        """Mean utility of each arm on ``split`` for each trial's ``rho``: ``[R, K]``."""
        rows = torch.as_tensor(self.table.rows(split), device=self.device)
        return self.utilities(rows.expand(self.num_trials, -1)).mean(1)

    def split_data(self, split: str = "train") -> tuple[Tensor, Tensor, Tensor]:
        """Features ``[n_s, d]``, scores and costs ``[n_s, K]`` of the rows of ``split``."""
        rows = torch.as_tensor(self.table.rows(split), device=self.device)
        return self._features[rows], self._scores[rows], self._costs[rows]

    def state_dict(self) -> dict:
        """What identifies this environment (checked when resuming)."""
        return {
            "table": self.table.fingerprint(),
            "split": list(self.split) if not isinstance(self.split, str) else self.split,
            "horizon": self.horizon,
            "feedback": self.feedback,
            "seeds": self.seeds.clone(),
            "rho": self.rho.detach().cpu().double(),
        }
