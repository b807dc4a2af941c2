"""Each request's rho on a real serve server on loopback: routed as ``argmax y - rho c``
predicts by hand, logged per request, learned with, refused when out of range or when the
learner learns a utility at one rho."""

from __future__ import annotations

import sqlite3
import threading
import time

import httpx
import pytest
import torch
import uvicorn

from tests.serve.rho_learner import PriceAwareRouter
from torchroute.learners import LinUCB
from torchroute.serve import Router
from torchroute.serve.app import create_app
from torchroute.serve.log import RouterLog, log_path
from torchroute.serve.startup import bind

ARMS = ["small", "medium", "large"]
SCORES = [0.5, 0.8, 0.9]  # predicted quality y
PRICES = [0.0, 0.001, 0.01]  # price c
OWN_RHO = 100.0
EMB = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]


def _by_hand(rho: float) -> str:
    """argmax_k y_k - rho c_k, computed here without the library."""
    values = [y - rho * c for y, c in zip(SCORES, PRICES)]
    return ARMS[values.index(max(values))]


def _router(state_path=None, learner: str = "price_aware") -> Router:
    if learner == "price_aware":
        factory = lambda p: PriceAwareRouter.from_problem(p, scores=SCORES)  # noqa: E731
    else:
        factory = lambda p: LinUCB.from_problem(p).double()  # noqa: E731
    return Router.fresh(
        factory, ARMS, rho=OWN_RHO, dim=2, prices=PRICES, dtype=torch.float64, state_path=state_path
    )


class _Server:
    """A real uvicorn server for ``router`` on a free loopback port, in a thread."""

    def __init__(self, router: Router) -> None:
        self.router, self.sock = router, bind("127.0.0.1", 0)  # as `torchroute serve` binds
        self.uv = uvicorn.Server(uvicorn.Config(create_app(router), log_level="warning"))
        self.thread = threading.Thread(
            target=self.uv.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.uv.started and time.monotonic() < deadline:
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self) -> None:
        self.uv.should_exit = True
        self.thread.join(10)
        self.sock.close()
        self.router.close()


@pytest.fixture
def served(tmp_path):
    server = _Server(_router(tmp_path / "router.pt"))
    with httpx.Client(base_url=server.url, timeout=10) as http:
        yield server.router, http
    server.close()


def _route(http, **body):
    response = http.post("/route", json={"embeddings": EMB[: body.pop("n", len(EMB))], **body})
    assert response.status_code == 200, response.text
    return response.json()["decisions"]


def test_each_request_is_routed_as_argmax_y_minus_its_rho_c(served):
    router, http = served
    assert [_by_hand(r) for r in (0.0, 100.0, 1000.0)] == ["large", "medium", "small"]
    decisions = _route(http, rho=[0, 100.0, 1000])
    assert [d["model"] for d in decisions] == ["large", "medium", "small"]
    assert [d["propensity"] for d in decisions] == [1.0, 1.0, 1.0]
    for rho in (0.0, 5.0, 50.0, 99.0, 101.0, 450.0, 1e8):  # one number for every query
        assert {d["model"] for d in _route(http, rho=rho)} == {_by_hand(rho)}, rho
    assert {d["model"] for d in _route(http)} == {_by_hand(OWN_RHO)}  # no rho: the router's
    rhos = router.log.table()["rho"]
    assert rhos[:3] == [0.0, 100.0, 1000.0] and rhos[-3:] == [OWN_RHO] * 3


def test_feedback_is_learned_with_the_request_rho(served):
    router, http = served
    ids = [d["request_id"] for d in _route(http, rho=[0, 100, 1000])]
    ids += [_route(http, n=1)[0]["request_id"]]  # the router's rho (100)
    body = {"request_ids": ids, "scores": [1.0] * 4, "costs": [0.002] * 4}
    assert http.post("/feedback", json=body).json()["applied"] == ids
    utility = dict(router.query(lambda db: db.execute("SELECT request_id, utility FROM feedback")))
    # clip(1 - rho 0.002, 0, 1) with each request's rho
    assert [utility[i] for i in ids] == pytest.approx([1.0, 0.8, 0.0, 0.8], abs=1e-12)


