"""Who may change the router: the bearer token, the Host header, loopback, model names, and
the one host policy of ``serve`` and ``gateway`` (:func:`host_policy`)."""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Sequence

from torchroute.checks import MAX_MODEL_NAME, MODEL_NAME
from torchroute.errors import InputError

MIN_TOKEN = 16
TOKEN = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no spaces
TOKEN_ENV = "TORCHROUTE_SERVE_TOKEN"
#: the ``Host`` headers a server bound to loopback accepts by default
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
#: bind addresses that answer on every interface
WILDCARDS = ("0.0.0.0", "::", "")


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
    """``host`` (an address or ``localhost``) is a loopback interface; an IPv4-mapped IPv6
    address (``::ffff:127.0.0.1``) is its IPv4 address."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def host_policy(
    host: str, allowed_hosts: str | None, *, insecure: bool, secret: str | None, secrets: str
) -> tuple[str, ...]:
    """The ``Host`` headers a server bound to ``host`` accepts, after the rules every
    server of torchroute follows (``serve`` and ``gateway`` alike).

    Args:
        host: the bind address (``--host``).
        allowed_hosts: ``--allowed-hosts`` as given (comma-separated; ``None``: the
            default, loopback names on loopback, ``host`` itself elsewhere).
        insecure: ``--insecure-no-auth`` was given.
        secret: the flag or variable of a secret the user chose (``--token``, ``--keys``,
            ...); ``None``: none (one is made, or ``insecure``).
        secrets: the flags a secret may come from, for the messages.

    Raises:
        InputError: ``--insecure-no-auth`` with a secret or off loopback; ``--allowed-hosts``
            empty, or ``'*'`` without a secret of the user's own; a wildcard ``--host``
            without ``--allowed-hosts``.
    """
    if insecure and secret is not None:
        raise InputError(f"--insecure-no-auth contradicts the token of {secret}")
    if insecure and not is_loopback(host):
        raise InputError(
            f"--insecure-no-auth works only on loopback; --host {host} is reachable from other "
            f"machines (drop the flag: a token is made)"
        )
    if allowed_hosts is not None:
        hosts = tuple(h.strip() for h in allowed_hosts.split(",") if h.strip())
        if not hosts:
            raise InputError(
                f"--allowed-hosts {allowed_hosts!r}: expected comma-separated Host names, "
                "e.g. router.example.com,10.0.0.5"
            )
        if "*" in hosts and secret is None:
            raise InputError(
                f"--allowed-hosts '*' accepts any Host header: it needs a token of your own "
                f"({secrets})"
            )
        return hosts
    if is_loopback(host):
        return LOOPBACK_HOSTS if host in LOOPBACK_HOSTS else (*LOOPBACK_HOSTS, host)
    if host in WILDCARDS:
        raise InputError(
            f"--host {host!r} answers on every interface: name the Host headers clients use "
            "with --allowed-hosts (e.g. router.example.com,10.0.0.5)"
        )
    return (host,)


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
