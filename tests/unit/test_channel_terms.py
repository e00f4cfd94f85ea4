"""The reader of a shared account, term by term, with the file backend's in-process leases
(`MemoryLeases`): reading starts only with the lease, a hanging read is abandoned the moment the
term ends, and a channel restarted for failing reads gives the account up on its way out."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from soulflow.backends.file.leases import MemoryLeases
from soulflow.backends.leader import LeaderElection
from soulflow.channels.base import ChannelAdapter
from soulflow.channels.health import HealthBoard, LinkState, Role
from soulflow.channels.leadership import AccountLeadership
from soulflow.channels.reader import ChannelRestart, ReadPolicy, run_channel
from soulflow.contracts import InboundMessage
from tests.waiting import until

ACCOUNT = "account:scripted"
TTL_S = 0.4


class TermAdapter(ChannelAdapter):
    """Counts its sides' starts and stops; reads hang or fail as the test says."""

    name = "scripted"

    def __init__(self) -> None:
        self.mode = "hang"
        self.events: list[str] = []
        self.reads_cancelled = 0

    async def start(self) -> None:
        self.events.append("start")

    async def start_reading(self) -> None:
        self.events.append("start_reading")

    async def stop_reading(self) -> None:
        self.events.append("stop_reading")

    async def stop(self) -> None:
        self.events.append("stop")

    async def read(self) -> list[InboundMessage]:
        if self.mode == "raise":
            await asyncio.sleep(0.001)
            raise ConnectionError("reset")
        try:
            await asyncio.Event().wait()  # a long poll that never answers
        except asyncio.CancelledError:
            self.reads_cancelled += 1
            raise
        return []

    async def send(self, message: object) -> object:  # type: ignore[override]
        raise NotImplementedError


async def ingest(adapter: ChannelAdapter, batch: list[InboundMessage]) -> None:
    adapter.commit(batch)


def shared(adapter: TermAdapter, leases: MemoryLeases) -> AccountLeadership:
    """What `share_account` does, for an adapter without cursors."""
    adapter.leadership = AccountLeadership(LeaderElection(leases, ACCOUNT, "node-a",
                                                          ttl_s=TTL_S))
    return adapter.leadership


async def test_reading_waits_for_the_lease_and_a_hanging_read_ends_with_the_term() -> None:
    leases = MemoryLeases()
    other = await leases.acquire(ACCOUNT, "node-b", 60.0)  # someone else reads first
    assert other is not None
    adapter, health = TermAdapter(), HealthBoard()
    leadership = shared(adapter, leases)
    task = asyncio.create_task(run_channel(adapter, ingest, health, ReadPolicy()))
    try:
        await until(lambda: health.get("scripted").state is LinkState.STANDBY)
        assert adapter.events == ["start"]  # sending side only
        await leases.release(other)
        await until(lambda: health.get("scripted").role is Role.LEADER
                    and health.get("scripted").state is LinkState.CONNECTED)
        assert adapter.events == ["start", "start_reading"]

        # the lease ends under the reader and another node takes it: the read that hangs is
        # cancelled, the read side stopped, and this node is on standby again
        held = leadership.lease
        assert held is not None and await leases.release(held)
        assert await leases.acquire(ACCOUNT, "node-b", 60.0) is not None
        await until(lambda: adapter.reads_cancelled == 1, timeout=5)
        await until(lambda: health.get("scripted").state is LinkState.STANDBY, timeout=5)
        assert adapter.events == ["start", "start_reading", "stop_reading"]
        assert health.get("scripted").role is Role.STANDBY
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert await leases.holder(ACCOUNT) == ("node-b", 3)  # node-a never took it back


async def test_a_restart_for_failing_reads_releases_the_account() -> None:
    leases = MemoryLeases()
    adapter, health = TermAdapter(), HealthBoard()
    adapter.mode = "raise"
    shared(adapter, leases)
    with pytest.raises(ChannelRestart):
        await asyncio.wait_for(run_channel(adapter, ingest, health,
                                           ReadPolicy(restart_after=2, retry_delay_s=0.01)), 5)
    assert adapter.events[-2:] == ["stop", "stop_reading"]
    assert health.get("scripted").restarts == 1
    assert await leases.holder(ACCOUNT) is None  # another node can take over at once
