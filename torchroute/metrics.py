"""Running sums of whatever per-round quantities an environment emits, kept on the device."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor


class RunningMetrics:
    """Sums over rounds of every outcome an environment emits, plus curve points.

    Each outcome ``[R, B]`` (or ``[R, B, c]``) is summed over ``B`` and accumulated in
    float64 as ``[R]`` (or ``[R, c]``). :meth:`mark` records the running sums of
    ``curve_keys`` and of the learner's metrics (what ``update`` returned, e.g. HPG's
    ``rank``), so both have trajectories. Nothing syncs with the host except
    :meth:`state_dict` and the readers the loop calls at logging intervals.

    Args:
        num_trials: ``R``.
        device: device of the sums.
        curve_keys: outcome names whose running sums :meth:`mark` records.
    """

    def __init__(
        self, num_trials: int, device: torch.device | str, curve_keys: tuple[str, ...] = ()
    ) -> None:
        self.num_trials = num_trials
        self.device = torch.device(device)
        self.curve_keys = tuple(curve_keys)
        self.sums: dict[str, Tensor] = {}
        self.learner_sums: dict[str, Tensor] = {}  # [R] sums of what update() returned
        self.rounds = 0
        self.curve_rounds: list[int] = []
        self.curve_values: list[Tensor] = []  # each [len(curve_keys), R]
        self.learner_curve: list[dict[str, Tensor]] = []  # each {name: [R]} running sums

    def add(self, outcome: Mapping[str, Tensor]) -> None:
        """Accumulate one round: ``{name: [R, B] or [R, B, c]}``."""
        batch = None
        for name, value in outcome.items():
            if value.ndim not in (2, 3) or value.shape[0] != self.num_trials:
                raise ValueError(
                    f"outcome {name!r} must be [R={self.num_trials}, B] or [R, B, c], "
                    f"got {tuple(value.shape)}"
                )
            if batch is None:
                batch = value.shape[1]
            total = value.sum(1).to(torch.float64)
            if name in self.sums:
                self.sums[name] += total
            else:
                self.sums[name] = total.clone()
        self.rounds += batch or 0

    def add_learner_stats(self, stats: Mapping[str, Tensor]) -> None:
        """Accumulate the per-trial metrics ``{name: [R]}`` a learner's ``update`` returned."""
        for name, value in stats.items():
            if value.shape != (self.num_trials,):
                raise ValueError(
                    f"learner metric {name!r} must be [R={self.num_trials}], "
                    f"got {tuple(value.shape)}"
                )
            total = value.detach().to(torch.float64)
            if name in self.learner_sums:
                self.learner_sums[name] += total
            else:
                self.learner_sums[name] = total.clone()

    def learner_means(self) -> dict[str, Tensor]:
        """Per-round means ``{name: [R]}`` of the learner's metrics (on the device)."""
        return {k: v / max(self.rounds, 1) for k, v in self.learner_sums.items()}

    def mark(self) -> None:
        """Record the running sums of ``curve_keys`` and of the learner's metrics as one
        point of the curves."""
        self.curve_rounds.append(self.rounds)
        self.curve_values.append(torch.stack([self.sums[k] for k in self.curve_keys]))
        self.learner_curve.append({k: v.clone() for k, v in self.learner_sums.items()})

    def learner_trajectory(self) -> dict[str, Tensor]:
        """``{name: [n_points, R]}`` on the CPU: the learner's metric averaged over each
        logging interval (the increase of its running sum divided by the rounds between
        two points); NaN at points before the metric first appeared."""
        names = dict.fromkeys(k for point in self.learner_curve for k in point)
        rounds = torch.tensor([0, *self.curve_rounds], dtype=torch.float64)
        steps = (rounds[1:] - rounds[:-1]).clamp_min(1.0)[:, None]
        out = {}
        for name in names:
            nan = torch.full((self.num_trials,), torch.nan, dtype=torch.float64)
            sums = torch.stack([p[name].cpu() if name in p else nan for p in self.learner_curve])
            previous = torch.cat([torch.zeros(1, self.num_trials, dtype=torch.float64), sums[:-1]])
            out[name] = (sums - previous.nan_to_num(0.0)) / steps
        return out

    def sums_cpu(self) -> dict[str, Tensor]:
        """A copy of the running sums on the CPU (syncs)."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.sums.items()}

    def curve(self) -> tuple[list[int], Tensor]:
        """``(rounds, sums [n_points, len(curve_keys), R])`` on the CPU."""
        if not self.curve_values:
            empty = torch.zeros(0, len(self.curve_keys), self.num_trials, dtype=torch.float64)
            return [], empty
        return list(self.curve_rounds), torch.stack(self.curve_values).cpu()

    def all_finite(self) -> Tensor:
        """A 0-d bool tensor (on the device): every running sum is finite."""
        values = [*self.sums.values(), *self.learner_sums.values()]
        if not values:
            return torch.ones((), dtype=torch.bool, device=self.device)
        return torch.stack([torch.isfinite(v).all() for v in values]).all()

    def state_dict(self) -> dict:
        """The running sums and the curve so far (tensors), for a checkpoint."""
        rounds, values = self.curve()
        return {
            "sums": self.sums_cpu(),
            "learner_sums": {
                k: v.detach().to("cpu", copy=True) for k, v in self.learner_sums.items()
            },
            "rounds": self.rounds,
            "curve_keys": list(self.curve_keys),
            "curve_rounds": torch.tensor(rounds, dtype=torch.long),
            "curve_values": values,
            "learner_curve": [
                {k: v.detach().to("cpu", copy=True) for k, v in point.items()}
                for point in self.learner_curve
            ],
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`; refuses other curve keys."""
        if list(state["curve_keys"]) != list(self.curve_keys):
            raise ValueError(
                f"metrics state records curves {state['curve_keys']}, "
                f"expected {list(self.curve_keys)}"
            )
        # Copies: the running sums are updated in place and must not alias the state.
        self.sums = {k: v.to(self.device, copy=True) for k, v in state["sums"].items()}
        self.learner_sums = {
            k: v.to(self.device, copy=True) for k, v in state["learner_sums"].items()
        }
        self.rounds = int(state["rounds"])
        self.curve_rounds = [int(r) for r in state["curve_rounds"]]
        self.curve_values = [v.to(self.device) for v in state["curve_values"]]
        self.learner_curve = [
            {k: v.to(self.device, copy=True) for k, v in point.items()}
            for point in state.get("learner_curve", [{}] * len(self.curve_rounds))
        ]
