"""Scenarios: changes to the world in the middle of a stream (a new model, drift, a price).

A scenario is a list of events, each replayed identically for every learner and trial
(``docs/guides/scenarios.md``)::

    scenario:
      - {kind: new_model, arm: best, at: 0.5}             # unavailable before round T/2
      - {kind: drift, arm: gpt-4, at: 0.5, score_shift: -0.3}  # scores move from T/2 on
      - {kind: price, arm: best, at: 0.5, factor: 2.0}     # costs doubled from T/2 on

``arm`` names a model of the table, or ``best``: per trial, the arm with the largest mean
utility ``clip(Y - rho C, 0, 1)`` on the train split at that trial's ``rho`` (so each cost
regime changes its own best arm); with ``best_at: validation``, the arm with the largest
mean utility on the validation split at the run's middle rho (:func:`middle_rho`), one arm
for every trial, so a curve over rho shows one world; ``arm: priciest`` is the arm of
largest mean cost on the train split (one for every trial). ``at`` is a fraction of the rounds
in ``(0, 1)``; the event starts at round ``floor(at T)`` (0-based). The change round of the
results (``avg_utility_before`` / ``avg_utility_after``, ``rounds_to_recover``) is the
earliest event's.

Each kind is a small class in a file of :mod:`torchroute.envs.events` named after it (what
the event hides, how it changes scores and costs): a new kind is a file added there. A run
imports this module only when its env has a scenario.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from torchroute.envs.events import Event, ScenarioError, event_class
from torchroute.functional.settling import distances_to_level, stationary_quantile
from torchroute.functional.utility import utility
from torchroute.types import TrainSplit

#: how close (in utility) to its post-change best a learner's moving average must stay
RECOVER_TOLERANCE = 0.01
#: the share of flat curves (nothing left to learn) that ``rounds_to_recover`` settles in
#: the first window: its band is this quantile of their largest distance to the level
RECOVER_CONFIDENCE = 0.95
#: the ``arm`` of the model with the largest mean cost on the train split
PRICIEST = "priciest"


def parse_scenario(spec: Any) -> list[Event]:
    """The events of a ``scenario:`` config value (``None``: no events), each of the class
    its ``kind`` names (:mod:`torchroute.envs.events`).

    Raises:
        ScenarioError: one line naming ``scenario[i].<key>`` and what was expected.
    """
    if spec is None:
        return []
    if isinstance(spec, (Mapping, str, bytes)) or not isinstance(spec, Sequence):
        raise ScenarioError(
            f"scenario must be a list of events ({{kind: new_model, arm: best, at: 0.5}}, ...), "
            f"got {type(spec).__name__}"
        )
    events = []
    for i, item in enumerate(spec):
        where = f"scenario[{i}]"
        if not isinstance(item, Mapping):
            raise ScenarioError(f"{where} must be a mapping with a kind, got {item!r}")
        events.append(event_class(item.get("kind"), where).from_config(where, item))
    arrivals: dict[str, int] = {}
    for i, event in enumerate(events):
        if event.hides and event.arm in arrivals:
            raise ScenarioError(
                f"scenario[{arrivals[event.arm]}] and scenario[{i}] are both {event.kind} events "
                f"of {event.arm!r}: a model arrives once; keep one {event.kind} event per arm"
            )
        if event.hides:
            arrivals[event.arm] = i
    return events


class Scenario:
    """The compiled events of one env: per-trial arms, start rounds, masks and shifts.

    Args:
        events: the parsed events (:func:`parse_scenario`).
        arm_names: the table's ``K`` arm names.
        best: ``[R]`` the best arm of each trial (what ``arm: best`` means), or per
            ``best_at`` value its ``[R]`` arms (:func:`best_arms_of`).
        horizon: ``T``.

    Attributes:
        arms: per event, the changed arm of each trial ``[R]`` (long).
        starts: per event, its first round ``floor(at T)``.
        change: the earliest start, the round from which ``after`` metrics count.
    """

    def __init__(
        self,
        events: Sequence[Event],
        arm_names: Sequence[str],
        best: Tensor | Mapping[str, Tensor],
        horizon: int,
    ) -> None:
        chosen = {"train": best} if isinstance(best, Tensor) else dict(best)
        best = chosen["train"]
        names = list(arm_names)
        self.events = tuple(events)
        self.horizon = int(horizon)
        self.arms: list[Tensor] = []
        self.starts: list[int] = []
        for i, event in enumerate(self.events):
            key = {"best": event.best_at, PRICIEST: PRICIEST}.get(event.arm)
            if key is not None and key not in chosen:
                raise ScenarioError(f"scenario[{i}].arm: no {key!r} arms were given")
            if key is not None:
                arm = chosen[key].long().clone()
            elif event.arm in names:
                arm = torch.full_like(best, names.index(event.arm), dtype=torch.long)
            else:
                raise ScenarioError(
                    f"scenario[{i}].arm: no model {event.arm!r} in the table (models: "
                    f"{', '.join(names)}; or 'best', 'priciest')"
                )
            start = math.floor(event.at * self.horizon)
            if not 1 <= start < self.horizon:
                raise ScenarioError(
                    f"scenario[{i}].at={event.at} starts at round {start} of {self.horizon}; "
                    "choose an at that leaves rounds before and after the change"
                )
            self.arms.append(arm)
            self.starts.append(start)
        self.num_arms = len(names)
        self.change = min(self.starts) if self.starts else self.horizon
        self._onehot = [torch.nn.functional.one_hot(a, self.num_arms).bool() for a in self.arms]
        hidden = torch.zeros(best.shape[0], self.num_arms, dtype=torch.bool, device=best.device)
        added: list[int] = []  # the events so far that hide their arm (new models)
        for i, (event, onehot) in enumerate(zip(self.events, self._onehot)):
            if not event.hides:
                continue
            for j in added:
                _check_one_arrival(j, i, self._onehot[j] & onehot, names)
            added.append(i)
            hidden |= onehot
        if bool(hidden.all(-1).any()):
            raise ScenarioError("scenario: new_model events hide every arm of a trial")
        #: ``[R, K]`` the new models of each trial (hidden from anything trained offline)
        self.hidden = hidden

    def __bool__(self) -> bool:
        return bool(self.events)

    def to(self, device: torch.device | str) -> Scenario:
        """The scenario with its per-trial tensors on ``device``."""
        return self.select(torch.arange(self.hidden.shape[0]), device)

    def select(self, index: Tensor, device: torch.device | str | None = None) -> Scenario:
        """The scenario of the trials ``index [n]`` (positions), a new object."""
        out = object.__new__(Scenario)
        out.__dict__.update(self.__dict__)
        device = device if device is not None else self.hidden.device
        idx = index.to(self.hidden.device)
        out.arms = [a[idx].to(device) for a in self.arms]
        out._onehot = [o[idx].to(device) for o in self._onehot]
        out.hidden = self.hidden[idx].to(device)
        return out

    def available(self, t: int) -> Tensor | None:
        """``[R, K]`` the arms that exist at round ``t``, or ``None`` when all do."""
        mask = None
        for event, onehot, start in zip(self.events, self._onehot, self.starts):
            if event.hides and t < start:
                mask = onehot if mask is None else mask | onehot
        return None if mask is None else ~mask

    def apply(self, t: int, scores: Tensor, costs: Tensor) -> tuple[Tensor, Tensor]:
        """Scores and costs ``[R, B, K]`` as they are at round ``t``.

        Every active event changes its arm (:meth:`Event.apply`, in the scenario's order:
        a ``drift`` adds its shift to the scores, a ``price`` multiplies the costs); scores
        are clipped to ``[0, 1]`` once, after all shifts.
        """
        shifted = False
        for event, onehot, start in zip(self.events, self._onehot, self.starts):
            if t < start:
                continue
            scores, costs = event.apply(onehot[:, None, :], scores, costs)  # on: [R, 1, K]
            shifted = shifted or event.moves_scores
        return (scores.clamp(0.0, 1.0) if shifted else scores), costs

    def change_groups(self) -> list[Tensor]:
        """The trials that meet the same change (the same arm in every event), as lists of
        trial positions ``[n_g]`` (long, ascending), ordered by their changed arms."""
        if not self.arms:
            return [torch.arange(self.hidden.shape[0], device=self.hidden.device)]
        keys = torch.stack(self.arms, -1)  # [R, E]
        _, inverse = torch.unique(keys, dim=0, return_inverse=True)
        return [(inverse == g).nonzero()[:, 0] for g in range(int(inverse.max()) + 1)]

    def apply_to_split(self, split: TrainSplit, trial: int = 0) -> TrainSplit:
        """``split`` (``scores``, ``costs`` ``[n, K]``) as it is once every event of trial
        ``trial`` has started: a ``drift`` shifts its arm's scores (clipped to ``[0, 1]``),
        a ``price`` scales its arm's costs; a new model's rows are kept as the table has
        them (visible). Features and embeddings are the same tensors. What retraining after
        the change would see; the env's own numbers are not touched."""
        one = self.select(torch.tensor([int(trial)]))
        scores, costs = one.apply(self.horizon - 1, split.scores[None], split.costs[None])
        return TrainSplit(split.features, scores[0], costs[0], embeddings=split.embeddings)

    @property
    def moves_costs(self) -> bool:
        """Whether an event changes prices (``Context.prices`` is then published)."""
        return any(event.moves_costs for event in self.events)

    def prices(self, t: int, reference: Tensor) -> Tensor:
        """``[R, 1, K]`` the known prices at round ``t``: ``reference [K]`` (each model's
        mean train cost) changed by the events that move costs and are active at ``t``
        (a ``price`` event's factor on its arm), as :meth:`apply` changes each cost."""
        costs = reference.expand(self.hidden.shape[0], 1, self.num_arms).clone()
        for event, onehot, start in zip(self.events, self._onehot, self.starts):
            if event.moves_costs and t >= start:
                _, costs = event.apply(onehot[:, None, :], costs, costs)
        return costs

    def fingerprint(self) -> list[dict[str, Any]]:
        """The events as plain values (resume compares them)."""
        return [event.fingerprint() for event in self.events]


