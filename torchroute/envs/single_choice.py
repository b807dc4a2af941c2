"""Single-choice routing on a table: replay a shuffled stream, one arm per query.

(Over 400 lines: one env class; its scenario events (a new model, drift, a price change) act
on the same shuffled stream and per-trial state.)
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd
import torch
from torch import Tensor

from torchroute.data.table import RoutingTable
from torchroute.envs.base import Env
from torchroute.envs.delivery import FeedbackOption, FeedbackSchedule
from torchroute.functional.random import Source
from torchroute.functional.utility import utility
from torchroute.types import Context, Decision, Feedback, Outcome, Problem, TrainSplit

if TYPE_CHECKING:
    from torchroute.envs.after_change import AfterChange
    from torchroute.envs.scenario import Scenario

#: the outcome keys split at a scenario's change -> the results column of their means
#: (``<column>_before``, ``<column>_after``)
PHASE_COLUMNS = {"utility": "avg_utility", "cost": "avg_cost", "score": "accuracy"}


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
        repeat: allow ``horizon`` beyond the split's rows: the stream then replays the
            split in passes, each pass a new permutation drawn from the trial's seed (the
            first pass is the stream without ``repeat``). The choice on validation uses it
            to replay the validation rows for as many rounds as the test stream.
        features: ``[n, d]`` bandit features for every table row (defaults to the
            table's embeddings).
        feedback: ``"bandit"`` (the played arm and the requested ones) or ``"full"``, or a
            mapping ``{mode, delay, rate, noise}`` (:mod:`torchroute.envs.delivery`):
            feedback that arrives ``delay`` rounds late, for a ``rate`` of the requests,
            with noise on the scores the learner sees (the results stay on the true ones).
        device: where every tensor lives.
        dtype: floating dtype of contexts and rewards.
        scenario: a list of events (a new model, drift, a price change;
            :mod:`torchroute.envs.scenario`, ``docs/guides/scenarios.md``), or ``None``.
        recover_window: the moving-average window of ``rounds_to_recover`` (default: 10%
            of the rounds after the change, at least 1; at most half of them).
        recover_tolerance: how close to its settled level the moving average must stay
            for ``rounds_to_recover``, besides its noise (default ``None``: 0.01,
            :data:`~torchroute.envs.scenario.RECOVER_TOLERANCE`).
        request_rhos: trade-offs the requests carry (e.g. ``[0, 500, 1000]``), or ``None``
            (the default: every request has its trial's ``rho``). Each query position of a
            trial's stream draws one of them, uniformly, from the trial's seed (after its
            permutation), so every learner sees the same requests; the contexts carry it
            as ``Context.rho [R, 1]`` and the request's utility, regret and feedback are at
            that ``rho``. The results gain, per value ``v``, ``avg_utility_rho<v>``,
            ``avg_regret_rho<v>``, ``accuracy_rho<v>``, ``avg_cost_rho<v>`` (means over the
            requests that carried it) and ``rounds_rho<v>``.

    Whatever fills it (this option, or a caller that builds its own contexts), a request's
    utility is computed with ``Context.rho`` when the context carries one, else with its
    trial's ``rho``.

    The scenario code (:mod:`torchroute.envs.scenario`) is imported only for an env that
    has a scenario.

    With a scenario the contexts carry ``available [R, 1, K]`` while a new model is not
    there yet, the problem names the new models (``Problem.hidden_arms``; the train split
    keeps their prices but scores them 0, what the live router assumes of a model added
    through ``/models``), the regret is against the best available arm, and the results
    gain ``avg_utility_before``, ``avg_utility_after``, ``avg_cost_*``, ``accuracy_*``
    (per trial, the chosen arm's means before and from the change) and
    ``rounds_to_recover`` (on the mean over the trials that share a ``rho`` of the utility
    minus the best available model's for each query, i.e. minus the regret: the queries'
    own difficulty, which every learner meets alike, cancels; the same in each of them;
    ``recover_trials`` says how many; :func:`~torchroute.envs.scenario.rounds_to_recover`).

    With a ``price`` event (and a train split) the contexts carry the known prices,
    ``prices [R, 1, K]``: ``Problem.prices`` (each model's mean train cost) times the
    factors in force at the round (:meth:`Scenario.prices
    <torchroute.envs.scenario.Scenario.prices>`); otherwise ``Context.prices`` is ``None``.

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
        feedback: Literal["bandit", "full"] | Mapping[str, Any] = "bandit",
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        scenario: Any = None,
        recover_window: int | None = None,
        recover_tolerance: float | None = None,
        request_rhos: Sequence[float] | None = None,
        repeat: bool = False,
    ) -> None:
        events = []
        if scenario is not None:  # the scenario code only for an env that has one
            from torchroute.envs.scenario import parse_scenario

            events = parse_scenario(scenario)
        rho_t = torch.as_tensor(rho, dtype=torch.float64).reshape(-1)
        seeds_t = torch.as_tensor(seeds, dtype=torch.long).reshape(-1)
        if rho_t.numel() != seeds_t.numel():
            raise ValueError(f"rho has {rho_t.numel()} entries but seeds has {seeds_t.numel()}")
        if rho_t.numel() == 0:
            raise ValueError("rho and seeds must name at least one trial")
        if (rho_t < 0).any() or not torch.isfinite(rho_t).all():
            raise ValueError(f"rho must be finite and >= 0, got {rho_t.tolist()}")
        option = FeedbackOption.from_config(feedback)
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
        self.repeat = bool(repeat)
        if horizon < 1 or (horizon > n_stream and not self.repeat):
            raise ValueError(
                f"rounds={horizon} but split {split!r} of {table.source} holds {n_stream} "
                f"queries; ask for 1..{n_stream} rounds"
            )
        self.table = table
        self.split = split
        self.horizon = horizon
        self.feedback = option.mode
        self.feedback_option = option
        self.num_trials = rho_t.numel()
        self.num_arms = table.num_arms
        self.dim = feats.shape[1]
        self.seeds = seeds_t
        # One permutation per trial from its own seed (set-up only, not the hot path); with
        # repeat, as many passes as the horizon needs, each a new permutation.
        passes = -(-horizon // n_stream)
        perms = torch.stack([_passes(n_stream, int(s), passes) for s in seeds_t])[:, :horizon]
        self._stream = rows[perms].to(device)  # [R, T] table rows
        self._rho_slot: Tensor | None = None  # [R, T] each request's entry of request_rhos
        if request_rhos is not None:
            values, slots = request_rho_stream(request_rhos, seeds_t, n_stream, horizon)
            self.request_rhos = tuple(values)
            self._request_rho = torch.tensor(values, device=device, dtype=dtype)  # [J]
            self._rho_slot = slots.to(device)
        self._features = feats.to(device=device, dtype=dtype)  # [n, d]
        emb = table.embeddings
        self._embeddings = None if emb is None else emb.to(device=device, dtype=dtype)  # [n, e]
        self._scores = table.scores.to(device=device, dtype=dtype)  # [n, K]
        self._costs = table.costs.to(device=device, dtype=dtype)  # [n, K]
        self.rho = rho_t.to(device=device, dtype=dtype)  # [R]
        self.budget: Tensor | None = None  # [R] float64 spend targets (with_rho), or None
        # Per-arm score and cost sums over the first ``_arm_rounds`` rounds of each stream,
        # a cache that lets ``summarize`` add only the rounds played since its last call.
        self._arm_rounds = 0
        self._arm_sums = torch.zeros(2, self.num_trials, self.num_arms, dtype=torch.float64)
        self._arm_sums = self._arm_sums.to(device)  # [2, R, K]
        self._round = 0  # the round of the last context() call
        self.feedback_schedule: FeedbackSchedule | None = None
        if not option.immediate:
            binary = bool(((table.scores == 0) | (table.scores == 1)).all())
            self.feedback_schedule = FeedbackSchedule(
                option, seeds_t, horizon, binary, self._stream.device
            )
            self.feedback_delay = option.delay
            self.feedback_arrives = self.feedback_schedule.arrives
        self.scenario: Scenario | None = None
        if events:
            from torchroute.envs.scenario import RECOVER_TOLERANCE, Scenario

            if recover_tolerance is None:
                recover_tolerance = RECOVER_TOLERANCE
            best = self._best_arms(events)
            self.scenario = Scenario(events, table.arm_names, best, horizon)
            self.scenario = self.scenario.to(device)
            after = horizon - self.scenario.change
            if recover_window is not None and not 1 <= int(recover_window) <= after // 2:
                raise ValueError(
                    f"recover_window must be in 1..{after // 2} (half the {after} rounds "
                    f"after the change), got {recover_window}"
                )
            self.recover_window = None if recover_window is None else int(recover_window)
            if not 0.0 <= float(recover_tolerance) < 1.0:
                raise ValueError(f"recover_tolerance must be in [0, 1), got {recover_tolerance}")
            self.recover_tolerance = float(recover_tolerance)
            # each trial's utility minus the best available model's per round (minus its
            # regret), for rounds_to_recover (averaged per rho)
            self._trace = torch.zeros(self.num_trials, horizon, dtype=torch.float64, device=device)
        #: ``[K]`` the prices ``Context.prices`` starts from (a price event only), or None
        self._price_reference = self._reference_prices()

    def _best_arms(self, events: Sequence[Any]) -> dict[str, Tensor]:
        """What ``arm: best`` means per ``best_at``: ``[R]`` each trial's arm of largest
        mean train utility at its rho, or the validation split's at the run's middle rho."""
        from torchroute.envs.scenario import best_arms_of

        return best_arms_of(events, self.table, self.rho)

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
        if self._rho_slot is not None:
            env._rho_slot = self._rho_slot[on]
        if self.budget is not None:
            env.budget = self.budget[on]
        if self.scenario is not None:
            env.scenario = self.scenario.select(on)
            env._trace = self._trace[on]
        if self.feedback_schedule is not None:
            env.feedback_schedule = self.feedback_schedule.select(idx)
            env.feedback_arrives = env.feedback_schedule.arrives
        return env

    def with_rho(self, rho: Tensor, budget: Tensor | None = None) -> SingleChoiceEnv:
        """The same trials (streams, seeds, feedback) with other trade-offs ``rho [R]``
        (``>= 0``): a budget's starting rho, chosen per learner; with ``budget [R]`` (each
        trial's spend target) the problem says it (``Problem.budget``). The tensors are
        shared."""
        rho = torch.as_tensor(rho).reshape(-1)
        if rho.numel() != self.num_trials:
            raise ValueError(f"rho must have R={self.num_trials} entries, got {rho.numel()}")
        env = copy.copy(self)
        env.rho = rho.to(device=self.rho.device, dtype=self.rho.dtype)
        if budget is not None:
            budget = torch.as_tensor(budget, dtype=torch.float64).reshape(-1)
            if budget.numel() != self.num_trials:
                raise ValueError(
                    f"budget must have R={self.num_trials} entries, got {budget.numel()}"
                )
            env.budget = budget.to(self.rho.device)
        return env

    def problem(self) -> Problem:
        """R, K, d, rho, arm names, mean train prices, the train and validation splits (when
        present; the validation split only when the env does not replay it) and the hidden
        arms of a scenario."""
        train, validation = self.full_feedback_split("train"), self.full_feedback_split("val")
        prices = None if train is None else train.costs.mean(0)
        hidden = None
        if self.scenario is not None and bool(self.scenario.hidden.any()):
            hidden = self.scenario.hidden
            new = hidden.all(0)
            if bool(new.any()):
                # a model new in every trial: its offline scores are unknown (0, as /models)
                if train is not None:
                    train = replace(train, scores=train.scores.masked_fill(new, 0.0))
                if validation is not None:
                    validation = replace(validation, scores=validation.scores.masked_fill(new, 0.0))
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
            hidden_arms=hidden,
            budget=self.budget,
        )

    def after_change(self) -> AfterChange | None:
        """The trials' problems once the scenario's change has happened (train and
        validation splits changed, a new model visible: what retraining would see,
        :func:`~torchroute.envs.after_change.after_change`), or ``None`` without a
        scenario. The env's own splits and numbers are not touched."""
        if self.scenario is None:
            return None
        from torchroute.envs.after_change import after_change

        splits = (self.full_feedback_split("train"), self.full_feedback_split("val"))
        return after_change(self.problem(), self.scenario, *splits)

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
        """The contexts of round ``t`` (0-based): ``x [R, 1, d]``, ``index [R, 1]`` (and
        ``available``, ``prices [R, 1, K]`` under a scenario that has them)."""
        index = self._stream[:, t : t + 1]  # [R, 1]
        emb = None if self._embeddings is None else self._embeddings[index]
        self._round = t
        available = prices = None
        if self.scenario is not None:
            mask = self.scenario.available(t)  # [R, K] or None
            available = None if mask is None else mask[:, None, :]
            if self._price_reference is not None:  # a price event: the known prices
                prices = self.scenario.prices(t, self._price_reference)  # [R, 1, K]
        rho = None
        if self._rho_slot is not None:
            rho = self._request_rho[self._rho_slot[:, t : t + 1]]  # [R, 1]
        return Context(
            x=self._features[index],
            index=index,
            embedding=emb,
            available=available,
            prices=prices,
            rho=rho,
        )

    def _reference_prices(self) -> Tensor | None:
        """``[K]`` each model's mean train cost (``Problem.prices``, the same bits) when the
        scenario changes prices and the table has a train split; else ``None``."""
        if self.scenario is None or not self.scenario.moves_costs:
            return None
        if "train" not in self.table.split:
            return None
        rows = torch.as_tensor(self.table.rows("train"), device=self.device)
        return self._costs[rows].mean(0)

    def utilities(self, index: Tensor, rho: Tensor | None = None) -> Tensor:
        """``clip(Y - rho C, 0, 1)`` of the rows ``index [R, B]`` -> ``[R, B, K]``, with each
        request's ``rho [R, B]`` when given (``Context.rho``), else each trial's."""
        scores, costs = self._scores_costs(index)
        return utility(scores, costs, self._rho(rho))

    def _rho(self, rho: Tensor | None) -> Tensor:
        """``rho [R, B]`` as ``[R, B, 1]``, or each trial's ``[R, 1, 1]`` when ``None``."""
        return self.rho[:, None, None] if rho is None else rho.to(self.rho.dtype)[..., None]

    def _scores_costs(self, index: Tensor) -> tuple[Tensor, Tensor]:
        """Scores and costs ``[R, B, K]`` of the rows ``index`` at the current round."""
        scores, costs = self._scores[index], self._costs[index]
        if self.scenario is not None:
            scores, costs = self.scenario.apply(self._round, scores, costs)
        return scores, costs

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
        utility_ = self.utilities(index, context.rho)  # [R, B, K]
        scores, costs = self._scores_costs(index)
        action = decision.action[..., None]  # [R, B, 1]
        only_played = self.feedback == "bandit" and decision.observe is None
        if self.feedback == "full":
            observed = torch.ones_like(utility_, dtype=torch.bool)
        else:
            observed = torch.zeros_like(utility_, dtype=torch.bool).scatter_(-1, action, True)
            if decision.observe is not None:
                observed |= decision.observe
        best = utility_
        if context.available is not None:
            # a model that does not exist yet is neither observed nor the best choice
            observed &= context.available
            best = utility_.masked_fill(~context.available, float("-inf"))
        seen_utility, seen_scores = utility_, scores
        if self.feedback_schedule is not None:  # late, for some requests, with noise
            seen_scores = self.feedback_schedule.seen_scores(self._round, scores)
            seen_utility = utility(seen_scores, costs, self._rho(context.rho))
            observed &= self.feedback_schedule.rated(self._round)
            only_played = only_played and self.feedback_option.rate == 1.0
        zero = utility_.new_zeros(())
        feedback = Feedback(
            reward=torch.where(observed, seen_utility, zero),
            observed=observed,
            score=torch.where(observed, seen_scores, zero),
            cost=torch.where(observed, costs, zero),
            only_played=only_played,
        )
        chosen = utility_.gather(-1, action)[..., 0]
        outcome = {
            "utility": chosen,
            "regret": best.amax(-1) - chosen,
            "score": scores.gather(-1, action)[..., 0],
            "cost": costs.gather(-1, action)[..., 0],
            "share": torch.zeros_like(scores).scatter_(-1, action, 1.0),
        }
        if self._rho_slot is not None:
            outcome |= self._per_request_rho(outcome)
        if self.scenario is not None:
            after = self._round >= self.scenario.change
            outcome |= _phase_split(outcome, after)
            if self._round == 0:
                # each run writes a trace of its own: the env built once is shared by the
                # learners of a run, and its tensors by the worker processes of ``jobs``
                # (sent in shared memory), so the built one is never written in place
                self._trace = torch.zeros_like(self._trace)
            self._trace[:, self._round] = -outcome["regret"][:, 0]
        return feedback, outcome

    def _per_request_rho(self, outcome: dict[str, Tensor]) -> dict[str, Tensor]:
        """The round's ``rho_rounds [R, 1, J]`` (the one-hot of each request's entry of
        ``request_rhos``) and ``rho_<key> [R, 1, J]`` (the key's value there, 0 elsewhere)
        for the utility, regret, score and cost."""
        slot = self._rho_slot[:, self._round : self._round + 1]  # [R, 1]
        onehot = torch.nn.functional.one_hot(slot, len(self.request_rhos))  # [R, 1, J]
        onehot = onehot.to(outcome["utility"].dtype)
        out = {"rho_rounds": onehot}
        for key in _RHO_COLUMNS:
            out[f"rho_{key}"] = onehot * outcome[key][..., None]
        return out

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
        if self.scenario is not None and "utility_before" in sums:
            out |= self._scenario_columns(sums, rounds)
        if self.request_rhos is not None and "rho_rounds" in sums:
            count = sums["rho_rounds"]  # [R, J]
            for j, value in enumerate(self.request_rhos):
                tag = f"rho{value:g}"
                for key, column in _RHO_COLUMNS.items():
                    out[f"{column}_{tag}"] = sums[f"rho_{key}"][:, j] / count[:, j]
                out[f"rounds_{tag}"] = count[:, j]
        return out

    def _scenario_columns(self, sums: dict[str, Tensor], rounds: int) -> dict[str, Tensor]:
        """``avg_utility_before`` / ``avg_utility_after``, ``avg_cost_*`` and ``accuracy_*``
        (means over the rounds before and from the change of the chosen arm's utility, cost
        and score), ``rounds_to_recover`` of the trials' ``rho`` group and
        ``recover_trials`` (the group's size), each ``[R]`` (NaN before there are rounds to
        average). ``rounds_to_recover`` only once the stream is over (``rounds`` = the
        horizon): its level is the final quarter of the rounds after the change, which a
        summary at an earlier logged round does not have yet."""
        from torchroute.envs.scenario import rounds_to_recover

        change = self.scenario.change
        before, after = min(rounds, change), max(rounds - change, 0)
        nan = torch.full_like(sums["utility_before"], float("nan"))
        trace = self._trace[:, change:rounds]
        group = self._recover_groups().to(self.rho.device)  # [R]
        size = torch.bincount(group)[group]
        window = self.recover_window
        phases = {
            f"{column}_{phase}": sums[f"{key}_{phase}"] / n if n else nan
            for key, column in PHASE_COLUMNS.items()
            for phase, n in (("before", before), ("after", after))
        }
        if rounds < self.horizon:
            return phases | {"recover_trials": size.to(nan)}
        return phases | {
            "rounds_to_recover": rounds_to_recover(
                trace,
                group,
                window if window is None else min(window, after),
                self.recover_tolerance,
            ).to(nan.device),
            "recover_trials": size.to(nan),
        }

    def _recover_groups(self) -> Tensor:
        """``[R]`` labels of the trials averaged by ``rounds_to_recover``: one per ``rho``
        and per repeat of a ``(rho, seed)`` trial (a sweep batches its grid points as
        repeated trials: the ``g``-th repeat of each trial is grid point ``g``, so points
        never share a group)."""
        trials = self.trials()
        repeat = trials.groupby(["rho", "seed"]).cumcount()
        keys = pd.MultiIndex.from_arrays([trials["rho"], repeat])
        return torch.as_tensor(pd.factorize(keys)[0], dtype=torch.long)

    def state_dict(self) -> dict[str, Any]:
        """The per-round trace of a scenario (minus the regret; nothing without one)."""
        return {} if self.scenario is None else {"trace": self._trace.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        if self.scenario is None:
            return super().load_state_dict(state)
        if set(state) != {"trace"} or tuple(state["trace"].shape) != tuple(self._trace.shape):
            raise ValueError(f"expected a scenario trace {tuple(self._trace.shape)}")
        self._trace = state["trace"].to(self._trace)

    def _arm_totals(self, rounds: int) -> Tensor:
        """Score and cost sums of every arm over each trial's first ``rounds`` queries (as
        they were at each round, under a scenario's drift and price events)."""
        if rounds < self._arm_rounds:
            self._arm_rounds, self._arm_sums = 0, torch.zeros_like(self._arm_sums)
        bounds = [self._arm_rounds, rounds]
        if self.scenario is not None:  # drift and price events change the arms mid-stream
            bounds[1:1] = sorted({s for s in self.scenario.starts if bounds[0] < s < rounds})
        for start, stop in itertools.pairwise(bounds):
            rows = self._stream[:, start:stop]  # [R, t] rows not summed yet
            scores, costs = self._scores[rows], self._costs[rows]
            if self.scenario is not None:
                scores, costs = self.scenario.apply(start, scores, costs)
            part = torch.stack([scores, costs])  # [2, R, t, K]
            self._arm_sums = self._arm_sums + part.sum(2, dtype=torch.float64)
        self._arm_rounds = rounds
        return self._arm_sums

    def fingerprint(self) -> dict[str, Any]:
        """Table hash, split, horizon, feedback mode, seeds and rho (resume compares it)."""
        return (
            {
                "env": type(self).__name__,
                "table": self.table.fingerprint(),
                "split": list(self.split) if not isinstance(self.split, str) else self.split,
                "horizon": self.horizon,
                "feedback": self.feedback_option.fingerprint(),
                "seeds": self.seeds.tolist(),
                "rho": self.rho.detach().cpu().double().tolist(),
            }
            | ({} if self.scenario is None else {"scenario": self.scenario.fingerprint()})
            | ({} if self.request_rhos is None else {"request_rhos": list(self.request_rhos)})
            | ({"repeat": True} if self.repeat else {})
        )


def _passes(n: int, seed: int, passes: int) -> Tensor:
    """``[passes n]``: ``passes`` permutations of ``range(n)`` drawn one after the other
    from one generator seeded ``seed`` (one pass: the trial's stream order)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.cat([torch.randperm(n, generator=generator) for _ in range(passes)])


#: the outcome keys broken down per request trade-off -> their results column
#: (``<column>_rho<v>``)
_RHO_COLUMNS = {
    "utility": "avg_utility",
    "regret": "avg_regret",
    "score": "accuracy",
    "cost": "avg_cost",
}


def request_rho_stream(
    values: Sequence[float], seeds: Tensor, n_stream: int, horizon: int
) -> tuple[list[float], Tensor]:
    """The checked ``request_rhos`` and each trial's draws ``[R, T]`` (long, indices into
    them): uniform, from a generator seeded with the trial's seed after it drew the trial's
    permutation of the ``n_stream`` rows (set-up only)."""
    try:
        checked = [float(v) for v in values]
    except (TypeError, ValueError):
        checked = []
    if not checked or not all(v >= 0 and v < float("inf") for v in checked):
        raise ValueError(
            f"request_rhos must be a non-empty list of finite numbers >= 0, got {values!r}"
        )
    if len(set(checked)) != len(checked):
        raise ValueError(f"request_rhos must not repeat a value, got {checked}")
    slots = []
    for seed in seeds.tolist():
        g = torch.Generator().manual_seed(int(seed))
        torch.randperm(n_stream, generator=g)  # the trial's permutation, drawn first
        slots.append(torch.randint(len(checked), (horizon,), generator=g))
    return checked, torch.stack(slots)


def _phase_split(outcome: dict[str, Tensor], after: bool) -> dict[str, Tensor]:
    """``<key>_before`` and ``<key>_after`` of each :data:`PHASE_COLUMNS` key: the round's
    ``[R, B]`` value in its phase, zero in the other (summed with the rest, no sync)."""
    out = {}
    for key in PHASE_COLUMNS:
        value = outcome[key]
        zero = torch.zeros_like(value)
        out[f"{key}_before"] = zero if after else value
        out[f"{key}_after"] = value if after else zero
    return out
