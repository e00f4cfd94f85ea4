"""The Slack adapter survives cancelled, timed-out and dropped calls (issue 13, item 1).

The real slack_sdk `AsyncWebClient` (aiohttp) against the loopback fake, through a proxy that
can cut connections. After each kind of trouble a reply and a read-ack still go through.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from soulflow.channels.base import BEST_EFFORT_CONNECTIONS
from soulflow.channels.slack.adapter import SlackChannel
from soulflow.contracts import OutboundMessage, SendError, SendResult
from tests.channels.adapters import slack_adapter
from tests.channels.churn import churn
from tests.channels.tcp_proxy import DroppingProxy
from tests.fakes.rate_limits import SLACK_LIMITS
from tests.fakes.slack_api import FakeSlack
from tests.running import running, running_fixture

GENERAL = "C0GENERAL1"
SLOW_S = 0.05


fake = running_fixture(lambda: FakeSlack(limits=SLACK_LIMITS.relaxed()))


@pytest.fixture
async def channel(proxy: DroppingProxy, tmp_path: Path) -> AsyncIterator[SlackChannel]:
    adapter = slack_adapter(f"{proxy.url}/api/", tmp_path, default_channel=GENERAL,
                            feedback_timeout_s=0.5)
    async with running(adapter):
        yield adapter


def out(text: str) -> OutboundMessage:
    return OutboundMessage(provider="slack", chat_id=GENERAL, content=text)


async def still_works(fake: FakeSlack, channel: SlackChannel, tag: str) -> None:
    async with asyncio.timeout(10):
        ts = (await channel.send(out(f"after {tag}"))).platform_message_ids[0]
        await channel.add_reaction(GENERAL, ts, "eyes")
    texts = [c.params.get("text") for c in fake.calls("chat.postMessage")]
    assert f"after {tag}" in texts


async def test_hundreds_of_cancelled_calls_leave_the_clients_usable(
        fake: FakeSlack, channel: SlackChannel) -> None:
    target = (await channel.send(out("target"))).platform_message_ids[0]
    for method in ("chat.postMessage", "reactions.add"):
        fake.delay_next(method, SLOW_S, count=10_000)
    cancelled = await churn(lambda i: channel.send(out(f"reply {i}")), total=300)
    cancelled += await churn(lambda i: channel.add_reaction(GENERAL, target, "eyes"), total=300)
    assert cancelled > 400
    await still_works(fake, channel, "churn")


async def test_timed_out_read_acks_do_not_leak(fake: FakeSlack, channel: SlackChannel) -> None:
    target = (await channel.send(out("target"))).platform_message_ids[0]
    # as many as the feedback pool holds, each answered after the client's timeout
    fake.delay_next("reactions.add", 3.0, count=BEST_EFFORT_CONNECTIONS)
    results = await asyncio.gather(*(channel.add_reaction(GENERAL, target, "eyes")
                                     for _ in range(BEST_EFFORT_CONNECTIONS)),
                                   return_exceptions=True)
    assert all(isinstance(r, SendError | TimeoutError) for r in results), results
    await still_works(fake, channel, "timeouts")


async def test_dropped_connections_do_not_leak(fake: FakeSlack, proxy: DroppingProxy,
                                               channel: SlackChannel) -> None:
    await still_works(fake, channel, "warm-up")
    target = (await channel.send(out("target"))).platform_message_ids[0]
    fake.delay_next("chat.postMessage", 30.0, count=5)
    fake.delay_next("reactions.add", 30.0, count=3)
    pending = [asyncio.ensure_future(channel.send(out(f"lost {i}"))) for i in range(5)]
    pending += [asyncio.ensure_future(channel.add_reaction(GENERAL, target, "eyes"))
                for _ in range(3)]
    await fake.wait_for(lambda: len(fake.calls("chat.postMessage")) >= 7
                        and len(fake.calls("reactions.add")) >= 4)
    assert proxy.drop_all() >= 8
    results = await asyncio.gather(*pending, return_exceptions=True)
    # slack_sdk retries a reply once after a connection error (so some are delivered); the
    # feedback client never retries: its read-acks fail, and nothing hangs
    assert all(isinstance(r, SendResult | SendError) for r in results[:5]), results
    assert all(isinstance(r, SendError) for r in results[5:]), results
    await still_works(fake, channel, "drop")


async def test_a_post_whose_connection_broke_is_looked_up_not_posted_twice(
        fake: FakeSlack, proxy: DroppingProxy, channel: SlackChannel) -> None:
    """Slack takes a reply, then the connection breaks before the answer arrives. The post
    is not retried blindly (slack_sdk's connection-error retry is off for replies); the
    outbox's next try looks for the reply's id first, finds it, and posts nothing."""
    message = out("said once")
    fake.delay_next("chat.postMessage", 0.5)
    sending = asyncio.create_task(channel.send(message))
    await fake.wait_for(lambda: len(fake.calls("chat.postMessage")) == 1, 5)
    proxy.drop_all()
    with pytest.raises(SendError, match="network error"):
        await sending
    await fake.wait_for(lambda: fake.bot_texts(GENERAL) == ["said once"], 5)  # Slack has it
    again = await channel.send(message)
    assert again.platform_message_ids == [fake.messages[0].ts]
    assert fake.bot_texts(GENERAL) == ["said once"] and len(fake.calls("chat.postMessage")) == 1
    assert len(fake.calls("conversations.history")) == 1