def _check_one_arrival(first: int, second: int, both: Tensor, names: Sequence[str]) -> None:
    """Refuse two ``new_model`` events (``scenario[first]``, ``scenario[second]``) that add
    the same arm in some trial (``both [R, K]``): a model arrives once."""
    if not bool(both.any()):
        return
    arm = names[int(both.any(0).nonzero()[0])]
    raise ScenarioError(
        f"scenario[{first}] and scenario[{second}] are both new_model events of {arm!r} "
        "(in at least one trial): a model arrives once; keep one new_model event per arm"
    )


def best_arms(table: Any, rho: Tensor, split: str = "train") -> Tensor:
    """``[R]`` the arm of largest mean utility ``clip(Y - rho C, 0, 1)`` on ``split`` at each
    ``rho [R]`` (what ``arm: best`` means).

    Raises:
        ValueError: the table has no such split.
    """
    if split not in table.split:
        raise ValueError(
            f"scenario: arm 'best' is chosen on the {split} split, but {table.source} "
            "has none; name the model instead"
        )
    rows = torch.as_tensor(table.rows(split))
    scores = table.scores[rows].double()
    costs = table.costs[rows].double()
    # once per distinct rho (the trials of one rho share it): [U, n, K], not [R, n, K]
    distinct, inverse = rho.double().cpu().unique(return_inverse=True)
    mean = utility(scores[None], costs[None], distinct[:, None, None])
    return mean.mean(1).argmax(-1)[inverse]


