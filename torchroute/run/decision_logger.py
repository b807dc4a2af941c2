"""Log any learner's decisions as the behaviour policy of a simulation, in the log format.

:class:`DecisionRecorder` is a round callback for :func:`torchroute.loop.simulate`: it keeps
each round's context, decision and feedback on the device and, at the end, turns them into
one :class:`~torchroute.data.decisions.DecisionLog` per trial, with the learner's
probability of the chosen arm as the propensity and its whole distribution as
``probabilities``. :func:`log_decisions` runs a learner with one; the result can be
written with :func:`~torchroute.data.decisions.save_decisions` and evaluated with
``torchroute evaluate``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from torchroute.data.decision_io import save_decisions
from torchroute.data.decisions import DecisionLog
from torchroute.envs.base import Env
from torchroute.errors import OptionError
from torchroute.learners.base import Learner
from torchroute.loop import SimulationResult, simulate
from torchroute.types import Context, Decision, Feedback


class DecisionRecorder:
    """Records every round of a run (``R`` trials, ``B`` contexts a round) as decision logs.

    Args:
        env: the run's environment, one that declares ``Env.single_choice`` (arm names
            from its ``problem()``, query ids from its ``table`` when it has one, rho from
            its trial labels, score and cost from its ``logged_feedback``).
        learner: the behaviour learner's name (the log's ``learner`` column).
        contexts: also keep each decision's bandit features and the table's embedding
            (the ``features`` and ``embedding`` columns: ``(d + e) x 8`` bytes a decision,
            ~6 MB per 1,793-round trial with a 384-d encoder). Without them a log holds
            the decision, probabilities, feedback, rho, seed, trial and query id. An env
            without a table (no query id) always logs its features, the only context.
        first_trial: the run's index of the env's first trial (the ``trial`` column).

    Shapes:
        Each call stores ``probs [R, B, K]``, ``action [R, B]``, the chosen arm's score and
        cost ``[R, B]`` (and ``x [R, B, d]`` with ``contexts``); :meth:`logs` gives ``R``
        logs of ``T B`` rows.
    """

    def __init__(
        self, env: Env, learner: str, contexts: bool = False, first_trial: int = 0
    ) -> None:
        if not env.single_choice:
            raise OptionError(
                f"{type(env).__name__} does not route each decision to one arm "
                "(Env.single_choice); a decision log holds one arm per row"
            )
        self.env = env
        problem = env.problem()
        self.arm_names = tuple(problem.arm_names)
        self.learner = learner
        trials = env.trials()
        self.rho = trials["rho"].tolist() if "rho" in trials else [None] * env.num_trials
        self.seed = trials["seed"].tolist() if "seed" in trials else [None] * env.num_trials
        self.first_trial = first_trial
        self.table = getattr(env, "table", None)
        self.contexts = contexts or self.table is None
        self._rounds: list[dict[str, Tensor]] = []

    def __call__(self, t: int, context: Context, decision: Decision, feedback: Feedback) -> None:
        """Record round ``t``: the chosen arm, its probability and the feedback, ``[R, B]``."""
        if decision.is_subset:
            raise OptionError("decision logs hold one arm per decision, not subsets")
        score, cost = self.env.logged_feedback(context, decision, feedback)  # [R, B] each
        row = {
            "probs": decision.probs.detach(),
            "action": decision.action,
            "score": score.detach(),
            "cost": cost.detach(),
        }
        if context.index is not None:
            row["index"] = context.index
        if self.contexts:
            row["x"] = context.x.detach()
            if context.embedding is not None:
                row["embedding"] = context.embedding.detach()
        self._rounds.append(row)

    def logs(self) -> list[DecisionLog]:
        """One log per trial, rows in round order (``request_id`` ``"<round>"`` or
        ``"<round>.<b>"`` with ``B > 1``)."""
        if not self._rounds:
            raise ValueError("no rounds were recorded")
        keys = self._rounds[0].keys()
        data = {k: torch.cat([r[k] for r in self._rounds], 1).cpu() for k in keys}  # [R, TB]
        batch = self._rounds[0]["action"].shape[1]
        total = data["action"].shape[1]
        ids = tuple(str(i) if batch == 1 else f"{i // batch}.{i % batch}" for i in range(total))
        out = []
        for r in range(data["action"].shape[0]):
            probs = data["probs"][r].double()
            action = data["action"][r].long()
            query_ids = None
            if "index" in data and self.table is not None:
                query_ids = tuple(self.table.query_ids[i] for i in data["index"][r].tolist())
            rho, seed = self.rho[r], self.seed[r]
            out.append(
                DecisionLog(
                    request_ids=ids,
                    arm_names=self.arm_names,
                    action=action,
                    propensity=probs.gather(1, action[:, None])[:, 0],
                    score=data["score"][r].double(),
                    cost=data["cost"][r].double(),
                    probabilities=probs,
                    features=data["x"][r].double() if "x" in data else None,
                    embedding=data["embedding"][r].double() if "embedding" in data else None,
                    query_ids=query_ids,
                    learner=(self.learner,) * total,
                    rho=None if rho is None else torch.full((total,), float(rho)),
                    seed=None if seed is None else torch.full((total,), int(seed)),
                    trial=torch.full((total,), self.first_trial + r),
                    source=f"<{self.learner} trial {r}>",
                )
            )
        return out


def log_decisions(
    learner: Learner,
    env: Env,
    name: str | None = None,
    contexts: bool = True,
    **simulate_kwargs: Any,
) -> tuple[list[DecisionLog], SimulationResult]:
    """Run ``learner`` on ``env`` as the behaviour policy and log its decisions.

    Args:
        learner: any learner (``R`` trials), already on ``env.device``.
        env: an env that declares ``single_choice`` (e.g.
            :class:`~torchroute.envs.SingleChoiceEnv`, :class:`~torchroute.envs.LowRankExperts`).
        name: the learner's name in the logs (default: its class name).
        contexts: keep the features and embeddings (:class:`DecisionRecorder`); in memory
            they cost nothing on disk, and ``torchroute evaluate`` reads its targets' contexts
            from them.
        simulate_kwargs: passed to :func:`torchroute.loop.simulate` (``seed``, ``rng``, ...).

    Returns:
        ``R`` decision logs (one per trial) and the simulation's result.
    """
    recorder = DecisionRecorder(env, name or type(learner).__name__, contexts=contexts)
    simulate_kwargs.setdefault("progress", False)
    result = simulate(learner, env, on_round=recorder, **simulate_kwargs)
    return recorder.logs(), result


def write_decision_logs(
    logs: list[DecisionLog], folder: str | Path, suffix: str = ".parquet", start: int = 0
) -> list[Path]:
    """Write ``logs`` as ``folder/trial<start + r><suffix>`` (atomic, one file per trial;
    ``start``: the global number of the first trial, for a run split into pieces)."""
    folder = Path(folder)
    return [save_decisions(log, folder / f"trial{start + r}{suffix}") for r, log in enumerate(logs)]


__all__ = ["DecisionRecorder", "log_decisions", "write_decision_logs"]
