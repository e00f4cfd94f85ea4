"""Leases with fencing tokens, against every backend."""

from __future__ import annotations

import time

from tests.backends.conftest import Harness
from tests.backends.helpers import eventually


async def test_one_holder_at_a_time_and_tokens_grow(harness: Harness) -> None:
    backend = await harness.open()
    leases = backend.leases
    first = await leases.acquire("account:telegram", "node-a", 30)
    assert first is not None and first.valid()
    assert await leases.acquire("account:telegram", "node-b", 30) is None
    assert await leases.acquire("account:telegram", "node-a", 30) is None  # even the holder
    assert await leases.holder("account:telegram") == ("node-a", first.token)
    renewed = await leases.renew(first, 30)
    assert renewed is not None and renewed.token == first.token
    assert await leases.release(first)
    assert not await leases.release(first)
    assert await leases.holder("account:telegram") is None
    second = await leases.acquire("account:telegram", "node-b", 30)
    assert second is not None and second.token > first.token
    assert await leases.renew(first, 30) is None  # the old holder cannot extend it


async def test_a_lease_expires_and_its_local_deadline_comes_first(harness: Harness) -> None:
    backend = await harness.open()
    leases = backend.leases
    sent_at = time.monotonic()
    lease = await leases.acquire("account:discord", "node-a", 0.3)
    assert lease is not None
    assert lease.deadline < sent_at + 0.3
    assert await leases.acquire("account:discord", "node-b", 0.3) is None

    async def taken() -> bool:
        return await leases.acquire("account:discord", "node-b", 5) is not None

    await eventually(taken, what="the expired lease to be taken")
    assert not lease.valid()
    assert await leases.renew(lease, 5) is None


async def test_fenced_cursor_writes_need_the_current_lease(harness: Harness) -> None:
    backend = await harness.open()
    lease = await backend.leases.acquire("account:telegram", "node-a", 30)
    assert lease is not None
    assert await backend.cursors.update("telegram", {"offset": 5}, lease=lease)
    await backend.leases.release(lease)
    newer = await backend.leases.acquire("account:telegram", "node-b", 30)
    assert newer is not None
    assert not await backend.cursors.update("telegram", {"offset": 3}, lease=lease)
    assert await backend.cursors.update("telegram", {"offset": 9}, lease=newer)
    assert await backend.cursors.load("telegram") == {"offset": 9}
