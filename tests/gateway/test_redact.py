"""What of a backend's error body reaches the client: a short message, no secret."""

from __future__ import annotations

import json

import pytest

from torchroute.gateway.redact import MAX_MESSAGE, backend_message

KEY = "sk-live-0123456789abcdef"


@pytest.mark.parametrize(
    ("payload", "shown"),
    [
        ({"error": {"message": "model 'x' does not exist"}}, "model 'x' does not exist"),
        ({"detail": "max_tokens too large"}, "max_tokens too large"),
        ({"error": "bad request"}, "bad request"),
        ({"error": {"message": f"key {KEY} has no access"}}, "key [redacted] has no access"),
        (
            {"message": "Authorization: Bearer abc.def was refused"},
            "Authorization: Bearer [redacted] was refused",
        ),
        (
            {"message": 'headers {"api-key": "q1w2e3"} seen'},
            'headers {"api-key": "[redacted]"} seen',
        ),
        ({"message": "x-api-key=zz99 wrong"}, "x-api-key=[redacted] wrong"),
        ({"message": "line one\nline two"}, None),
        ({"message": "x" * (MAX_MESSAGE + 1)}, None),
        ({"error": {"message": ["a list"]}}, None),
        ({"headers": {"authorization": f"Bearer {KEY}"}}, None),
        ([1, 2], None),
    ],
)
def test_only_a_short_message_without_secrets_is_shown(payload, shown):
    assert backend_message(json.dumps(payload).encode(), [KEY, ""]) == shown


def test_a_body_that_is_not_json_shows_nothing():
    assert backend_message(b"<html>Bearer " + KEY.encode(), [KEY]) is None
