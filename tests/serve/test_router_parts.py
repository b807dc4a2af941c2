"""Each part of a live router works alone, built with only what it needs.

A :class:`PendingRequests` on an in-memory :class:`RouterStore` admits, expires and drops
requests as the bounds say (the expected ids are worked out by hand); a
:class:`FeedbackLearner` joins feedback to them and updates a LinUCB whose Gram matrix is
checked against ``lam I + sum x x^T`` of the routed arm.
"""

from __future__ import annotations

import numpy as np
import torch

from torchroute.learners.linear import LinUCB
from torchroute.serve.feedback_learner import FeedbackLearner
from torchroute.serve.log import STATUS_NAMES, RouteRow
from torchroute.serve.pending_requests import PendingRequests
from torchroute.serve.router_store import RouterStore
from torchroute.types import Problem

D, K, LAM = 2, 2, 0.5


def _row(rid: str, t: float, arm: int = 0, x=(1.0, 0.0)) -> RouteRow:
    probs = np.full(K, 1.0 / K)
    return RouteRow(rid, t, arm, f"m{arm}", 0.5, probs, np.array(x), np.array(x))


def _item(row: RouteRow) -> dict:
    return {
        "x": torch.from_numpy(row.x),
        "embedding": torch.from_numpy(row.embedding),
        "arm": row.arm,
        "probs": torch.from_numpy(row.probabilities),
        "t": row.timestamp,
    }


def _statuses(store: RouterStore, ids: list[str]) -> list[str]:
    found = store.log.statuses(ids)
    return [STATUS_NAMES[found[rid]] for rid in ids]


def test_pending_requests_expire_and_drop_the_oldest_alone():
    store = RouterStore(None, {"test": 1})
    pending = PendingRequests(store, _item, max_pending=3, pending_ttl=10.0)
    pending.admit([_row("a", 0.0), _row("b", 1.0)], now=1.0)
    pending.admit([_row("c", 5.0), _row("d", 5.0)], now=5.0)  # 4 > 3: "a" is dropped
    assert list(pending.requests) == ["b", "c", "d"]
    pending.admit([_row("e", 12.0)], now=12.0)  # "b" (t=1) is older than 12 - 10
    assert list(pending.requests) == ["c", "d", "e"]
    pending.withdraw(lambda db: None, ["d", "never"])
    assert list(pending.requests) == ["c", "e"]
    assert _statuses(store, ["a", "b", "c", "d", "e"]) == [
        "dropped",
        "expired",
        "pending",
        "withdrawn",
        "pending",
    ]
    counts = (pending.dropped_count, pending.expired_count, pending.withdrawn_count)
    assert counts == (1, 1, 1) and pending.routes == 5


def test_feedback_learner_joins_by_id_and_updates_the_routed_arm_alone():
    problem = Problem(
        num_trials=1,
        num_arms=K,
        dim=D,
        rho=torch.tensor([0.0]),
        arm_names=("m0", "m1"),
        dtype=torch.float64,
    )
    factory = lambda p: LinUCB.from_problem(p, lam=LAM).double()  # noqa: E731
    store = RouterStore(None, {"test": 1})
    pending = PendingRequests(store, _item, max_pending=10, pending_ttl=None)
    learning = FeedbackLearner(
        factory(problem),
        factory,
        problem,
        rho=0.0,
        seed=0,
        store=store,
        pending=pending,
        checkpoint_every=100,
    )
    pending.admit([_row("a", 0.0, 1, (1.0, 2.0)), _row("b", 0.0, 1, (0.0, 1.0))], now=0.0)
    rows, report = learning.join(["a", "zz", "a", "b"], None)
    assert rows == [0, 3]
    assert report == {"applied": ["a", "b"], "unknown": ["zz"], "duplicate": ["a"]}
    learning.learn(["a", "b"], torch.tensor([0.9, 0.2]), torch.tensor([0.0, 0.0]))
    assert list(pending.requests) == [] and store.events == 1 and learning.feedback_count == 2
    assert learning.join(["a"], None)[1]["duplicate"] == ["a"]  # answered: never twice
    x = torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=torch.float64)
    gram = LAM * torch.eye(D, dtype=torch.float64) + x.T @ x
    a_inv = learning.learner.a_inv[0]  # [K, d, d]
    torch.testing.assert_close(a_inv[1], torch.linalg.inv(gram))
    torch.testing.assert_close(a_inv[0], torch.eye(D, dtype=torch.float64) / LAM)
