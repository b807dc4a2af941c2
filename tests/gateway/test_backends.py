"""The backends file, the keys file and the gateway's flags: one-line errors before start-up;
backend API keys read from the environment, sent upstream, never written to the log."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest
import yaml

from tests.gateway.helpers import BOB, build_router, keys, start_gateway, write_backends
from tests.gateway.stub_backend import ServerThread, stub_app
from torchroute.cli import main
from torchroute.gateway.backends import BackendsError, load_backends
from torchroute.gateway.keys import KeysError, load_keys

GOOD = {
    "base_url": "http://127.0.0.1:8001/v1",
    "model": "m",
    "input_per_mtok": 1.0,
    "output_per_mtok": 2.0,
}


def _write(tmp_path, models) -> str:
    path = tmp_path / "backends.yaml"
    path.write_text(yaml.safe_dump({"models": models}))
    return str(path)


def test_a_backend_entry_is_read_with_its_prices(tmp_path):
    (backend,) = load_backends(_write(tmp_path, {"big": {**GOOD, "timeout_s": 5}})).values()
    assert (backend.name, backend.model, backend.timeout_s) == ("big", "m", 5.0)
    assert backend.cost(1_000_000, 500_000) == pytest.approx(1.0 + 1.0)  # by hand
    assert backend.prior_price == pytest.approx((500 * 1.0 + 500 * 2.0) / 1e6)


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({**GOOD, "base_url": "file:///etc/passwd"}, "not an http(s) URL"),
        ({**GOOD, "base_url": "ftp://host/v1"}, "not an http(s) URL"),
        ({**GOOD, "base_url": "http://user:pw@host/v1"}, "no credentials"),
        ({k: v for k, v in GOOD.items() if k != "model"}, "missing 'model'"),
        ({**GOOD, "api_key": "sk-123"}, "unknown key 'api_key'"),
        ({**GOOD, "input_per_mtok": -1}, "input_per_mtok: expected a number >= 0"),
        ({**GOOD, "output_per_mtok": "2"}, "output_per_mtok: expected a finite number"),
        ({**GOOD, "timeout_s": 0}, "timeout_s: expected a number > 0"),
        ({**GOOD, "api_key_env": "UNSET_GATEWAY_TEST_KEY"}, "is not set"),
        ({**GOOD, "api_key_env": "not a name"}, "name of an environment variable"),
        ("http://x", "expected a mapping"),
    ],
)
def test_bad_backend_entries_are_one_line_errors(tmp_path, entry, words):
    with pytest.raises(BackendsError, match=r"models\.big") as caught:
        load_backends(_write(tmp_path, {"big": entry}), env={})
    assert words in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://127.0.0.1:8001/v1\r\nX-Injected: 1", "control character"),
        ("http://127.0.0.1:8001/v1\n", "control character"),
        ("http://127.0.0.1:8001/v 1", "a space"),
        ("http://127.0.0.1:8001/v1#frag", "a #fragment"),
        ("http://127.0.0.1:8001/v1?api-version=1", "a ?query"),
        ("http://127.0.0.1:99999/v1", "bad port"),
        ("http://user@127.0.0.1/v1", "no credentials"),
        ("http://169.254.169.254/latest", "link-local"),
        ("http://169.254.1.2:8000/v1", "link-local"),
        ("http://[fe80::1]:8000/v1", "link-local"),
        ("http://[fe80::1%25eth0]/v1", "link-local"),
        ("http://[::ffff:169.254.169.254]/v1", "link-local"),
        ("http://2852039166/v1", "link-local"),  # 169.254.169.254 as one number
        ("http://0xa9fea9fe/v1", "link-local"),
        ("http://metadata.google.internal/v1", "cloud metadata"),
        ("http://[fd00:ec2::254]/v1", "cloud metadata"),
        ("http://100.100.100.200/v1", "cloud metadata"),
    ],
)
def test_base_urls_that_would_be_mangled_or_reach_metadata_are_refused(tmp_path, url, words):
    path = _write(tmp_path, {"big": {**GOOD, "base_url": url}})
    with pytest.raises(BackendsError) as caught:
        load_backends(path, env={})
    message = str(caught.value)
    assert message.startswith(f"{path}: models.big.base_url: ")
    assert words in message and "\n" not in message and "\r" not in message


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com/v1",
        "http://localhost:8001/v1/",
        "http://[::1]:8001/v1",
        "http://10.0.0.5:8000/v1",
        "http://169.255.0.1/v1",
    ],
)
def test_base_urls_of_real_servers_are_accepted(tmp_path, url):
    (backend,) = load_backends(_write(tmp_path, {"big": {**GOOD, "base_url": url}})).values()
    assert backend.base_url == url.rstrip("/")


def test_bad_backends_files(tmp_path):
    with pytest.raises(BackendsError, match="no such file"):
        load_backends(tmp_path / "missing.yaml")
    path = tmp_path / "b.yaml"
    path.write_text("models: [")
    with pytest.raises(BackendsError, match="not valid YAML"):
        load_backends(path)
    path.write_text(yaml.safe_dump({"backends": {}}))
    with pytest.raises(BackendsError, match="'models'"):
        load_backends(path)
    with pytest.raises(BackendsError, match="repeats"):
        load_backends(_write(tmp_path, {"big": GOOD, "BIG": GOOD}))
    with pytest.raises(BackendsError, match="model name"):
        load_backends(_write(tmp_path, {"bad name": GOOD}))


def test_keys_file(tmp_path):
    path = tmp_path / "keys.yaml"
    digest = hashlib.sha256(b"secret-one").hexdigest()
    path.write_text(yaml.safe_dump({"keys": {"alice": {"sha256": digest, "cap": 2.5}}}))
    (key,) = load_keys(path)
    assert (key.name, key.cap, key.digest.hex()) == ("alice", 2.5, digest)
    for entry, words in [
        ({"sha256": "abc"}, "64 lowercase hex"),
        ({"sha256": digest, "cap": -1}, "cap: expected a number >= 0"),
        ({"sha256": digest, "secret": "x"}, "unknown field 'secret'"),
        ("sha256", "expected {sha256"),
    ]:
        path.write_text(yaml.safe_dump({"keys": {"alice": entry}}))
        with pytest.raises(KeysError, match=words):
            load_keys(path)


def test_an_unknown_field_of_the_keys_file_is_named_with_what_is_allowed(tmp_path):
    path = tmp_path / "keys.yaml"
    digest = hashlib.sha256(b"secret-one").hexdigest()
    entry = {"sha256": digest, "capp": 2.5, "admin": False}  # a typo: the cap is not set
    path.write_text(yaml.safe_dump({"keys": {"alice": entry}}))
    with pytest.raises(KeysError) as caught:
        load_keys(path)
    assert str(caught.value) == (
        f"{path}: keys.alice: unknown field 'capp'; a key entry takes only sha256, cap, "
        "budget, admin"
    )
    path.write_text(yaml.safe_dump({"keys": {"alice": {"sha256": digest}}, "key": {}}))
    with pytest.raises(KeysError) as caught:
        load_keys(path)
    assert str(caught.value) == f"{path}: unknown top-level field 'key'; the file holds only 'keys'"


def test_backend_api_key_comes_from_the_environment_and_is_never_logged(tmp_path, monkeypatch):
    secret = "sk-upstream-secret-0123456789"
    monkeypatch.setenv("GATEWAY_TEST_BIG_KEY", secret)
    state = tmp_path / "router.pt"
    router = build_router(state)
    with ServerThread(stub_app()) as stub:
        backends = write_backends(
            tmp_path / "b.yaml", stub.url, big={"api_key_env": "GATEWAY_TEST_BIG_KEY"}
        )
        for arm in ("small", "medium"):  # every request ends at big, routed or fallen back
            httpx.post(f"{stub.url}/_control", json={"model": f"{arm}-up", "mode": "500"})
        with start_gateway(router, backends, keys=keys()) as gateway:
            for _ in range(3):
                httpx.post(
                    f"{gateway.url}/v1/chat/completions",
                    json={"model": "router", "messages": [{"role": "user", "content": "hi"}]},
                    headers={"authorization": f"Bearer {BOB}"},
                )
            seen = httpx.get(f"{stub.url}/_control").json()["authorization"]
    router.close()
    assert seen["big-up"] == f"Bearer {secret}"
    assert seen.get("small-up") is None  # no key configured: none sent
    for path in tmp_path.iterdir():
        assert secret.encode() not in path.read_bytes(), path


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--token", "short"], "at least 16"),
        (["--insecure-no-auth", "--host", "0.0.0.0"], "only on loopback"),
        (["--cap", "1"], "--cap goes with --token"),
        (["--max-fallbacks", "-1"], "--max-fallbacks must be"),
        (["--inline-route-ms", "-1"], "--inline-route-ms must be"),
    ],
)
def test_gateway_flags_are_checked_before_start_up(tmp_path, capsys, flags, words):
    backends = _write(tmp_path, {"big": GOOD})
    status = main(["gateway", str(tmp_path / "run"), "--backends", backends, *flags])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert words in err and len(err.splitlines()) == 1


def test_a_non_http_backend_is_refused_at_start_up(tmp_path, capsys):
    backends = _write(tmp_path, {"big": {**GOOD, "base_url": "file:///etc/passwd"}})
    assert main(["gateway", str(tmp_path), "--backends", backends]) == 2
    assert "not an http(s) URL" in capsys.readouterr().err


def test_the_stub_backend_is_not_part_of_the_package():
    import importlib.util

    import torchroute.gateway

    assert importlib.util.find_spec("torchroute.gateway.stub") is None
    package = Path(torchroute.gateway.__file__).parent
    assert not any("stub" in p.name for p in package.iterdir())
