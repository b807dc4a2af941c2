"""A stream event's JSON: the gateway's parse accepts and refuses what ``json.loads`` does on
UTF-8 text (the reference), without its encoding detection."""

from __future__ import annotations

import json

import pytest

from torchroute.gateway.upstream import parse_event

EVENTS = [
    b'{"id":"c1","choices":[{"index":0,"delta":{"content":"w "},"finish_reason":null}]}',
    b'{"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 8}}',
    '{"delta": "caf\u00e9 \u4e2d"}'.encode(),
    b"[1, 2.5, true, null]",
    b'"text"',
    b"{not json",
    b'{"a": 1} {"b": 2}',
    b'{"a": 1} x',
    b'{"a": 1',
    b"",
    b"\xff\xfe{}",
    b"-Infinity",
]


@pytest.mark.parametrize("data", EVENTS)
def test_parse_event_agrees_with_json_loads(data):
    try:
        expected = json.loads(data.decode())
    except ValueError:
        with pytest.raises(ValueError):
            parse_event(data)
        return
    assert parse_event(data) == expected
