"""A read whose reply is lost: Redis handed entries to this node (they sit in its pending list)
but the client saw a timeout. The next claim must hand them out first, in order, not leave them
for the sweep or the next holder to answer after later messages of their chat."""

from __future__ import annotations

from typing import Any

import pytest

from soulflow.backends.redis.backend import RedisBackend
from soulflow.errors import StoreUnavailable
from tests.backends.conftest import Harness
from tests.backends.helpers import inbound


async def test_entries_of_a_read_whose_reply_was_lost_come_first_in_order(
        redis_harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = await redis_harness.open(partitions=1)
    assert isinstance(backend, RedisBackend)
    store = backend.inbound
    for n in range(3):
        assert await store.accept(inbound("a", n))
    real = store._client.xreadgroup

    async def reply_lost(*args: Any, **kwargs: Any) -> Any:
        await real(*args, **kwargs)  # Redis runs it: the entries are this node's now
        monkeypatch.undo()
        raise StoreUnavailable("Timeout reading from socket")  # as the client maps it

    monkeypatch.setattr(store._client, "xreadgroup", reply_lost)
    with pytest.raises(StoreUnavailable):
        await store.claim()
    assert await store.accept(inbound("a", 3))
    claimed = await store.claim()
    assert [m.message_id for m in claimed] == ["0", "1", "2", "3"]
    assert await store.claim() == []  # each handed out once
