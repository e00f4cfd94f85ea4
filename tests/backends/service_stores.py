"""Fixtures for the cluster services' stores (cron, decisions, vault, heartbeat): a synchronous
`StateRedis` on the session's private redis-server, with a fresh key prefix per test.

Import the fixtures into a test module (`from tests.backends.service_stores import state_redis`);
the redis-server itself is the session fixture of tests/backends/conftest.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from soulflow.backends.redis.sync_client import StateRedis, sync_client
from tests.backends.redis_server import RedisServer


def fresh_state(url: str, prefix: str | None = None) -> StateRedis:
    """A new client (as another node would have) on `prefix`, or on a new prefix."""
    return StateRedis(sync_client(url, timeout_s=2.0), prefix or f"t{uuid.uuid4().hex[:10]}:")


@contextmanager
def node_states(url: str) -> Iterator[Callable[[], StateRedis]]:
    """Opens a new client per call on one fresh prefix (the nodes of one cluster, or a restart
    of one: each its own connection onto the same state); all closed on the way out."""
    prefix = fresh_state(url).prefix
    opened: list[StateRedis] = []

    def open_state() -> StateRedis:
        state = fresh_state(url, prefix)
        opened.append(state)
        return state

    try:
        yield open_state
    finally:
        for state in opened:
            state.close()


@pytest.fixture
def state_redis(redis_server: RedisServer) -> Iterator[StateRedis]:
    state = fresh_state(redis_server.url)
    yield state
    state.close()
