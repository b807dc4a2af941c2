"""What of a backend's error answer may reach the client: its short message, no secret.

A backend's error body is never passed on as it came: some echo the request, headers
included, and so the backend's API key. Only the error's message is kept (OpenAI's
``{"error": {"message": ...}}``, or a ``message`` / ``detail`` / ``error`` string), when it
is one short line; every configured backend key in it, and the value of anything written
as an ``Authorization``, ``api-key`` or ``Bearer`` credential, is replaced by
``[redacted]``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

#: the longest backend message passed on (characters)
MAX_MESSAGE = 300
REDACTED = "[redacted]"
#: a credential written in a message: ``Bearer <value>``, ``Authorization: <value>``,
#: ``"api-key": "<value>"``, ``x-api-key=<value>`` ...
_CREDENTIAL = re.compile(
    r"(?i)(\bbearer\s+|\b(?:authorization|proxy-authorization|x-api-key|api[-_ ]?key)"
    r"[\"']?\s*[:=]\s*[\"']?(?:bearer\s+|basic\s+)?)[^\s\"',;}]+"
)


def _message(payload: Any) -> Any:
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if isinstance(error, dict):
        return error.get("message")
    for key in ("message", "detail", "error"):
        if isinstance(payload.get(key), str):
            return payload[key]
    return None


def backend_message(body: bytes, secrets: Iterable[str]) -> str | None:
    """The message of a backend's error ``body`` as the client may see it (``None``: none
    that can be shown): a string of at most :data:`MAX_MESSAGE` printable characters on one
    line, each of ``secrets`` and each credential value replaced by ``[redacted]``."""
    try:
        message = _message(json.loads(body))
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, str) or not message.isprintable():
        return None
    message = message.strip()
    if not message or len(message) > MAX_MESSAGE:
        return None
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        message = message.replace(secret, REDACTED)
    return _CREDENTIAL.sub(lambda m: m.group(1) + REDACTED, message)
