"""Fixtures for the backend contract suite: one private Redis per session, a fresh key prefix per
test, and a harness that opens (and reopens, as after a restart) the backend under test; a
durable Redis of a test's own for the restart tests; and for the daemon cluster tests, the
Telegram fake with relaxed rate limits (a flood across many chats must not be paced by the
fake's limits). A module that needs a different `telegram` (chats added, another type) defines
its own, which overrides this one in that module only."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from soulflow.backends.base import Backend
from soulflow.backends.file.backend import FileBackend
from soulflow.backends.redis.backend import RedisBackend
from soulflow.backends.redis.clients import AsyncStoreRedis
from tests.backends.redis_server import RedisServer
from tests.fakes.rate_limits import TELEGRAM_LIMITS
from tests.fakes.telegram_api import FakeTelegramThread


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def durable_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of the test's own, to be killed and restarted: it writes every command to disk
    (AOF, `appendfsync always`) before answering."""
    server = RedisServer(tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "always")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def telegram() -> Iterator[FakeTelegramThread]:
    with FakeTelegramThread(limits=TELEGRAM_LIMITS.relaxed()) as tg:
        yield tg


class Harness:
    """Opens backends of one kind over the same state (a directory, or a Redis key prefix)."""

    def __init__(self, kind: str, tmp_path: Path, redis_url: str = "") -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.redis_url = redis_url
        self.prefix = f"t{uuid.uuid4().hex[:10]}:"
        self.opened: list[Backend] = []

    async def open(self, node_id: str = "node-a", *, lease_ttl_s: float = 6.0,
                   partitions: int = 4) -> Backend:
        backend: Backend
        if self.kind == "file":
            backend = FileBackend(self.tmp_path / "runtime", node_id=node_id, fsync="always")
        else:
            backend = RedisBackend(AsyncStoreRedis.from_url(self.redis_url), node_id=node_id,
                                   prefix=self.prefix, partitions=partitions,
                                   lease_ttl_s=lease_ttl_s)
        await backend.start()
        self.opened.append(backend)
        return backend

    async def close(self, backend: Backend) -> None:
        if backend in self.opened:
            self.opened.remove(backend)
            await backend.stop()

    async def reopen(self, backend: Backend) -> Backend:
        """Close (a clean stop) and open again over the same state: a restart."""
        await self.close(backend)
        return await self.open(backend.node_id)

    async def close_all(self) -> None:
        for backend in list(self.opened):
            await self.close(backend)


@pytest.fixture(params=["file", "redis"])
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    url = ""
    if request.param == "redis":
        url = request.getfixturevalue("redis_server").url
    h = Harness(request.param, tmp_path, url)
    yield h
    await h.close_all()


@pytest.fixture
async def redis_harness(redis_server: RedisServer, tmp_path: Path) -> AsyncIterator[Harness]:
    h = Harness("redis", tmp_path, redis_server.url)
    yield h
    await h.close_all()