@pytest.mark.parametrize(
    ("rho", "where"),
    [
        (-1.0, "rho: must be a finite number in [0, 1e+08]"),
        (1.5e8, "rho: must be a finite number in [0, 1e+08]"),
        ([0.0, -0.5, 1.0], "rho.1: must be a finite number"),
        ([0.0, 1.0], "rho: 2 values for 3 queries"),
        ("500", "rho"),
        (True, "rho"),
    ],
)
def test_a_rho_out_of_range_is_refused_and_nothing_logged(served, rho, where):
    router, http = served
    response = http.post("/route", json={"embeddings": EMB, "rho": rho})
    assert response.status_code == 422
    assert response.json()["detail"].startswith(where)
    assert router.log.num_routes() == 0 and router.status()["pending"] == 0


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"[0, NaN, 1]"])
def test_a_rho_that_is_not_a_finite_number_is_refused(served, literal):
    router, http = served
    body = b'{"embeddings": [[1, 0], [0, 1], [1, 1]], "rho": %s}' % literal
    response = http.post("/route", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422 and "must be a finite number" in response.json()["detail"]
    assert router.log.num_routes() == 0


def test_a_utility_learner_refuses_a_rho_other_than_its_own(tmp_path):
    server = _Server(_router(learner="linucb"))
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            response = http.post("/route", json={"embeddings": EMB, "rho": [100, 100, 500]})
            assert response.status_code == 422
            detail = response.json()["detail"]
            assert detail.startswith("rho=500: LinUCB learns the utility at rho=100")
            assert "objective: quality_cost" in detail
            assert server.router.log.num_routes() == 0
            assert len(_route(http, rho=OWN_RHO)) == 3  # its own rho is served
    finally:
        server.close()


def test_a_pending_request_keeps_its_rho_over_a_restart(tmp_path):
    router = _router(tmp_path / "router.pt")
    (rid,) = [d["request_id"] for d in router.route(embeddings=[[1.0, 0.0]], rho=300.0)]
    router.close()
    router = _router(tmp_path / "router.pt")
    router.feedback([rid], [1.0], [0.001])
    (utility,) = router.query(lambda db: db.execute("SELECT utility FROM feedback")).fetchone()
    assert utility == pytest.approx(1 - 300 * 0.001, abs=1e-12)
    router.close()


def test_a_log_written_before_the_rho_column_is_read_and_opened(tmp_path):
    path = tmp_path / "router.pt"
    router = _router(path)
    (old,) = [d["request_id"] for d in router.route(embeddings=[[1.0, 0.0]])]
    router.close()
    with sqlite3.connect(log_path(path)) as db:  # the schema of before the column
        db.execute("ALTER TABLE routes DROP COLUMN rho")
    log = RouterLog.read(log_path(path))
    assert log.table()["rho"] == [OWN_RHO]  # read as the router's rho, nothing written
    log.close()
    with sqlite3.connect(log_path(path)) as db:
        assert "rho" not in {row[1] for row in db.execute("PRAGMA table_info(routes)")}
    router = _router(path)  # opened for serving: the column is added
    (new,) = [d["request_id"] for d in router.route(embeddings=[[1.0, 0.0]], rho=0.0)]
    router.feedback([old, new], [1.0, 1.0], [0.002, 0.002])
    utility = dict(router.query(lambda db: db.execute("SELECT request_id, utility FROM feedback")))
    assert utility[old] == pytest.approx(0.8) and utility[new] == 1.0
    assert router.log.table()["rho"] == [OWN_RHO, 0.0]
    router.close()


BUDGET, ETA = 0.003, 0.03  # between medium's price and large's: a mix of the two


def _pace_by_hand(rho: float, costs: list[float]) -> float:
    """rho <- max(0, rho + eta (c - b) / b^2), one step per answered request."""
    for c in costs:
        rho = max(0.0, rho + ETA * (c - BUDGET) / BUDGET**2)
    return rho


def _paced_stream(http, n: int) -> list[tuple[str, float]]:
    """``n`` requests routed one by one, each answered at its model's price: ``(model,
    cost)``."""
    out = []
    for _ in range(n):
        (decision,) = _route(http, n=1)
        cost = PRICES[ARMS.index(decision["model"])]
        body = {"request_ids": [decision["request_id"]], "scores": [0.7], "costs": [cost]}
        assert http.post("/feedback", json=body).status_code == 200
        out.append((decision["model"], cost))
    return out


def test_a_budget_holds_the_mean_cost_and_survives_a_restart(tmp_path):
    path = tmp_path / "router.pt"
    router = _router(path)
    router.pace(BUDGET, ETA)
    server = _Server(router)
    with httpx.Client(base_url=server.url, timeout=10) as http:
        stream = _paced_stream(http, 90)
        response = http.post("/route", json={"embeddings": EMB, "rho": 5})
        assert response.status_code == 422 and "--budget" in response.json()["detail"]
        pacer = http.get("/health").json()["pacer"]
    server.close()
    costs = [c for _, c in stream]
    # each request was routed with the hand-computed pacer's rho after the costs before it
    logged = RouterLog.read(log_path(path)).table()["rho"]
    assert logged == pytest.approx([_pace_by_hand(OWN_RHO, costs[:i]) for i in range(90)])
    assert pacer["rho"] == pytest.approx(_pace_by_hand(OWN_RHO, costs), rel=1e-12)
    assert {m for m, _ in stream} == {"medium", "large"}
    assert sum(costs[30:]) / 60 == pytest.approx(BUDGET, rel=0.05)  # after a warm-up

    router = _router(path)  # a restart: the pacer goes on where it stopped
    router.pace(BUDGET, ETA)
    pacer = router.status()["pacer"]
    assert pacer["rho"] == pytest.approx(_pace_by_hand(OWN_RHO, costs), rel=1e-12)
    assert pacer["requests"] == 90 and pacer["mean_cost"] == pytest.approx(sum(costs) / 90)
    server = _Server(router)
    with httpx.Client(base_url=server.url, timeout=10) as http:
        more = _paced_stream(http, 60)
    server.close()
    every = costs + [c for _, c in more]
    logged = RouterLog.read(log_path(path)).table()["rho"]
    assert logged == pytest.approx([_pace_by_hand(OWN_RHO, every[:i]) for i in range(150)])
    assert sum(every[30:]) / 120 == pytest.approx(BUDGET, rel=0.05)


def test_a_budget_is_refused_for_a_utility_learner(tmp_path):
    router = _router(tmp_path / "router.pt", learner="linucb")
    with pytest.raises(ValueError, match=r"--budget: LinUCB learns the utility at rho=100 .*"):
        router.pace(BUDGET)
    with pytest.raises(ValueError, match=r"--budget must be a mean cost per request > 0"):
        _router(learner="price_aware").pace(0.0)
    router.close()


def test_a_quality_cost_linucb_learns_the_scores_of_requests_at_any_rho():
    router = Router.fresh(
        lambda p: LinUCB.from_problem(p, alpha=1.0, lam=1.0, objective="quality_cost").double(),
        ARMS,
        rho=OWN_RHO,
        dim=2,
        prices=PRICES,
        dtype=torch.float64,
    )
    truth = dict(zip(ARMS, SCORES))  # every model always scores its y, whatever the query
    for _ in range(30):  # requests at three trade-offs, each answered with its model's score
        decisions = router.route(embeddings=[[1.0, 0.0]] * 3, rho=[0.0, 100.0, 1000.0])
        ids = [d["request_id"] for d in decisions]
        router.feedback(ids, [truth[d["model"]] for d in decisions], [0.002] * 3)
    counts = dict(router.log.db.execute("SELECT model, count(*) FROM routes GROUP BY model"))
    assert sum(counts.values()) == 90 and len(counts) >= 2
    # ridge on the score with x = [1, 0]: theta_k[0] = n_k y_k / (n_k + lam), whatever the rho
    theta = router.learner.theta[0, :, 0]
    expected = [counts.get(k, 0) * truth[k] / (counts.get(k, 0) + 1.0) for k in ARMS]
    assert theta.tolist() == pytest.approx(expected, abs=1e-12)
    router.close()
