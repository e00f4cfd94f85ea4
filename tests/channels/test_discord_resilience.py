"""The Discord adapter survives cancelled, timed-out and dropped calls (issue 13, item 1).

The real discord.py (gateway client for replies, a second REST client for typing and
read-acks, both on aiohttp) against the loopback fake, its REST traffic through a proxy that
can cut connections. After each kind of trouble a reply, a typing call and a read-ack still
go through.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from soulflow.channels.base import BEST_EFFORT_CONNECTIONS
from soulflow.channels.discord.adapter import DiscordChannel
from soulflow.contracts import OutboundMessage, SendError, SendResult
from tests.channels.adapters import discord_adapter, unpaced_discord
from tests.channels.churn import churn
from tests.channels.tcp_proxy import DroppingProxy
from tests.fakes.discord_api import API_PREFIX, FakeDiscord
from tests.running import running, running_fixture

SLOW_S = 0.05


fake = running_fixture(unpaced_discord)


@pytest.fixture
async def proxy(fake: FakeDiscord) -> AsyncIterator[DroppingProxy]:
    async with running(DroppingProxy(int(fake.base_url.rsplit(":", 1)[1]))) as link:
        yield link


@pytest.fixture
async def channel(fake: FakeDiscord, proxy: DroppingProxy,
                  tmp_path: Path) -> AsyncIterator[DiscordChannel]:
    async with running(discord_adapter(fake, tmp_path, api_url=f"{proxy.url}{API_PREFIX}")
                       ) as adapter:
        yield adapter


def general(fake: FakeDiscord) -> str:
    return str(fake.channel_ids["general"])


def out(fake: FakeDiscord, text: str) -> OutboundMessage:
    return OutboundMessage(provider="discord", chat_id=general(fake), content=text)


async def still_works(fake: FakeDiscord, channel: DiscordChannel, tag: str) -> None:
    async with asyncio.timeout(10):
        sent = await channel.send(out(fake, f"after {tag}"))
        await channel.set_typing(general(fake), True)
        await channel.add_reaction(general(fake), sent.platform_message_ids[0], "👀")
    assert any(m.content == f"after {tag}" for m in fake.sent_messages)


async def test_hundreds_of_cancelled_calls_leave_the_clients_usable(
        fake: FakeDiscord, channel: DiscordChannel) -> None:
    target = (await channel.send(out(fake, "target"))).platform_message_ids[0]
    for route in ("send_message", "typing", "add_reaction"):
        fake.delay_next(route, SLOW_S, count=10_000)
    cancelled = await churn(lambda i: channel.send(out(fake, f"reply {i}")), total=300)
    cancelled += await churn(lambda i: channel.set_typing(general(fake), True), total=300)
    cancelled += await churn(lambda i: channel.add_reaction(general(fake), target, "👀"),
                             total=300)
    assert cancelled > 600
    await still_works(fake, channel, "churn")


async def test_calls_cut_off_by_a_timeout_do_not_leak(fake: FakeDiscord,
                                                      channel: DiscordChannel) -> None:
    """discord.py has no per-request timeout; callers bound it (the dispatcher, feedback)."""
    await still_works(fake, channel, "warm-up")  # the buckets learn their limits
    fake.delay_next("send_message", 3.0, count=20)
    fake.delay_next("typing", 3.0, count=BEST_EFFORT_CONNECTIONS)  # fills the feedback pool
    calls = [channel.send(out(fake, f"slow {i}")) for i in range(20)]
    calls += [channel.set_typing(general(fake), True) for _ in range(BEST_EFFORT_CONNECTIONS)]
    results = await asyncio.gather(*(asyncio.wait_for(c, 1.0) for c in calls),
                                   return_exceptions=True)
    assert all(isinstance(r, TimeoutError) for r in results), results
    await still_works(fake, channel, "timeouts")


async def test_dropped_connections_do_not_leak(fake: FakeDiscord, proxy: DroppingProxy,
                                               channel: DiscordChannel) -> None:
    await still_works(fake, channel, "warm-up")
    target = (await channel.send(out(fake, "target"))).platform_message_ids[0]
    fake.delay_next("send_message", 3.0, count=5)  # long enough: they are cut long before
    fake.delay_next("add_reaction", 3.0, count=3)
    pending = [asyncio.ensure_future(channel.send(out(fake, f"lost {i}"))) for i in range(5)]
    pending += [asyncio.ensure_future(channel.add_reaction(general(fake), target, "👀"))
                for _ in range(3)]
    await fake.wait_for(lambda: proxy.connections >= 8)
    await fake.wait_for(lambda: sum(r.name in ("send_message", "add_reaction")
                                    for r in fake.requests) >= 11)
    assert proxy.drop_all() >= 8
    results = await asyncio.gather(*pending, return_exceptions=True)
    # discord.py retries some failures itself: a call either went through or failed cleanly
    assert all(isinstance(r, SendResult | SendError) for r in results[:5]), results
    assert all(r is None or isinstance(r, SendError) for r in results[5:]), results
    await still_works(fake, channel, "drop")
