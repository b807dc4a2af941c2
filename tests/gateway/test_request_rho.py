"""Each request's rho through the gateway (a real server on loopback, the official ``openai``
client, the stub backend): one learner serves every rho, ``router-<rho>`` keeps its rho,
the field ``rho`` asks for one; refused when out of range or when the learner learns a
utility at one rho."""

from __future__ import annotations

import httpx
import openai
import pytest
import torch

from tests.gateway.helpers import ARMS, BOB, PRICES, build_router, encode, keys, write_backends
from tests.gateway.stub_backend import ServerThread
from tests.serve.rho_learner import PriceAwareRouter
from torchroute.gateway.app import Gateway, create_gateway_app
from torchroute.gateway.backends import load_backends
from torchroute.serve import Router
from torchroute.serve.log import RouterLog, log_path

SCORES = [0.5, 0.8, 0.9]  # predicted quality y of small, medium, big
ROUTER_PRICES = [0.0, 0.001, 0.01]  # the router's price c of each
OWN_RHO = 100.0
MESSAGES = [{"role": "user", "content": "what is two plus two"}]


def _by_hand(rho: float) -> str:
    """argmax_k y_k - rho c_k, computed here without the library."""
    values = [y - rho * c for y, c in zip(SCORES, ROUTER_PRICES)]
    return ARMS[values.index(max(values))]


def _price_aware(state=None) -> Router:
    return Router.fresh(
        lambda p: PriceAwareRouter.from_problem(p, scores=SCORES),
        ARMS,
        rho=OWN_RHO,
        dim=3,
        prices=ROUTER_PRICES,
        dtype=torch.float64,
        encode=encode,
        state_path=state,
    )


@pytest.fixture
def gateway(stub, tmp_path):
    router = _price_aware(tmp_path / "r.pt")
    backends = load_backends(write_backends(tmp_path / "b.yaml", stub.url, timeout_s=30))
    with ServerThread(create_gateway_app(Gateway([router], backends, keys=keys()))) as server:
        yield router, server.url
    router.close()


def _rho_of(router: Router, rid: str) -> float | None:
    query = "SELECT rho FROM routes WHERE request_id = ?"
    return router.log.db.execute(query, (rid,)).fetchone()[0]


def test_one_learner_serves_every_rho(gateway):
    router, url = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=BOB, max_retries=0)
    assert [_by_hand(r) for r in (0.0, OWN_RHO, 1000.0)] == ["big", "medium", "small"]
    cases = [  # (model, the rho field, the rho routed with, the rho logged)
        ("router", None, OWN_RHO, None),
        ("router", 1000.0, 1000.0, 1000.0),
        ("router", 0, 0.0, 0.0),
        ("router-0", None, 0.0, 0.0),
        ("router-1000", 1000.0, 1000.0, 1000.0),
        (f"router-{OWN_RHO:g}", None, OWN_RHO, None),
    ]
    for model, rho, routed_with, logged in cases:
        extra = {} if rho is None else {"extra_body": {"rho": rho}}
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=MESSAGES, **extra
        )
        completion = raw.parse()
        info = completion.model_extra["torchroute"]
        assert info["model"] == _by_hand(routed_with), (model, rho)
        assert info["rho"] == routed_with
        assert completion.choices[0].message.content.startswith(f"answer from {info['model']}-up")
        assert _rho_of(router, raw.headers["x-request-id"]) == logged
    assert [m.id for m in client.models.list()] == ["router", f"router-{OWN_RHO:g}"]


def test_feedback_learns_the_utility_at_the_request_rho(gateway):
    router, url = gateway
    auth = {"authorization": f"Bearer {BOB}"}
    body = {"model": "router", "messages": MESSAGES, "rho": 300}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, headers=auth).json()
    rid, arm = answer["torchroute"]["request_id"], answer["torchroute"]["model"]
    usage = answer["usage"]
    cost = (
        usage["prompt_tokens"] * PRICES[arm][0] + usage["completion_tokens"] * PRICES[arm][1]
    ) / 1e6
    response = httpx.post(
        f"{url}/v1/feedback", json={"request_id": rid, "score": 0.9}, headers=auth
    )
    assert response.status_code == 200, response.text
    query = "SELECT utility FROM feedback WHERE request_id = ?"
    ((utility,),) = router.log.db.execute(query, (rid,)).fetchall()
    assert utility == pytest.approx(min(1.0, max(0.0, 0.9 - 300 * cost)), abs=1e-12)