def middle_rho(rho: Tensor) -> float:
    """The run's middle rho: the median of its distinct rhos (the lower of the two middle
    ones for an even count, so always a rho the run has)."""
    values = torch.unique(rho.double().cpu())  # sorted
    return float(values[(values.numel() - 1) // 2])


def priciest_arm(table: Any) -> int:
    """The arm of largest mean cost on the train split (what ``arm: priciest`` means).

    Raises:
        ScenarioError: the table has no train split, or no costs (every mean cost 0).
    """
    if "train" not in table.split:
        raise ScenarioError(
            f"scenario: arm 'priciest' is chosen on the train split, but {table.source} "
            "has none; name the model instead"
        )
    rows = torch.as_tensor(table.rows("train"))
    mean = table.costs[rows].double().mean(0)  # [K]
    if not bool((mean > 0).any()):
        raise ScenarioError(
            f"scenario: arm 'priciest' needs a table with costs; {table.source} has none "
            "(every model's mean train cost is 0)"
        )
    return int(mean.argmax())


def best_arms_of(events: Sequence[Event], table: Any, rho: Tensor) -> dict[str, Tensor]:
    """``{best_at: [R] arms}`` of the ``best_at`` values ``events`` use: ``train`` (always,
    each trial's own) and ``validation`` (one arm at :func:`middle_rho`, for every trial);
    with an ``arm: priciest`` event also ``priciest`` (:func:`priciest_arm`, every trial)."""
    out = {"train": best_arms(table, rho)}
    if any(e.arm == "best" and e.best_at == "validation" for e in events):
        middle = torch.tensor([middle_rho(rho)], dtype=torch.float64)
        out["validation"] = best_arms(table, middle, split="val").expand(rho.numel())
    if any(e.arm == PRICIEST for e in events):
        out[PRICIEST] = torch.full((rho.numel(),), priciest_arm(table), dtype=torch.long)
    return out


def new_model_names(spec: Any, table: Any, rho: Sequence[float]) -> list[str]:
    """The models a ``scenario:`` config adds mid-stream in any trial of the ``rho`` grid
    (a named arm, or the ``best`` of each rho or of the validation split), in table order;
    ``[]`` without such an event."""
    events = [e for e in parse_scenario(spec) if e.hides]
    names = list(table.arm_names)
    new: set[str] = {e.arm for e in events if e.arm not in ("best", PRICIEST)}
    if any(e.arm in ("best", PRICIEST) for e in events):
        chosen = best_arms_of(events, table, torch.as_tensor(list(rho), dtype=torch.float64))
        for event in (e for e in events if e.arm in ("best", PRICIEST)):
            key = event.best_at if event.arm == "best" else PRICIEST
            new |= {names[int(k)] for k in chosen[key].unique()}
    return [n for n in names if n in new]


def rounds_to_recover(
    utility: Tensor,
    group: Tensor | None = None,
    window: int | None = None,
    tolerance: float = RECOVER_TOLERANCE,
    confidence: float = RECOVER_CONFIDENCE,
) -> Tensor:
    """Rounds after a change until a group's mean utility settles at its level, ``[R]``.

    ``utility [R, n]`` holds each trial's utility in the ``n`` rounds from the change on;
    ``group [R]`` labels the trials averaged together (in a run: those of one ``rho``, i.e.
    the seeds of one learner, regime and scenario; default: each trial alone). Per group,
    with ``u_t`` its mean utility at round ``t`` after the change and ``W = window``
    (default :func:`default_window`):

    - the level is the mean of ``u_t`` over the final ``F = max(W, n // 4)`` rounds;
    - the noise of a ``W``-round average's distance to the level is ``se = s sqrt(1/W +
      1/F)``, with ``s^2 = sum_t (u_{t+1} - u_t)^2 / (2 (n - 1))`` (successive
      differences: a step or a trend in ``u`` barely moves it);
    - ``m_j`` is the mean of ``u_j .. u_{j+W-1}`` (``j = 0 .. n - W``), and ``j*`` the
      smallest ``j`` with ``|m_i - level| <= tolerance + z se`` for every ``i >= j``, where
      ``z`` is the ``confidence`` quantile of the largest such distance of a flat curve
      (:func:`~torchroute.functional.settling.stationary_quantile`; about 3.3 at the
      default window): a curve with nothing left to learn settles in the first window in
      that share of groups (tolerance 0), whatever its noise.

    The result is ``j* + W`` (the rounds after the change at the end of the first settled
    window), repeated for every trial of the group; NaN when that window ends inside the
    final ``F`` rounds (the group had not settled before the rounds that define its level)
    or when ``n < W + F``.

    Example:
        >>> u = torch.tensor([[0.0] * 6 + [1.0] * 14, [0.0] * 8 + [1.0] * 12])
        >>> rounds_to_recover(u, torch.tensor([0, 0]), window=2)
        tensor([9., 9.], dtype=torch.float64)
    """
    u = utility.to(torch.float64)
    r, n = u.shape
    w = default_window(n) if window is None else int(window)
    labels = torch.arange(r, device=u.device) if group is None else group.to(u.device)
    _, inverse = torch.unique(labels, return_inverse=True)
    size = int(inverse.max()) + 1 if r else 0
    count = u.new_zeros(size).index_add_(0, inverse, u.new_ones(r))
    curve = u.new_zeros(size, n).index_add_(0, inverse, u) / count[:, None]  # [G, n]
    final = max(w, n // 4)
    if w < 1 or n < w + final or n < 2:
        return u.new_full((r,), math.nan)
    distance, se = distances_to_level(curve, w, final)  # [G, n - w + 1], [G, 1]
    band = tolerance + stationary_quantile(n, w, final, confidence) * se + 1e-12
    ok = distance <= band
    stays = ok.flip(-1).long().cumprod(-1).flip(-1).bool()  # ok from j on
    first = stays.long().argmax(-1).to(torch.float64) + w
    settled = stays.any(-1) & (first <= n - final)
    return torch.where(settled, first, first.new_full((), math.nan))[inverse]


def default_window(rounds_after: int) -> int:
    """The moving-average window: 10% of the rounds after the change, at least 1."""
    return max(1, rounds_after // 10)
