"""The HTTP API: one-line errors (TestClient) and concurrent clients on a real uvicorn server."""

from __future__ import annotations

import threading
import time

import httpx
import numpy as np
import pytest
import torch
import uvicorn
from fastapi.testclient import TestClient

from torchroute.learners import LinUCB
from torchroute.serve import Router
from torchroute.serve.app import create_app
from torchroute.serve.startup import bind

ARMS = ["small", "large"]
D, LAM, RHO = 3, 1.0, 10.0


class SlowLinUCB(LinUCB):
    """LinUCB whose update takes ``delay`` seconds longer, like a heavier learner."""

    delay = 0.0

    def update(self, context, decision, feedback, generator=None):
        time.sleep(self.delay)
        return super().update(context, decision, feedback, generator)


def _router(learner: type[LinUCB] = LinUCB, **kwargs) -> Router:
    return Router.fresh(
        lambda p: learner.from_problem(p, lam=LAM).double(),
        ARMS,
        rho=RHO,
        dim=D,
        prices=[0.001, 0.01],
        dtype=torch.float64,
        **kwargs,
    )


@pytest.fixture
def client():
    router = _router()
    with TestClient(create_app(router), base_url="http://localhost") as test_client:
        yield router, test_client


def _detail(response) -> str:
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail
    return detail


def test_route_feedback_models_and_health(client):
    _, http = client
    response = http.post("/route", json={"embeddings": [[1, 0, 0], [0, 1, 0]]})
    assert response.status_code == 200
    decisions = response.json()["decisions"]
    # a fresh LinUCB ties every arm: the random tie-break gives each 1/2
    assert all(d["model"] in ARMS and d["propensity"] == 0.5 for d in decisions)
    ids = [d["request_id"] for d in decisions]
    response = http.post("/feedback", json={"request_ids": ids, "scores": [1, 0], "costs": [0, 0]})
    assert response.json() == {"applied": ids, "unknown": [], "duplicate": []}
    assert http.post("/models", json={"name": "xl", "price": 0.1}).json() == {
        "models": [*ARMS, "xl"]
    }
    health = http.get("/health").json()
    assert health["status"] == "ok" and health["feedback"] == 2 and health["pending"] == 0
    assert health["models"] == [*ARMS, "xl"] and health["rho"] == RHO


def test_errors_are_one_line_4xx_and_leave_the_state_alone(client):
    router, http = client
    (decision,) = http.post("/route", json={"embeddings": [[1, 2, 3]]}).json()["decisions"]
    rid = decision["request_id"]
    before = {k: v.clone() for k, v in router.learner.state_dict().items()}
    cases = [
        ("/route", b"{not json", 400, "malformed JSON"),
        ("/route", {"embeddings": [[1, 2]]}, 422, "embeddings must be [B >= 1, e=3]"),
        ("/route", {"texts": ["hi"]}, 422, "no encoder"),
        ("/route", {"embedding": [[1, 2, 3]]}, 422, "embedding: Extra inputs"),
        ("/feedback", {"request_ids": [rid], "scores": [1.5], "costs": [0]}, 422, "[0, 1]"),
        ("/feedback", {"request_ids": [rid], "scores": [0.5]}, 422, "costs: Field required"),
        ("/feedback", {"request_ids": [rid], "scores": ["x"], "costs": [0]}, 422, "scores.0"),
        (
            "/feedback",
            {"request_ids": [rid], "scores": [0.5], "costs": [0], "models": ["gpt"]},
            422,
            "unknown model 'gpt'",
        ),
        ("/feedback", {"request_ids": ["nope"], "scores": [0.5], "costs": [0]}, 404, "nope"),
        ("/models", {"name": "small", "price": 0.1}, 409, "already served"),
        ("/models", {"name": "xl", "price": -1}, 422, "price"),
    ]
    for path, body, status, message in cases:
        if isinstance(body, bytes):
            response = http.post(path, content=body, headers={"content-type": "application/json"})
        else:
            response = http.post(path, json=body)
        assert response.status_code == status, (path, body, response.text)
        assert message in _detail(response), (path, body)
    for key, value in router.learner.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert router.status()["pending"] == 1 and router.arm_names == tuple(ARMS)
    response = http.post("/feedback", json={"request_ids": [rid], "scores": [0.5], "costs": [0]})
    assert response.json()["applied"] == [rid]
    response = http.post("/feedback", json={"request_ids": [rid], "scores": [0.5], "costs": [0]})
    assert response.status_code == 404 and "already answered" in _detail(response)


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None]
)
@pytest.mark.parametrize("path", ["/route", "/feedback", "/models"])
def test_a_post_a_page_of_another_site_can_send_is_a_415(client, path, content_type):
    router, http = client
    body = b'{"embeddings": [[1, 2, 3]]}'
    headers = {} if content_type is None else {"content-type": content_type}
    response = http.post(path, content=body, headers=headers)
    assert response.status_code == 415, response.text
    assert "Content-Type" in _detail(response) and "application/json" in _detail(response)
    assert router.status()["pending"] == 0 and router.arm_names == tuple(ARMS)