@pytest.mark.parametrize(
    ("model", "rho", "message"),
    [
        ("router", -1, "rho: Input should be greater than or equal to 0"),
        ("router", 2e8, "rho: Input should be less than or equal to 100000000"),
        ("router", "5", "rho: Input should be a valid number"),
        ("router-0", 500, "rho: 500, but the model 'router-0' fixes rho=0"),
        ("router--5", None, "model 'router--5': this gateway serves"),
        ("router-nan", None, "model 'router-nan': this gateway serves"),
    ],
)
def test_a_rho_out_of_range_is_refused_before_anything_is_logged(gateway, model, rho, message):
    router, url = gateway
    body = {"model": model, "messages": MESSAGES, **({} if rho is None else {"rho": rho})}
    response = httpx.post(
        f"{url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {BOB}"}
    )
    assert response.status_code == 422
    assert response.json()["error"]["message"].startswith(message)
    assert router.log.num_routes() == 0


def test_a_utility_learner_serves_only_its_rho(stub, tmp_path):
    router = build_router(rho=OWN_RHO)
    backends = load_backends(write_backends(tmp_path / "b.yaml", stub.url, timeout_s=30))
    with ServerThread(create_gateway_app(Gateway([router], backends))) as server:
        url = f"{server.url}/v1/chat/completions"
        response = httpx.post(url, json={"model": "router", "messages": MESSAGES, "rho": 500})
        assert response.status_code == 422
        message = response.json()["error"]["message"]
        assert message.startswith("rho: 500 is not served") and "objective: quality_cost" in message
        response = httpx.post(url, json={"model": "router-500", "messages": MESSAGES})
        assert response.status_code == 422 and "this gateway serves" in response.text
        assert router.log.num_routes() == 0
        own = {"model": "router", "messages": MESSAGES, "rho": OWN_RHO}
        assert httpx.post(url, json=own).status_code == 200  # its own rho
    router.close()


# the router's prices in the backends' unit: the stub's cost of one call of MESSAGES (5 words
# in, 8 out) at PRICES, computed by hand
CALL_COST = {arm: (5 * PRICES[arm][0] + 8 * PRICES[arm][1]) / 1e6 for arm in ARMS}
BUDGET, ETA = 1.2e-4, 0.03  # between medium's call and big's: a mix of the two
CAROL = "carol-key-0123456789abcdef"


def _pace_by_hand(rho: float, costs: list[float], budget: float = BUDGET) -> float:
    """rho <- max(0, rho + eta (c - b) / b^2), one step per charged call."""
    for c in costs:
        rho = max(0.0, rho + ETA * (c - budget) / budget**2)
    return rho


def _paced_router(state) -> Router:
    return Router.fresh(
        lambda p: PriceAwareRouter.from_problem(p, scores=SCORES),
        ARMS,
        rho=OWN_RHO,
        dim=3,
        prices=[CALL_COST[arm] for arm in ARMS],
        dtype=torch.float64,
        encode=encode,
        state_path=state,
    )


def _keys_with_carol():
    from torchroute.gateway.keys import Key, Keys, digest

    return Keys([Key("bob", digest(BOB)), Key("carol", digest(CAROL), budget=BUDGET)])


