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
    backends = load_backends(write_backends(tmp_path / "b.yaml", stub.url))
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
    backends = load_backends(write_backends(tmp_path / "b.yaml", stub.url))
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
