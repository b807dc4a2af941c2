"""Hostile and careless HTTP use: the token, the Host header, limits, strict types, names."""

from __future__ import annotations

import hashlib

import pytest
import torch
from fastapi.testclient import TestClient

from torchroute.learners import LinUCB
from torchroute.serve import Router
from torchroute.serve.app import create_app
from torchroute.serve.limits import Limits

ARMS = ["small", "large"]
D = 3
TOKEN = "s3cret-token-for-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _encode(texts: list[str]) -> torch.Tensor:
    """A deterministic text -> [B, 3] embedding (the texts' sha256 bytes), like an encoder."""
    rows = [list(hashlib.sha256(t.encode()).digest()[:D]) for t in texts]
    return torch.tensor(rows, dtype=torch.float64) / 255 + 0.1


def _router(**kwargs) -> Router:
    return Router.fresh(
        lambda p: LinUCB.from_problem(p).double(),
        ARMS,
        rho=1.0,
        dim=D,
        dtype=torch.float64,
        encode=_encode,
        **kwargs,
    )


@pytest.fixture
def guarded():
    router = _router()
    limits = Limits(max_body_bytes=2000, max_batch=4, max_prompt_chars=50)
    app = create_app(router, token=TOKEN, limits=limits)
    with TestClient(app, base_url="http://localhost") as http:
        yield router, http


def _detail(response) -> str:
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail
    return detail


def _state(router: Router) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in router.learner.state_dict().items()}


def test_every_post_needs_the_bearer_token(guarded):
    router, http = guarded
    for headers in (
        {},
        {"Authorization": "Bearer wrong-token-wrong-token"},
        {"Authorization": TOKEN},
    ):
        for path, body in (
            ("/models", {"name": "sable-7b", "price": 0.0}),
            ("/route", {"embeddings": [[1.0, 0.0, 0.0]]}),
            ("/feedback", {"request_ids": ["x"], "scores": [1.0], "costs": [0.0]}),
        ):
            response = http.post(path, json=body, headers=headers)
            assert response.status_code == 401, (path, headers)
            assert "Bearer" in _detail(response)
    assert router.arm_names == tuple(ARMS) and router.status()["pending"] == 0
    assert http.get("/health").status_code == 200  # reading needs no token
    response = http.post("/models", json={"name": "sable-7b", "price": 0.0}, headers=AUTH)
    assert response.status_code == 200 and response.json()["models"] == [*ARMS, "sable-7b"]


def test_a_foreign_host_header_is_refused(guarded):
    router, http = guarded
    for path in ("/health", "/models"):
        response = http.request(
            "GET" if path == "/health" else "POST",
            path,
            json={"name": "evil", "price": 0.0},
            headers={**AUTH, "Host": "attacker.example"},
        )
        assert response.status_code == 400 and "attacker.example" in _detail(response)
    assert router.arm_names == tuple(ARMS)
    assert http.get("/health", headers={"Host": "127.0.0.1:8000"}).status_code == 200


@pytest.mark.parametrize(
    ("name", "status", "match"),
    [
        ("sable-7b ", 422, "leading or trailing spaces"),
        (" sable-7b", 422, "leading or trailing spaces"),
        ("x" * 100_000, 413, "request body over 2000 bytes"),  # the body limit comes first
        ("x" * 129, 422, "1 to 128 characters"),
        ("sable 7b", 422, "may only hold"),
        ("<script>", 422, "may only hold"),
        ("SMALL", 409, "already served (as 'small')"),
        ("Large", 409, "already served"),
    ],
)
def test_model_names_are_validated(guarded, name, status, match):
    router, http = guarded
    response = http.post("/models", json={"name": name, "price": 0.0}, headers=AUTH)
    assert response.status_code == status and match in _detail(response)
    assert router.arm_names == tuple(ARMS)


