"""What a call holds and what a try is charged, by hand: the body's bytes and max_tokens
times n, at the dearest input and output prices; usage (never fewer output tokens than the
chunks relayed), else the hold when an answer came, else nothing."""

from __future__ import annotations

import json

import pytest

from torchroute.gateway.backends import Backend
from torchroute.gateway.spend import (
    Ceiling,
    ceiling,
    charge,
    check_output_tokens,
    dearest_prices,
    reservation,
)
from torchroute.gateway.upstream import Usage

CHEAP = Backend("cheap", "http://127.0.0.1:9/v1", "c", input_per_mtok=1.0, output_per_mtok=8.0)
WORDY = Backend("wordy", "http://127.0.0.1:9/v1", "w", input_per_mtok=5.0, output_per_mtok=2.0)


def test_the_ceiling_is_the_body_bytes_and_max_tokens_times_n():
    raw = {"messages": [{"role": "user", "content": "héllo"}], "max_tokens": 50, "n": 3}
    body = json.dumps(raw, ensure_ascii=False).encode()
    assert len(body) > len(body.decode())  # é is two bytes: bytes, not characters, count
    assert ceiling(body, raw, 4096) == Ceiling(len(body), 150)
    newer = {**raw, "max_completion_tokens": 7, "n": 1}
    assert ceiling(body, newer, 4096) == Ceiling(len(body), 7)  # the newer field first
    assert ceiling(body, {"messages": []}, 4096) == Ceiling(len(body), 4096)
    assert ceiling(body, {"n": True, "max_tokens": 5}, 4096).output_tokens == 5


def test_the_hold_takes_the_highest_input_and_the_highest_output_price():
    dearest = dearest_prices([CHEAP, WORDY])
    assert dearest == (5.0, 8.0)
    hold = reservation(Ceiling(1000, 100), dearest)
    assert hold == pytest.approx((1000 * 5.0 + 100 * 8.0) / 1e6)
    assert hold >= max(Ceiling(1000, 100).cost(b) for b in (CHEAP, WORDY))


def test_a_try_is_charged_usage_else_its_hold_if_answered_else_nothing():
    limit = Ceiling(200, 64)
    assert charge(CHEAP, limit, Usage(10, 20), 5, True) == pytest.approx((10 + 20 * 8) / 1e6)
    # a backend reporting fewer output tokens than the chunks relayed: the chunks count
    assert charge(CHEAP, limit, Usage(10, 3), 12, True) == pytest.approx((10 + 12 * 8) / 1e6)
    assert charge(CHEAP, limit, None, 4, True) == pytest.approx((200 + 64 * 8) / 1e6)
    assert charge(CHEAP, limit, None, 0, True) == pytest.approx((200 + 64 * 8) / 1e6)
    assert charge(CHEAP, limit, None, 0, False) is None


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_max_output_tokens_is_a_whole_number_at_least_one(bad):
    with pytest.raises(ValueError, match="max_output_tokens: expected a whole number >= 1"):
        check_output_tokens(bad)
