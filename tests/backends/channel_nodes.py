"""Simulated daemons for the channel-leadership tests: one platform adapter each, its account
shared through Redis the way `runtime.wiring.channel_registry` wires it (a `LeaderElection` on
`account:<name>`, cursors in the backend's CursorStore), read by the real `run_channel` loop.

A node's Redis client may go through `tests/backends/proxy.py` so the test can cut it off.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from soulflow.backends.leader import LeaderElection
from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.keys import Keys
from soulflow.backends.redis.lease import RedisLeases
from soulflow.backends.redis.records import RedisCursors
from soulflow.channels.base import ChannelAdapter
from soulflow.channels.health import ChannelHealth, HealthBoard, LinkState, Role
from soulflow.channels.reader import ReadPolicy, run_channel
from soulflow.contracts import InboundMessage

POLICY = ReadPolicy(stall_after_s=30.0, restart_after=50, retry_delay_s=0.05,
                    connect_max_delay_s=1.0)


@dataclass(eq=False)
class ReaderNode:
    """One node's reader of a shared account; `received` is what its manager would journal."""

    adapter: ChannelAdapter
    election: LeaderElection
    health: HealthBoard = field(default_factory=HealthBoard)
    received: list[InboundMessage] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    @classmethod
    def on(cls, adapter: ChannelAdapter, client: AsyncStoreRedis, keys: Keys, node_id: str, *,
           ttl_s: float) -> ReaderNode:
        election = LeaderElection(RedisLeases(client, keys), f"account:{adapter.name}",
                                  node_id, ttl_s=ttl_s)
        adapter.share_account(election, RedisCursors(client, keys))
        return cls(adapter, election)

    async def _ingest(self, adapter: ChannelAdapter, batch: list[InboundMessage]) -> None:
        self.received.extend(batch)
        adapter.commit(batch)  # the intake commits once the batch is journaled

    def start(self) -> None:
        self.task = asyncio.create_task(
            run_channel(self.adapter, self._ingest, self.health, POLICY),
            name=f"channel:{self.adapter.name}:{self.election.owner}")

    @property
    def record(self) -> ChannelHealth:
        return self.health.get(self.adapter.name)

    def leads(self) -> bool:
        """Reading as the account's leader (its read side is up)."""
        return self.record.role is Role.LEADER and self.record.state is LinkState.CONNECTED

    def on_standby(self) -> bool:
        return self.record.state is LinkState.STANDBY

    def texts(self) -> list[str]:
        return [m.text for m in self.received if not m.priming]

    async def stop(self) -> None:
        """A clean stop, as the daemon does it: cancel the loop (which stops reading and
        releases the lease), then close the adapter."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None
        await self.adapter.stop()
