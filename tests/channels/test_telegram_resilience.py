"""The Telegram adapter survives cancelled, timed-out and dropped calls (issue 13, item 1).

Through the real python-telegram-bot against the loopback Bot API fake: after a burst of
calls cancelled between pool assignment and connect (with PTB's default httpx pool, httpcore
1.0.9, each such call keeps its slot: "Pool timeout: All connections in the connection pool
are occupied"), calls still reach the platform.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from soulflow.channels.telegram.adapter import TelegramChannel
from soulflow.contracts import OutboundMessage, SendError
from tests.channels.adapters import telegram_adapter
from tests.channels.churn import churn
from tests.channels.tcp_proxy import DroppingProxy
from tests.fakes.rate_limits import TELEGRAM_LIMITS
from tests.fakes.telegram_api import FakeTelegram
from tests.running import running

CHAT = 4242
SLOW_S = 0.05  # every churned call is answered this late, so most are cancelled mid-flight


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with running(FakeTelegram(limits=TELEGRAM_LIMITS.relaxed())) as server:
        server.add_chat(CHAT)
        yield server


@pytest.fixture
async def channel(proxy: DroppingProxy, tmp_path: Path) -> AsyncIterator[TelegramChannel]:
    adapter = telegram_adapter(proxy.url, tmp_path, feedback_timeout_s=0.5)
    async with running(adapter):
        yield adapter


def out(text: str) -> OutboundMessage:
    return OutboundMessage(provider="telegram", chat_id=str(CHAT), content=text)


async def still_works(fake: FakeTelegram, channel: TelegramChannel, tag: str) -> None:
    """A reply, a typing call and a read-ack all go through promptly."""
    async with asyncio.timeout(10):
        await channel.send(out(f"after {tag}"))
        await channel.set_typing(str(CHAT), True)
        await channel.add_reaction(str(CHAT), "1", "👀")
    assert f"after {tag}" in fake.sent_texts(CHAT)


async def test_hundreds_of_cancelled_calls_leave_every_pool_usable(
        fake: FakeTelegram, channel: TelegramChannel) -> None:
    first = (await channel.send(out("target"))).platform_message_ids[0]
    for method in ("sendMessage", "sendChatAction", "setMessageReaction"):
        fake.delay_next(method, SLOW_S, count=10_000)
    cancelled = await churn(lambda i: channel.send(out(f"reply {i}")), total=300)
    cancelled += await churn(lambda i: channel.set_typing(str(CHAT), True), total=300)
    cancelled += await churn(lambda i: channel.add_reaction(str(CHAT), first, "👀"), total=300)
    assert cancelled > 600  # the churn really cut calls off mid-flight
    await still_works(fake, channel, "churn")


async def test_timed_out_calls_do_not_leak(fake: FakeTelegram,
                                                       channel: TelegramChannel) -> None:
    fake.delay_next("sendChatAction", 3.0, count=8)  # past the feedback read timeout
    results = await asyncio.gather(*(channel.set_typing(str(CHAT), True) for _ in range(8)),
                                   return_exceptions=True)
    assert all(isinstance(r, SendError) and "in time" in str(r) for r in results)
    await still_works(fake, channel, "timeouts")


async def test_dropped_connections_do_not_leak(fake: FakeTelegram, proxy: DroppingProxy,
                                               channel: TelegramChannel) -> None:
    """The network drops every connection, with requests in flight and idle ones pooled."""
    await still_works(fake, channel, "warm-up")
    fake.delay_next("sendMessage", 30.0, count=5)
    fake.delay_next("sendChatAction", 30.0, count=4)
    pending = [asyncio.ensure_future(channel.send(out(f"lost {i}"))) for i in range(5)]
    pending += [asyncio.ensure_future(channel.set_typing(str(CHAT), True)) for _ in range(4)]
    await fake.wait_for(lambda: len(fake.calls("sendMessage")) >= 6
                        and len(fake.calls("sendChatAction")) >= 5)
    assert proxy.drop_all() >= 9
    results = await asyncio.gather(*pending, return_exceptions=True)
    assert all(isinstance(r, SendError) for r in results), results
    await still_works(fake, channel, "drop")


async def test_cancelled_long_polls_leave_polling_working(fake: FakeTelegram,
                                                          channel: TelegramChannel) -> None:
    """The long poll has a pool of one connection: a single leaked slot would stop all
    reading. A restarted channel loop cancels its poll mid-flight, so do that a hundred
    times."""
    cancelled = await churn(lambda i: channel.read(), total=100, batch=1, max_turns=60)
    assert cancelled > 50
    fake.push_message(CHAT, "still listening", from_id=CHAT)
    async with asyncio.timeout(10):
        while not (batch := await channel.read()):
            pass
    assert [m.text for m in batch] == ["still listening"]
