"""The Router on its own: the route/feedback join, duplicates, bad input, restart, add_model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchroute.learners import EpsilonGreedy, LinUCB
from torchroute.serve import DuplicateModelError, Router, UnknownModelError

ARMS = ["small", "medium", "large"]
RHO, LAM, D = 2.0, 0.5, 4


def _router(tmp_path=None, factory=LinUCB.from_problem, **kwargs) -> Router:
    state = None if tmp_path is None else tmp_path / "router.pt"
    return Router.fresh(
        lambda problem: factory(problem, lam=LAM).double(),
        ARMS,
        rho=RHO,
        dim=D,
        prices=[0.01, 0.05, 0.2],
        dtype=torch.float64,
        state_path=state,
        **kwargs,
    )


def _embeddings(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, D))


def _ridge_reference(xs, arms, rewards):
    """``A_k = lam I + sum x x^T``, ``b_k = sum r x`` per arm, in numpy."""
    k = len(ARMS)
    a = np.stack([LAM * np.eye(D) for _ in range(k)])
    b = np.zeros((k, D))
    for x, arm, r in zip(xs, arms, rewards):
        a[arm] += np.outer(x, x)
        b[arm] += r * x
    return a, b


def _assert_ridge(router: Router, a: np.ndarray, b: np.ndarray) -> None:
    a_inv = router.learner.a_inv[0].numpy()  # [K, d, d]
    theta = router.learner.theta[0].numpy()  # [K, d]
    np.testing.assert_allclose(np.linalg.inv(a_inv), a, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(theta, np.linalg.solve(a, b[..., None])[..., 0], atol=1e-8)


def test_out_of_order_feedback_equals_the_closed_form_ridge_fit():
    router = _router()
    x = _embeddings(7)
    decisions = router.route(embeddings=x[:3]) + router.route(embeddings=torch.tensor(x[3:]))
    assert [set(d) for d in decisions] == [{"request_id", "model", "propensity"}] * 7
    # a fresh LinUCB ties its three arms everywhere: the random tie-break gives each 1/3
    assert all(d["propensity"] == pytest.approx(1 / 3) for d in decisions)
    scores = np.linspace(0.1, 1.0, 7)
    costs = np.array([0.0, 0.1, 0.5, 0.02, 0.3, 0.0, 0.2])
    ids = [d["request_id"] for d in decisions]
    order = [6, 2, 4, 0, 5, 1, 3]
    for part in (order[:3], order[3:4], order[4:]):  # three calls, shuffled
        report = router.feedback([ids[i] for i in part], scores[part], costs[part])
        assert report == {"applied": [ids[i] for i in part], "unknown": [], "duplicate": []}
    arms = [ARMS.index(d["model"]) for d in decisions]
    utility = np.clip(scores - RHO * costs, 0, 1)
    _assert_ridge(router, *_ridge_reference(x, arms, utility))
    assert int(router.learner.rounds[0]) == 7
    assert router.status()["pending"] == 0 and router.status()["feedback"] == 7


def test_unknown_and_duplicate_ids_are_reported_and_never_counted_twice():
    router = _router()
    x = _embeddings(2)
    decisions = router.route(embeddings=x)
    first, second = (d["request_id"] for d in decisions)
    report = router.feedback([first, "nope", first], [0.5, 0.5, 0.9], [0.0, 0.0, 0.0])
    assert report == {"applied": [first], "unknown": ["nope"], "duplicate": [first]}
    report = router.feedback([first, second], [0.2, 0.7], [0.0, 0.0])
    assert report == {"applied": [second], "unknown": [], "duplicate": [first]}
    assert int(router.learner.rounds[0]) == 2
    arms = [ARMS.index(d["model"]) for d in decisions]
    _assert_ridge(router, *_ridge_reference(x, arms, [0.5, 0.7]))  # first score only


@pytest.mark.parametrize(
    ("scores", "costs", "models", "error", "match"),
    [
        ([1.5], [0.0], None, ValueError, r"scores must be finite numbers in \[0, 1\], got 1.5"),
        ([-0.1], [0.0], None, ValueError, r"scores must be finite numbers in \[0, 1\]"),
        ([float("nan")], [0.0], None, ValueError, r"scores must be finite numbers in \[0, 1\]"),
        ([0.5], [-1.0], None, ValueError, r"costs must be finite and >= 0"),
        ([0.5, 0.5], [0.0], None, ValueError, r"scores has 2 entries for 1 request_ids"),
        ([0.5], [0.0], ["gpt-9"], UnknownModelError, r"unknown model 'gpt-9'"),
    ],
)
def test_bad_feedback_is_rejected_and_leaves_the_state_alone(scores, costs, models, error, match):
    router = _router()
    (decision,) = router.route(embeddings=_embeddings(1))
    before = {k: v.clone() for k, v in router.learner.state_dict().items()}
    with pytest.raises(error, match=match):
        router.feedback([decision["request_id"]], scores, costs, models)
    for key, value in router.learner.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert router.status()["pending"] == 1
    assert router.feedback([decision["request_id"]], [0.5], [0.0])["applied"]


def test_feedback_naming_another_model_than_the_routed_one_is_refused():
    router = _router()
    (decision,) = router.route(embeddings=_embeddings(1))
    other = next(m for m in ARMS if m != decision["model"])
    with pytest.raises(ValueError, match=r"was routed to"):
        router.feedback([decision["request_id"]], [0.5], [0.0], [other])
    assert router.feedback([decision["request_id"]], [0.5], [0.0], [decision["model"]])["applied"]


def test_route_input_errors():
    router = _router()
    with pytest.raises(ValueError, match=r"embeddings must be \[B >= 1, e=4\], got \(2, 3\)"):
        router.route(embeddings=np.zeros((2, 3)))
    with pytest.raises(ValueError, match="no encoder"):
        router.route(texts=["hello"])
    with pytest.raises(ValueError, match="either texts or embeddings"):
        router.route()
    with pytest.raises(ValueError, match=r"rho=1: LinUCB learns the utility at rho=2 and serves"):
        router.route(embeddings=_embeddings(1), rho=1.0)
    with pytest.raises(ValueError, match="NaN"):
        router.route(embeddings=[[float("nan")] * D])
    assert router.status()["pending"] == 0


def test_restart_from_the_saved_state_gives_the_same_next_decisions(tmp_path):
    router = _router(tmp_path, EpsilonGreedy.from_problem)  # random draws: the generator matters
    x = _embeddings(30, seed=1)
    decisions = router.route(embeddings=x[:20])
    ids = [d["request_id"] for d in decisions]
    router.feedback(ids[:15], np.linspace(0, 1, 15), np.zeros(15))  # 5 left pending
    restarted = _router(tmp_path, EpsilonGreedy.from_problem)
    assert restarted.status() == router.status()
    assert not list(tmp_path.glob("*.tmp")) and (tmp_path / "router.sqlite").is_file()
    keys = ("model", "propensity")
    next_a = [{k: d[k] for k in keys} for d in router.route(embeddings=x[20:])]
    next_b = [{k: d[k] for k in keys} for d in restarted.route(embeddings=x[20:])]
    assert next_a == next_b
    assert all(d["propensity"] < 1 for d in next_a)  # a random rule: the generator matters
    report = restarted.feedback(ids[15:] + ids[:1], [0.5] * 6, [0.0] * 6)  # pending survived
    assert report == {"applied": ids[15:], "unknown": [], "duplicate": ids[:1]}


def test_add_model_starts_the_new_arm_from_the_prior_and_survives_a_restart(tmp_path):
    router = _router(tmp_path)
    x = _embeddings(12, seed=2)
    decisions = router.route(embeddings=x[:10])
    old_pending = decisions[-1]["request_id"]
    ids = [d["request_id"] for d in decisions[:-1]]
    router.feedback(ids, np.full(9, 0.9), np.zeros(9))
    before = router.learner.a_inv.clone(), router.learner.theta.clone()
    router.add_model("xlarge", 0.5)
    assert router.arm_names == (*ARMS, "xlarge")
    a_inv, theta = router.learner.a_inv, router.learner.theta
    assert a_inv.shape == (1, 4, D, D)
    assert torch.equal(a_inv[:, :3], before[0]) and torch.equal(theta[:, :3], before[1])
    torch.testing.assert_close(a_inv[0, 3], torch.eye(D, dtype=a_inv.dtype) / LAM)
    assert torch.equal(theta[0, 3], torch.zeros(D, dtype=theta.dtype))
    # the untried arm's optimism wins over arms whose reward 0.9 is known
    assert {d["model"] for d in router.route(embeddings=x[10:])} == {"xlarge"}
    assert router.feedback([old_pending], [0.3], [0.0])["applied"] == [old_pending]
    with pytest.raises(DuplicateModelError, match="already served"):
        router.add_model("small", 0.1)
    with pytest.raises(ValueError, match="price must be a finite number >= 0"):
        router.add_model("tiny", -1.0)
    restarted = _router(tmp_path)
    assert restarted.arm_names == router.arm_names
    assert restarted.status()["prices"] == pytest.approx([0.01, 0.05, 0.2, 0.5])
    assert torch.equal(restarted.learner.a_inv, router.learner.a_inv)


def test_a_state_file_of_another_rho_is_refused(tmp_path):
    _router(tmp_path).route(embeddings=_embeddings(1))
    with pytest.raises(ValueError, match=r"another configuration: rho is 2.0 there, 3.0 here"):
        Router.fresh(
            lambda p: LinUCB.from_problem(p, lam=LAM).double(),
            ARMS,
            rho=3.0,
            dim=D,
            dtype=torch.float64,
            state_path=tmp_path / "router.pt",
        )
