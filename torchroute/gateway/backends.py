"""The backends file: one OpenAI-compatible endpoint per served model, with its prices.

```yaml
models:
  big: {base_url: "http://127.0.0.1:8001/v1", model: big-upstream, input_per_mtok: 5.0,
        output_per_mtok: 15.0, timeout_s: 30, api_key_env: BIG_API_KEY}
```

Each entry is keyed by the router's model (arm) name. ``api_key_env`` is the *name* of an
environment variable holding the backend's API key: the key itself is read from the
environment at start-up, never from a file, and never logged. ``price`` (optional) is the
mean cost per query a model added to the router starts with; by default the cost of 500
input and 500 output tokens.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from torchroute.errors import BackendsError as BackendsError
from torchroute.serve.security import check_model_name

_FIELDS = {
    "base_url",
    "model",
    "input_per_mtok",
    "output_per_mtok",
    "timeout_s",
    "api_key_env",
    "price",
}
_REQUIRED = ("base_url", "model", "input_per_mtok", "output_per_mtok")


@dataclass(frozen=True)
class Backend:
    """One model's endpoint: ``base_url`` (``http(s)://.../v1``), the upstream ``model``
    name, prices in cost units per million input / output tokens, the time one call may
    take (``timeout_s``, streaming included) and the API key (``None``: none sent)."""

    name: str
    base_url: str
    model: str
    input_per_mtok: float
    output_per_mtok: float
    timeout_s: float = 60.0
    api_key: str | None = None
    price: float | None = None

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """The cost of a call: ``input_tokens x input_per_mtok / 1e6 + output_tokens x
        output_per_mtok / 1e6``."""
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6

    @property
    def prior_price(self) -> float:
        """The mean cost per query a router starts this model with (``price`` or the cost
        of 500 input and 500 output tokens)."""
        return self.price if self.price is not None else self.cost(500, 500)


def _number(where: str, key: str, value: Any, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BackendsError(f"{where}.{key}: expected a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise BackendsError(f"{where}.{key}: expected a number {'> 0' if positive else '>= 0'}")
    return float(value)


#: cloud metadata services at addresses that are not link-local, and their names
METADATA_HOSTS = frozenset(
    {"100.100.100.200", "fd00:ec2::254", "metadata.google.internal", "metadata.goog"}
)


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``host`` as the address a connection would reach, or ``None`` for a name (the
    shorthand IPv4 forms a resolver accepts, ``2852039166``, ``0xa9fea9fe``, included)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if re.fullmatch(r"[0-9a-fA-FxX.]+", host) and re.match(r"[0-9]", host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _refused_host(host: str) -> str | None:
    """Why ``host`` may not be a backend (a link-local or cloud metadata address), or
    ``None``."""
    if host.lower().rstrip(".") in METADATA_HOSTS:
        return "a cloud metadata service"
    address = _address(host)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address is not None and str(address) in METADATA_HOSTS:
        return "a cloud metadata service"
    if address is not None and address.is_link_local:
        return "link-local (169.254.0.0/16, fe80::/10: cloud metadata services live there)"
    return None


def _url(where: str, value: Any) -> str:
    """A backend's ``base_url``: ``http(s)://host[:port][/path]``, printable ASCII, no
    credentials, query or fragment (``/chat/completions`` is appended to it), not a
    link-local or cloud metadata address."""
    where = f"{where}.base_url"
    expected = "expected http(s)://host[:port]/path, e.g. http://127.0.0.1:8001/v1"
    if not isinstance(value, str):
        raise BackendsError(f"{where}: {expected}, got {value!r}")
    if any(not (0x20 < ord(c) < 0x7F) for c in value):
        raise BackendsError(
            f"{where}: {value[:80]!r} holds a space, a control character (CR, LF, ...) or a "
            f"non-ASCII character; {expected} (percent-encoded)"
        )
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BackendsError(f"{where}: {value!r} is not an http(s) URL; {expected}")
    if parts.username is not None or parts.password is not None:
        raise BackendsError(f"{where}: no credentials in the URL; use api_key_env")
    if "#" in value or "?" in value:
        part = "a #fragment" if "#" in value else "a ?query"
        raise BackendsError(
            f"{where}: {value!r} has {part} (calls go to <base_url>/chat/completions); {expected}"
        )
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number in 0-65535
    except ValueError:
        raise BackendsError(f"{where}: {value!r} has a bad port; {expected}") from None
    refused = _refused_host(parts.hostname)
    if refused is not None:
        raise BackendsError(f"{where}: {parts.hostname!r} is {refused}; refused as a backend")
    return value.rstrip("/")


def parse_backend(name: Any, entry: Any, where: str, env: dict[str, str]) -> Backend:
    """One entry of the ``models`` mapping, checked."""
    try:
        check_model_name(name, ())
    except ValueError as exc:
        raise BackendsError(f"{where}: {exc}") from None
    where = f"{where}.{name}"
    if not isinstance(entry, dict):
        raise BackendsError(f"{where}: expected a mapping of {sorted(_REQUIRED)}")
    unknown = sorted(set(map(str, entry)) - _FIELDS)
    if unknown:
        raise BackendsError(f"{where}: unknown key {unknown[0]!r}; expected {sorted(_FIELDS)}")
    missing = [key for key in _REQUIRED if key not in entry]
    if missing:
        raise BackendsError(f"{where}: missing {missing[0]!r}")
    if not isinstance(entry["model"], str) or not entry["model"].strip():
        raise BackendsError(f"{where}.model: expected the upstream model name (a string)")
    key, key_env = None, entry.get("api_key_env")
    if key_env is not None:
        if not isinstance(key_env, str) or not key_env.isidentifier():
            raise BackendsError(
                f"{where}.api_key_env: expected the name of an environment variable, "
                f"got {key_env!r}"
            )
        key = env.get(key_env)
        if not key:
            raise BackendsError(f"{where}.api_key_env: environment variable {key_env} is not set")
    price = entry.get("price")
    return Backend(
        name=name,
        base_url=_url(where, entry["base_url"]),
        model=entry["model"],
        input_per_mtok=_number(where, "input_per_mtok", entry["input_per_mtok"]),
        output_per_mtok=_number(where, "output_per_mtok", entry["output_per_mtok"]),
        timeout_s=_number(where, "timeout_s", entry.get("timeout_s", 60.0), positive=True),
        api_key=key,
        price=None if price is None else _number(where, "price", price),
    )


def load_backends(path: str | Path, env: dict[str, str] | None = None) -> dict[str, Backend]:
    """The backends of a YAML file, ``{model name: Backend}``.

    Raises:
        BackendsError: a missing or unreadable file, a missing or unknown key, a price that
            is not a number ``>= 0``, a ``base_url`` that is not ``http(s)``, an unset key
            variable.
    """
    path = Path(path)
    env = dict(os.environ) if env is None else env
    if not path.is_file():
        raise BackendsError(f"--backends {path}: no such file")
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BackendsError(f"{path}: not valid YAML ({first})") from None
    if not isinstance(data, dict) or set(data) != {"models"}:
        raise BackendsError(f"{path}: expected one top-level key 'models'")
    models = data["models"]
    if not isinstance(models, dict) or not models:
        raise BackendsError(f"{path}: 'models' must map model names to their backends")
    backends: dict[str, Backend] = {}
    for name, entry in models.items():
        backend = parse_backend(name, entry, f"{path}: models", env)
        for other in backends:
            if other.casefold() == backend.name.casefold():
                raise BackendsError(f"{path}: models.{name} repeats {other!r}")
        backends[backend.name] = backend
    return backends