def test_bodies_batches_and_prompts_over_the_limits(guarded):
    router, http = guarded
    big = b'{"embeddings": [' + b"[1.0, 0.0, 0.0], " * 200 + b"[1.0, 0.0, 0.0]]}"
    response = http.post(
        "/route", content=big, headers={**AUTH, "content-type": "application/json"}
    )
    assert response.status_code == 413 and "--max-body-bytes" in _detail(response)

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(100):
            yield b" " * 100

    response = http.post(
        "/route", content=chunks(), headers={**AUTH, "content-type": "application/json"}
    )
    assert response.status_code == 413
    response = http.post("/route", json={"texts": ["a"] * 5}, headers=AUTH)
    assert response.status_code == 413 and "--max-batch" in _detail(response)
    response = http.post("/route", json={"texts": ["a" * 51]}, headers=AUTH)
    assert response.status_code == 422 and "texts.0 has 51 characters" in _detail(response)
    ids = {"request_ids": ["a"] * 5, "scores": [0.5] * 5, "costs": [0.0] * 5}
    response = http.post("/feedback", json=ids, headers=AUTH)
    assert response.status_code == 413 and "request_ids has 5 entries" in _detail(response)
    assert router.status()["pending"] == 0


def test_strict_types_a_string_is_not_a_number_and_true_is_not_a_score(guarded):
    router, http = guarded
    response = http.post("/route", json={"embeddings": [[1, 0, 0]]}, headers=AUTH)
    assert response.status_code == 200  # integers are numbers
    (decision,) = response.json()["decisions"]
    rid = decision["request_id"]
    before = _state(router)
    for body, where in [
        ({"request_ids": [rid], "scores": ["0.5"], "costs": [0.0]}, "scores.0"),
        ({"request_ids": [rid], "scores": [" 0.5 "], "costs": [0.0]}, "scores.0"),
        ({"request_ids": [rid], "scores": [True], "costs": [0.0]}, "scores.0"),
        ({"request_ids": [rid], "scores": [0.5], "costs": [False]}, "costs.0"),
        ({"request_ids": [1], "scores": [0.5], "costs": [0.0]}, "request_ids.0"),
    ]:
        response = http.post("/feedback", json=body, headers=AUTH)
        assert response.status_code == 422 and _detail(response).startswith(where), body
    response = http.post("/route", json={"embeddings": [[1, 0, 0]], "rho": "500"}, headers=AUTH)
    assert response.status_code == 422 and _detail(response).startswith("rho")
    response = http.post("/route", json={"embeddings": [["1", 0, 0]]}, headers=AUTH)
    assert response.status_code == 422
    response = http.post("/models", json={"name": "xl", "price": "0"}, headers=AUTH)
    assert response.status_code == 422 and _detail(response).startswith("price")
    for key, value in router.learner.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert router.status()["pending"] == 1
    body = {"request_ids": [rid], "scores": [0.5], "costs": [0.0]}
    assert http.post("/feedback", json=body, headers=AUTH).json()["applied"] == [rid]


def test_a_lone_surrogate_in_a_prompt_is_a_one_line_422_and_the_server_goes_on(guarded):
    router, http = guarded
    raw = b'{"texts": ["caf\\u00e9 \\ud800 ok"]}'  # JSON escapes: a lone high surrogate
    response = http.post(
        "/route", content=raw, headers={**AUTH, "content-type": "application/json"}
    )
    assert response.status_code == 422 and "lone surrogate" in _detail(response)
    assert router.status()["pending"] == 0
    response = http.post("/route", json={"texts": ["café ok"]}, headers=AUTH)
    assert response.status_code == 200


def test_a_log_that_cannot_be_written_is_a_503_and_changes_nothing(tmp_path):
    router = _router(state_path=tmp_path / "router.pt")
    with TestClient(create_app(router), base_url="http://localhost") as http:
        (decision,) = http.post("/route", json={"embeddings": [[1, 0, 0]]}).json()["decisions"]
        before = _state(router)
        router.log.db.execute("PRAGMA query_only = ON")  # as a read-only folder would
        response = http.post("/route", json={"embeddings": [[0, 1, 0]]})
        assert response.status_code == 503 and "cannot be written" in _detail(response)
        body = {"request_ids": [decision["request_id"]], "scores": [0.5], "costs": [0.0]}
        response = http.post("/feedback", json=body)
        assert response.status_code == 503
        response = http.post("/models", json={"name": "xl", "price": 0.1})
        assert response.status_code == 503
        assert router.status()["pending"] == 1 and router.status()["feedback"] == 0
        assert router.arm_names == tuple(ARMS)
        for key, value in router.learner.state_dict().items():
            assert torch.equal(value, before[key]), key
        router.log.db.execute("PRAGMA query_only = OFF")
        assert http.post("/feedback", json=body).json()["applied"] == [decision["request_id"]]