def test_a_post_from_a_page_whose_origin_is_not_allowed_is_a_403(client):
    router, http = client
    body = {"embeddings": [[1, 2, 3]]}
    response = http.post("/route", json=body, headers={"origin": "https://evil.example"})
    assert response.status_code == 403 and "Origin" in _detail(response)
    assert router.status()["pending"] == 0
    response = http.post("/route", json=body, headers={"origin": "http://localhost:8080"})
    assert response.status_code == 200


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity"])
def test_a_score_that_is_not_a_finite_number_is_said_so(client, literal):
    router, http = client
    (decision,) = http.post("/route", json={"embeddings": [[1, 2, 3]]}).json()["decisions"]
    body = b'{"request_ids": ["%s"], "scores": [%s], "costs": [0]}' % (
        decision["request_id"].encode(),
        literal,
    )
    response = http.post("/feedback", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert _detail(response).startswith("scores must be finite numbers in [0, 1]")
    assert router.status()["pending"] == 1


def test_json_nested_too_deeply_is_said_so(client):
    router, http = client
    body = b'{"embeddings": [[1, 2, 3]], "x": ' + b"[" * 3000 + b"]" * 3000 + b"}"
    response = http.post("/route", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert _detail(response) == "body: JSON nested too deeply to be read"
    assert router.status()["pending"] == 0
    assert http.get("/nowhere").status_code == 404  # other errors as before


@pytest.fixture
def server(tmp_path):
    """A real uvicorn server on a free localhost port, in a thread."""
    router = _router(SlowLinUCB, state_path=tmp_path / "router.pt")
    sock = bind("127.0.0.1", 0)  # as `torchroute serve` binds
    config = uvicorn.Config(create_app(router), log_level="warning")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.01)
    yield router, f"http://127.0.0.1:{sock.getsockname()[1]}"
    uv.should_exit = True
    thread.join(10)
    sock.close()


def test_concurrent_clients_lose_no_feedback(server, tmp_path):
    router, url = server
    threads, rounds, batch = 6, 8, 2
    seen: list[tuple[list[float], str, float, float]] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client(worker: int) -> None:
        rng = np.random.default_rng(worker)
        with httpx.Client(base_url=url, timeout=10) as http:
            first = None
            for _ in range(rounds):
                x = rng.normal(size=(batch, D)).tolist()
                decisions = http.post("/route", json={"embeddings": x}).json()["decisions"]
                ids = [d["request_id"] for d in decisions]
                scores, costs = (
                    rng.uniform(size=batch).tolist(),
                    (rng.uniform(size=batch) * 0.05).tolist(),
                )
                body = {"request_ids": ids[::-1], "scores": scores[::-1], "costs": costs[::-1]}
                response = http.post("/feedback", json=body)
                if response.json().get("applied") != ids[::-1]:
                    errors.append(response.text)
                first = first or body
                with lock:
                    seen.extend(zip(x, [d["model"] for d in decisions], scores, costs))
            if http.post("/feedback", json=first).status_code != 404:  # a retried call
                errors.append("a repeated feedback call was applied")

    workers = [threading.Thread(target=client, args=(w,)) for w in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    total = threads * rounds * batch
    assert len(seen) == total
    assert int(router.learner.rounds[0]) == total == router.status()["feedback"]
    # the learner's statistics equal the closed form over every feedback exactly once
    a = np.stack([LAM * np.eye(D) for _ in ARMS])
    b = np.zeros((len(ARMS), D))
    for x, model, score, cost in seen:
        k = ARMS.index(model)
        a[k] += np.outer(x, x)
        b[k] += np.clip(score - RHO * cost, 0, 1) * np.asarray(x)
    np.testing.assert_allclose(np.linalg.inv(router.learner.a_inv[0].numpy()), a, atol=1e-8)
    theta = np.linalg.solve(a, b[..., None])[..., 0]
    np.testing.assert_allclose(router.learner.theta[0].numpy(), theta, atol=1e-8)
    # the same feedback sent by 8 clients at once (parallel retries) is applied once
    with httpx.Client(base_url=url) as http:
        decisions = http.post("/route", json={"embeddings": [[1, 0, 0]]}).json()["decisions"]
    body = {"request_ids": [decisions[0]["request_id"]], "scores": [0.5], "costs": [0.0]}
    barrier, codes = threading.Barrier(8), []
    router.learner.delay = 0.05  # a slow update: concurrent retries overlap inside it

    def retry() -> None:
        with httpx.Client(base_url=url, timeout=10) as http:
            barrier.wait()
            codes.append(http.post("/feedback", json=body).status_code)

    retries = [threading.Thread(target=retry) for _ in range(8)]
    for t in retries:
        t.start()
    for t in retries:
        t.join()
    assert sorted(codes) == [200] + [404] * 7
    assert int(router.learner.rounds[0]) == total + 1
    restarted = _router(SlowLinUCB, state_path=tmp_path / "router.pt")  # the final state
    assert torch.equal(restarted.learner.a_inv, router.learner.a_inv)


@pytest.mark.slow  # loading MiniLM takes 5-10 s on two cores
def test_texts_are_embedded_with_the_packaged_minilm():
    from torchroute.models import minilm_encoder

    encoder = minilm_encoder()
    router = Router.fresh(
        LinUCB.from_problem, ARMS, rho=0.0, dim=encoder.dim, encode=encoder.encode
    )
    with TestClient(create_app(router), base_url="http://localhost") as http:
        texts = ["What is 2 + 2?", "Translate 'bonjour' into English."]
        response = http.post("/route", json={"texts": texts})
    assert response.status_code == 200 and len(response.json()["decisions"]) == 2
    decisions = response.json()["decisions"]
    router.feedback([d["request_id"] for d in decisions], [1.0, 0.0], [0.0, 0.0])
    # LinUCB's update saw the encoder's embeddings: A_k = I + sum of e e^T routed to k
    emb = encoder.encode(texts, progress=False).double()  # [2, 384]
    for k, name in enumerate(ARMS):
        mine = [i for i, d in enumerate(decisions) if d["model"] == name]
        a = torch.eye(encoder.dim, dtype=torch.float64) + emb[mine].T @ emb[mine]
        got = router.learner.a_inv[0, k].double()
        torch.testing.assert_close(got, torch.linalg.inv(a), atol=1e-5, rtol=1e-4)
