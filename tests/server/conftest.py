"""Fixtures for the server tests: one live server (with an API key) shared by the whole
directory, and clients pointed at it. Every client has a timeout so no test can hang."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.server.live import API_KEY, LiveServer, start_live_server

CLIENT_TIMEOUT_S = 120.0


@pytest.fixture(scope="session")
def live() -> Iterator[LiveServer]:
    server = start_live_server()
    yield server
    server.stop()


@pytest.fixture()
def client(live: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.base_url, headers={"Authorization": f"Bearer {API_KEY}"},
                      timeout=CLIENT_TIMEOUT_S) as c:
        yield c


@pytest.fixture()
def openai_client(live: LiveServer):
    from openai import OpenAI

    with OpenAI(base_url=live.api_url, api_key=API_KEY, timeout=CLIENT_TIMEOUT_S, max_retries=0) as c:
        yield c


def wait_until_idle(live: LiveServer, timeout_s: float = 60.0) -> None:
    """Wait for the engine to hold no request and no cache page (aborts land between steps)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = live.engine.stats
        if stats.num_pending == 0 and stats.num_running == 0 and stats.num_waiting == 0 and stats.all_pages_free:
            return
        time.sleep(0.05)
    raise AssertionError(f"engine not idle after {timeout_s} s: {live.engine.stats}")
