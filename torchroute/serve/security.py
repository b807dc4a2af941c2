"""Who may change the router: the bearer token, the Host header, loopback, model names."""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Sequence

from torchroute.errors import InputError

#: characters of a model name: letters, digits and ``. _ - : / @ +``, starting alphanumeric
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+\-]*")
MAX_MODEL_NAME = 128
MIN_TOKEN = 16
TOKEN = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no spaces
TOKEN_ENV = "TORCHROUTE_SERVE_TOKEN"


def check_model_name(name: object, served: Sequence[str]) -> str:
    """``name`` when it may be served next to ``served``; a one-line ``ValueError`` else.

    A name is 1 to 128 characters from :data:`MODEL_NAME`, without surrounding spaces, and
    differs from every served name case-insensitively (``DuplicateModelError``).
    """
    from torchroute.serve.checks import DuplicateModelError

    if not isinstance(name, str):
        raise InputError(f"model name must be a string, got {type(name).__name__}")
    if name != name.strip():
        raise InputError(f"model name {name!r} has leading or trailing spaces")
    if not 1 <= len(name) <= MAX_MODEL_NAME:
        raise InputError(f"model name must have 1 to {MAX_MODEL_NAME} characters, got {len(name)}")
    if not MODEL_NAME.fullmatch(name):
        raise InputError(
            f"model name {name!r} may only hold letters, digits and . _ - : / @ + "
            "(starting with a letter or digit)"
        )
    for other in served:
        if other.casefold() == name.casefold():
            raise DuplicateModelError(f"model {name!r} is already served (as {other!r})")
    return name


def check_token(token: str | None, where: str = "--token") -> str | None:
    """``None`` or a token of at least 16 printable ASCII characters without spaces."""
    if token is None:
        return None
    if len(token) < MIN_TOKEN or not TOKEN.fullmatch(token):
        raise InputError(
            f"{where} must be at least {MIN_TOKEN} printable ASCII characters without spaces "
            f"(got {len(token)} characters); e.g. python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'"
        )
    return token


def is_loopback(host: str) -> bool:
    """``host`` (an address or ``localhost``) is a loopback interface."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_matches(header: str | None, token: str) -> bool:
    """An ``Authorization: Bearer <token>`` header carries ``token`` (constant time)."""
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].encode(), token.encode())


def host_allowed(header: str | None, allowed: Sequence[str]) -> bool:
    """The ``Host`` header (port stripped) is among ``allowed`` (``*``: any)."""
    if "*" in allowed:
        return True
    if not header:
        return False
    host = header.rsplit(":", 1)[0] if not header.endswith("]") else header
    host = host.strip("[]").lower()
    return host in {h.lower() for h in allowed}