def _stream(url: str, key: str, n: int) -> list[tuple[str, float]]:
    """``n`` chat calls of ``key``: ``(model, cost charged)`` of each."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
    out = []
    for _ in range(n):
        info = client.chat.completions.create(model="router", messages=MESSAGES).model_extra
        out.append((info["torchroute"]["model"], info["torchroute"]["cost"]))
    return out


#: the rho of each request a key made, in order
_BY_KEY = (
    "SELECT r.rho FROM routes r WHERE r.request_id IN "
    "(SELECT request_id FROM attempts WHERE key = ?) ORDER BY r.rowid"
)


def _logged_rhos(router: Router, key: str) -> list[float | None]:
    return [rho for (rho,) in router.log.db.execute(_BY_KEY, (key,))]


def test_a_budget_holds_the_mean_cost_of_model_router(stub, tmp_path):
    router = _paced_router(tmp_path / "r.pt")
    backends = load_backends(write_backends(tmp_path / "b.yaml", stub.url, timeout_s=30))
    gateway = Gateway([router], backends, keys=keys(), budget=BUDGET, budget_eta=ETA)
    with ServerThread(create_gateway_app(gateway)) as server:
        stream = _stream(server.url, BOB, 90)
        health = httpx.get(f"{server.url}/health").json()
        fixed = httpx.post(  # a rho of its own: not paced
            f"{server.url}/v1/chat/completions",
            json={"model": "router", "messages": MESSAGES, "rho": 0},
            headers={"authorization": f"Bearer {BOB}"},
        )
    costs = [c for _, c in stream]
    assert costs == pytest.approx([CALL_COST[m] for m, _ in stream])  # usage x price
    assert {m for m, _ in stream} == {"medium", "big"}
    assert _logged_rhos(router, "bob")[:90] == pytest.approx(
        [_pace_by_hand(OWN_RHO, costs[:i]) for i in range(90)]
    )
    assert sum(costs[30:]) / 60 == pytest.approx(BUDGET, rel=0.05)  # after a warm-up
    assert health["pacer"]["rho"] == pytest.approx(_pace_by_hand(OWN_RHO, costs))
    assert fixed.json()["torchroute"]["rho"] == 0.0 and fixed.json()["torchroute"]["model"] == "big"
    router.close()


def test_a_key_budget_paces_its_requests_and_survives_a_restart(stub, tmp_path):
    backends = load_backends(write_backends(tmp_path / "b.yaml", stub.url, timeout_s=30))
    costs: list[float] = []
    for part in range(2):  # the second gateway opens the state the first one left
        router = _paced_router(tmp_path / "r.pt")
        gateway = Gateway([router], backends, keys=_keys_with_carol(), budget_eta=ETA)
        expected_rho = _pace_by_hand(OWN_RHO, costs)
        with ServerThread(create_gateway_app(gateway)) as server:
            usage = httpx.get(
                f"{server.url}/v1/usage", headers={"authorization": f"Bearer {CAROL}"}
            ).json()["keys"][0]
            assert usage["pacer"]["rho"] == pytest.approx(expected_rho, rel=1e-12)
            assert usage["pacer"]["requests"] == len(costs)
            costs += [c for _, c in _stream(server.url, CAROL, 45)]
            _stream(server.url, BOB, 3)  # bob has no budget: the router's own rho
            refused = httpx.post(
                f"{server.url}/v1/chat/completions",
                json={"model": "router-0", "messages": MESSAGES},
                headers={"authorization": f"Bearer {CAROL}"},
            )
        assert refused.status_code == 422
        assert refused.json()["error"]["message"].startswith("rho: key 'carol' has a budget")
        assert _logged_rhos(router, "bob") == [None] * (3 * (part + 1))
        router.close()
    logged = RouterLog.read(log_path(tmp_path / "r.pt"))
    rhos = [rho for (rho,) in logged.db.execute(_BY_KEY, ("carol",))]
    assert rhos == pytest.approx([_pace_by_hand(OWN_RHO, costs[:i]) for i in range(90)])
    assert sum(costs[30:]) / 60 == pytest.approx(BUDGET, rel=0.05)
    ((name, rho, requests),) = logged.db.execute("SELECT name, rho, requests FROM pacers")
    assert (name, requests) == ("key:carol", 90)
    assert rho == pytest.approx(_pace_by_hand(OWN_RHO, costs))
    logged.close()


def test_a_budget_is_refused_for_a_utility_learner(stub, tmp_path):
    backends = load_backends(write_backends(tmp_path / "b.yaml", stub.url, timeout_s=30))
    router = build_router(rho=OWN_RHO)
    with pytest.raises(ValueError, match=r"^--budget: LinUCB learns the utility at rho=100"):
        Gateway([router], backends, budget=BUDGET)
    with pytest.raises(ValueError, match=r"^the budget of key 'carol': LinUCB learns the util"):
        Gateway([router], backends, keys=_keys_with_carol())
    router.close()


@pytest.mark.parametrize(
    ("budget", "error"),
    [(0.002, None), (0, "budget: expected a mean cost per request > 0, got 0"), (True, "budget")],
)
def test_a_keys_file_budget(tmp_path, budget, error):
    import yaml

    from torchroute.gateway.keys import KeysError, load_keys

    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": {"carol": {"sha256": "a" * 64, "budget": budget}}}))
    if error is None:
        (key,) = load_keys(path)
        assert (key.name, key.budget, key.cap) == ("carol", 0.002, None)
    else:
        with pytest.raises(KeysError, match=f"keys.carol.{error}"):
            load_keys(path)
