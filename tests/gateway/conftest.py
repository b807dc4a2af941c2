"""Fixtures shared by the gateway tests: one stub backend and one router per module."""

from __future__ import annotations

import pytest

from tests.gateway.helpers import build_router
from tests.gateway.stub_backend import ServerThread, stub_app


@pytest.fixture(scope="module")
def stub():
    """A stub backend (a real HTTP server on loopback) serving every arm's model."""
    with ServerThread(stub_app()) as server:
        yield server


@pytest.fixture(scope="module")
def router():
    """A LinUCB router over the three test arms with the tiny text encoder."""
    router = build_router()
    yield router
    router.close()
