"""A live router of a subset learner: each query goes to a set of models, one outcome back.

A subset learner (:class:`~torchroute.learners.subset_base.SubsetLearner`) decides, per
query, ``M`` draws over the ``K`` models; the models called are the distinct draws, and
all of them are paid. What it learns from is the set's outcome only (``Feedback.set_reward``,
as :class:`~torchroute.envs.subset.SubsetEnv` gives it): the best score among the models
called, summed over the ``N`` facets when the table has several (in ``[0, N]``). The
learner knows each model's cost vector and the target box up front (the run's
:class:`~torchroute.envs.subset.SubsetProblem`), so the reported cost is logged, not learnt.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from torchroute.errors import InputError, ScoreRangeError
from torchroute.serve.fingerprint import mix_seed
from torchroute.serve.log import RouteRow
from torchroute.serve.request_rho import request_rhos
from torchroute.serve.router import Router, _sha256
from torchroute.serve.subset_learner import SubsetFeedbackLearner
from torchroute.serve.subset_propensity import subset_propensity
from torchroute.types import Context, Problem


class SubsetRouter(Router):
    """Routes each of ``B`` queries to a subset of models with one trial of a subset learner.

    ``route`` returns, per query, the models called (the distinct draws, in draw order),
    the ``M`` draws, the learner's per-draw distribution over the models and the
    propensity of the set: the probability that the rule routes the query to exactly that
    set (:func:`~torchroute.serve.subset_propensity.subset_propensity`). The context of a
    query is the one-hot of its group among ``problem.context_names`` (a table's query
    groups; ``groups=`` of :meth:`route`), which a contextual learner needs and the others
    ignore (a query without a group gets the zero context). Texts or embeddings are still
    sent: they are embedded and logged with the decision, not read by the learner.

    ``feedback`` takes per request the set's outcome as ``score`` (in ``[0, N]``, ``N``
    facets) and the total cost paid; each request is one learner update, in the order
    given (the env's protocol: one query per round). Models cannot be added (the learner's
    cost vectors and target box are fixed by the run). Otherwise as :class:`Router`.

    Args:
        learner: a one-trial subset learner built for ``problem``.
        factory, features, encode, state_path, seed, ...: as :class:`Router`.
        problem: the one-trial :class:`~torchroute.envs.subset.SubsetProblem`.
    """

    learner_part = SubsetFeedbackLearner

    def __init__(self, learner, factory, problem: Problem, **kwargs: Any) -> None:
        self.context_names = tuple(getattr(problem, "context_names", ()) or ())
        self.draws = int(problem.draws)
        self.num_facets = int(getattr(problem, "num_facets", 1))
        self.needs_groups = bool(learner.reads_groups)
        super().__init__(learner, factory, problem, **kwargs)

    def _embed_dim(self, problem: Problem, features: Callable | None) -> int | None:
        return problem.embed_dim

    def route(
        self,
        texts: Sequence[str] | None = None,
        embeddings: Tensor | Sequence[Sequence[float]] | None = None,
        rho: float | Sequence[float] | None = None,
        groups: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Choose a set of models for each of ``B`` queries (texts, or embeddings ``[B, e]``).

        Args:
            texts: ``B`` query texts (embedded with the run's encoder), or ``None``.
            embeddings: ``[B, e]`` embeddings instead of texts.
            rho: when given (one number, or one per query), it must be the served trial's
                ``rho``.
            groups: ``B`` group names among ``problem.context_names`` (needed by a
                contextual learner).

        Returns:
            ``B`` dicts ``{request_id, models, draws, propensity, probabilities}``:
            ``models`` the distinct draws in draw order, ``draws`` the ``M`` draws,
            ``propensity`` the probability of the set ``models``, ``probabilities``
            ``{model: p}`` the learner's per-draw distribution.

        Raises:
            StoreError: the log cannot be written; no request was added.
        """
        batch = len(texts) if texts is not None else 0 if embeddings is None else len(embeddings)
        other = next((r for r in request_rhos(rho, batch) or () if r != self.rho), None)
        if other is not None:
            raise InputError(
                f"rho={other:g} but this router serves the trial with rho={self.rho:g}"
            )
        emb = self._embed(texts, embeddings)  # [B, e]
        x = self._contexts(groups, emb.shape[0])  # [B, X]
        hashes = None if texts is None else [_sha256(t) for t in texts]
        names = self.arm_names
        with self._lock:
            now, rows = time.time(), []
            for b in range(emb.shape[0]):  # one context per act: the subset protocol
                self.generator.manual_seed(mix_seed(self.seed, "route", self.requests.routes + b))
                context = Context(x=x[b][None, None])
                decision = self.learner.act(context, self.generator)
                propensity, _ = subset_propensity(
                    self.learner, context, decision, self.generator, self.propensity_draws
                )
                draws = decision.action[0, 0].tolist()
                called = [names[i] for i in dict.fromkeys(draws)]
                rows.append(
                    RouteRow(
                        uuid.uuid4().hex,
                        now,
                        -1,
                        json.dumps(called),
                        propensity,
                        decision.probs[0, 0].double().numpy(),
                        x[b].double().numpy(),
                        emb[b].double().numpy(),
                        None if hashes is None else hashes[b],
                        draws,
                    )
                )
            self.requests.admit(rows, now)
        return [
            {
                "request_id": r.request_id,
                "models": json.loads(r.model),
                "draws": [names[i] for i in r.draws],
                "propensity": r.propensity,
                "probabilities": dict(zip(names, r.probabilities.tolist())),
            }
            for r in rows
        ]

    def add_model(self, name: str, price: float) -> None:
        """Refused: a subset learner's cost vectors and target box are fixed by its run."""
        raise InputError(
            f"{type(self.learner).__name__} routes subsets: its per-model cost vectors and "
            "target box come from the run, so a model cannot be added; simulate again with it"
        )

    def status(self) -> dict[str, Any]:
        """:meth:`Router.status` plus ``draws`` (``M``) and ``groups`` (context names)."""
        return {**super().status(), "draws": self.draws, "groups": list(self.context_names)}

    # -- internals -----------------------------------------------------------------------

    def _contexts(self, groups: Sequence[str] | None, b: int) -> Tensor:
        """One-hot group contexts ``[B, X]`` (zeros for queries without a group)."""
        dim, dtype = self.problem.dim, self.problem.dtype
        if groups is None:
            if self.needs_groups and dim > 1:
                raise InputError(
                    f"groups: {type(self.learner).__name__} reads each query's group; send "
                    f"groups (one of {list(self.context_names)}) with the queries"
                )
            return torch.zeros(b, dim, dtype=dtype) if dim > 1 else torch.ones(b, 1, dtype=dtype)
        if isinstance(groups, str) or len(groups) != b:
            raise InputError(f"groups must be a list of {b} group names, one per query")
        unknown = [g for g in groups if g not in self.context_names]
        if unknown:
            raise InputError(
                f"groups: unknown group {unknown[0]!r}; the run's groups: "
                f"{list(self.context_names)}"
            )
        index = torch.tensor([self.context_names.index(g) for g in groups])
        return torch.nn.functional.one_hot(index, dim).to(dtype)

    def _check_feedback(self, ids, scores, costs, models) -> tuple[Tensor, Tensor]:
        """Set outcomes ``[n]`` in ``[0, N]`` and costs ``[n]`` ``>= 0``; no ``models``."""
        if models is not None:
            raise InputError(
                "models: a subset router takes no models with feedback (each request's set "
                "is known from its id)"
            )
        n = self.num_facets
        scaled = [s / n if isinstance(s, (int, float)) else s for s in scores]
        try:
            score, cost = super()._check_feedback(ids, scaled, costs, None)
        except ScoreRangeError as exc:
            raise ScoreRangeError(
                f"scores must be the set's outcome in [0, {n}] (N={n} facets): {exc}"
            ) from exc
        return score * n, cost

    def _item(self, row: RouteRow) -> dict[str, Any]:
        item = super()._item(row)
        item["draws"] = torch.tensor(row.draws, dtype=torch.long)
        return item
