"""Running metrics of a simulation, accumulated on the device without host syncs."""

from __future__ import annotations

import torch
from torch import Tensor

from torchroute.types import Outcome

#: per-trial summary columns written to results.csv
SUMMARY_COLUMNS = ("avg_utility", "avg_regret", "accuracy", "avg_cost")


class RunningMetrics:
    """Sums of utility, regret, accuracy and cost per trial, plus a cumulative-regret curve.

    Everything stays on the device; :meth:`summary` and :meth:`curve` sync.

    Args:
        num_trials: ``R``.
        device: device of the sums.
    """

    def __init__(self, num_trials: int, device: torch.device | str) -> None:
        self.sums = torch.zeros(4, num_trials, dtype=torch.float64, device=device)  # [4, R]
        self.rounds = 0
        self.curve_rounds: list[int] = []
        self.curve_values: list[Tensor] = []  # each [R], cumulative regret

    def add(self, outcome: Outcome) -> None:
        """Accumulate one round (``Outcome`` fields ``[R, B]``)."""
        regret = outcome.best_utility - outcome.utility
        batch = torch.stack([outcome.utility, regret, outcome.score, outcome.cost])  # [4, R, B]
        self.sums += batch.sum(-1).to(torch.float64)
        self.rounds += outcome.utility.shape[1]

    def mark(self) -> None:
        """Record the current cumulative regret as a point of the curve."""
        self.curve_rounds.append(self.rounds)
        self.curve_values.append(self.sums[1].clone())

    def summary(self) -> dict[str, Tensor]:
        """Per-trial averages ``[R]`` (on the CPU): utility, regret, accuracy, cost."""
        avg = (self.sums / max(self.rounds, 1)).cpu()
        return dict(zip(SUMMARY_COLUMNS, avg))

    def curve(self) -> tuple[list[int], Tensor]:
        """``(rounds, cumulative regret [n_points, R])`` on the CPU."""
        if not self.curve_values:
            return [], torch.zeros(0, self.sums.shape[1], dtype=torch.float64)
        return list(self.curve_rounds), torch.stack(self.curve_values).cpu()

    def state_dict(self) -> dict:
        rounds, values = self.curve()
        return {
            "sums": self.sums.cpu(),
            "rounds": self.rounds,
            "curve_rounds": torch.tensor(rounds, dtype=torch.long),
            "curve_values": values,
        }

    def load_state_dict(self, state: dict) -> None:
        device = self.sums.device
        self.sums = state["sums"].to(device)
        self.rounds = int(state["rounds"])
        self.curve_rounds = [int(r) for r in state["curve_rounds"]]
        self.curve_values = [v.to(device) for v in state["curve_values"]]
