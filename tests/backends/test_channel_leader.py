"""One reader per platform account on Redis: the real adapters (PTB, discord.py, slack_sdk)
against the loopback fakes, two simulated daemons sharing each account through one Redis.

Only the account's leader reads (Telegram getUpdates, the Discord gateway, Slack Socket Mode),
every node sends, a leader cut off from Redis stops polling before another node takes over (the
fake sees no 409), and the read position moves with the account.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.backends.redis.keys import Keys
from soulflow.backends.redis.lease import RedisLeases
from soulflow.backends.redis.records import RedisCursors
from soulflow.contracts import OutboundMessage
from tests.backends.channel_nodes import ReaderNode
from tests.backends.helpers import eventually
from tests.backends.proxy import CuttableProxy
from tests.backends.redis_server import RedisServer
from tests.channels.adapters import (
    discord_adapter,
    slack_adapter,
    telegram_adapter,
    unpaced_discord,
)
from tests.fakes.slack_api import APP_TOKEN, FakeSlack
from tests.fakes.telegram_api import FakeTelegram
from tests.running import running
from tests.waiting import until

TTL_S = 1.2
CHAT = 4242
TIMEOUT = 10.0


@pytest.fixture
def keys() -> Keys:
    return Keys(f"acct{uuid.uuid4().hex[:8]}:", 1)


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[AsyncStoreRedis]:
    client = AsyncStoreRedis.from_url(redis_server.url)
    yield client
    await client.aclose()


@asynccontextmanager
async def leader_then_standby(first: ReaderNode, second: ReaderNode) -> AsyncIterator[None]:
    """`first` started and leading the account, then `second` started and on standby; both
    stopped on the way out (a node the test already stopped is stopped again harmlessly)."""
    try:
        first.start()
        await until(first.leads, TIMEOUT)
        second.start()
        await until(second.on_standby, TIMEOUT)
        yield
    finally:
        await second.stop()
        await first.stop()


async def stored_cursors(client: AsyncStoreRedis, keys: Keys, channel: str) -> dict[str, object]:
    return await RedisCursors(client, keys).load(channel)


async def offset_past(client: AsyncStoreRedis, keys: Keys, offset: int) -> bool:
    stored = (await stored_cursors(client, keys, "telegram")).get("offset")
    return isinstance(stored, int) and stored > offset


async def test_one_node_polls_telegram_and_the_other_takes_over_when_it_is_cut_off(
        redis_server: RedisServer, redis: AsyncStoreRedis, keys: Keys, tmp_path: Path) -> None:
    proxy = CuttableProxy(redis_server.port)
    await proxy.start()
    cut_client = AsyncStoreRedis.from_url(proxy.url, socket_timeout=30)  # hangs, never fails fast
    async with running(FakeTelegram()) as fake:
        first = ReaderNode.on(telegram_adapter(f"{fake.url}/i/a", tmp_path / "a"), cut_client,
                              keys, "node-a", ttl_s=TTL_S)
        second = ReaderNode.on(telegram_adapter(f"{fake.url}/i/b", tmp_path / "b"), redis,
                               keys, "node-b", ttl_s=TTL_S)
        try:
            async with leader_then_standby(first, second):
                await until(lambda: first.record.last_read_at is not None, TIMEOUT)  # primed
                fake.push_message(CHAT, "one", from_id=CHAT)
                await until(lambda: "one" in first.texts(), TIMEOUT)
                await eventually(lambda: offset_past(redis, keys, 1),
                                 what="the leader's offset in Redis")  # its fenced write, stored

                # the standby node sends (a reply goes out from whichever node holds the chat)
                await second.adapter.send(OutboundMessage(provider="telegram", chat_id=str(CHAT),
                                                          content="from the standby node"))
                assert "from the standby node" in fake.sent_texts(CHAT)
                assert fake.polls_by["b"] == 0 and fake.polls_by["a"] > 0

                first_token = first.record.lease_token
                proxy.blackhole()  # node-a can no longer renew its lease
                await until(second.leads, TIMEOUT)
                await until(first.on_standby, TIMEOUT)
                polls_by_first = fake.polls_by["a"]
                second_token = second.record.lease_token
                assert first_token is not None and second_token is not None
                assert second_token > first_token

                fake.push_message(CHAT, "two", from_id=CHAT)
                await until(lambda: "two" in second.texts(), TIMEOUT)
                assert "one" not in second.texts()  # it read on from node-a's stored offset
                assert "two" not in first.texts()
                assert fake.polls_by["a"] == polls_by_first  # node-a stopped polling for good
                assert fake.conflicts == 0  # never two getUpdates at once
        finally:
            await proxy.close()
            await cut_client.aclose()


async def test_a_clean_stop_hands_the_telegram_account_over(
        redis: AsyncStoreRedis, keys: Keys, tmp_path: Path) -> None:
    async with running(FakeTelegram()) as fake:
        first = ReaderNode.on(telegram_adapter(f"{fake.url}/i/a", tmp_path / "a"), redis,
                              keys, "node-a", ttl_s=TTL_S)
        second = ReaderNode.on(telegram_adapter(f"{fake.url}/i/b", tmp_path / "b"), redis,
                               keys, "node-b", ttl_s=TTL_S)
        async with leader_then_standby(first, second):
            await first.stop()  # releases the lease: no waiting for it to expire
            assert await RedisLeases(redis, keys).holder("account:telegram") in (
                None, ("node-b", (first.record.lease_token or 0) + 1))
            await until(second.leads, TIMEOUT)
            fake.push_message(CHAT, "after the handover", from_id=CHAT)
            await until(lambda: "after the handover" in second.texts(), TIMEOUT)
            assert fake.polls_by["b"] > 0 and fake.conflicts == 0


async def test_only_the_discord_leader_opens_a_gateway_session_and_both_send(
        redis: AsyncStoreRedis, keys: Keys, tmp_path: Path) -> None:
    async with unpaced_discord() as fake:
        first = ReaderNode.on(discord_adapter(fake, tmp_path / "a"), redis, keys, "node-a",
                              ttl_s=TTL_S)
        second = ReaderNode.on(discord_adapter(fake, tmp_path / "b"), redis, keys, "node-b",
                               ttl_s=TTL_S)
        channel = fake.channel_ids["general"]
        async with leader_then_standby(first, second):
            assert len(fake.identifies) == 1  # one gateway session for the account

            fake.push_message(channel, "hello", fake.user_ids["alice"])
            await until(lambda: "hello" in first.texts(), TIMEOUT)
            for node in (first, second):  # both send, the standby over REST only
                await node.adapter.send(OutboundMessage(
                    provider="discord", chat_id=str(channel),
                    content=f"from {node.election.owner}"))
            sent = [m.content for m in fake.sent_messages]
            assert "from node-a" in sent and "from node-b" in sent

            await first.stop()
            await until(second.leads, TIMEOUT)
            assert len(fake.identifies) == 2  # the new leader's session, and only it
            cursors = await stored_cursors(redis, keys, "discord")
            assert f"last:{channel}" in cursors  # the baseline and commits are shared
            fake.push_message(channel, "again", fake.user_ids["alice"])
            await until(lambda: "again" in second.texts(), TIMEOUT)
            assert "hello" not in second.texts()

            # nobody reads for a while; the next leader catches up from the shared cursor
            await second.stop()
            fake.world.build_message(fake.world.channels[channel], fake.user_ids["alice"],
                                     "while nobody read")
            third = ReaderNode.on(discord_adapter(fake, tmp_path / "c"), redis, keys,
                                  "node-c", ttl_s=TTL_S)
            try:
                third.start()
                await until(lambda: "while nobody read" in third.texts(), TIMEOUT)
                assert "again" not in third.texts() and "hello" not in third.texts()
            finally:
                await third.stop()


async def test_only_the_slack_leader_opens_socket_mode(
        redis: AsyncStoreRedis, keys: Keys, tmp_path: Path) -> None:
    async with running(FakeSlack()) as fake:
        nodes = [ReaderNode.on(slack_adapter(fake.base_url, tmp_path / name, app_token=APP_TOKEN,
                                             socket_ping_interval_s=0.2),
                               redis, keys, f"node-{name}", ttl_s=TTL_S) for name in "ab"]
        first, second = nodes
        general = "C0GENERAL1"
        async with leader_then_standby(first, second):
            assert fake.connection_count == 1
            assert len(fake.calls("apps.connections.open")) == 1

            fake.post_user_message(general, "to the leader")
            await until(lambda: "to the leader" in first.texts(), TIMEOUT)
            await second.adapter.send(OutboundMessage(provider="slack", chat_id=general,
                                                      content="sent by the standby"))
            assert "sent by the standby" in fake.bot_texts(general)

            await first.stop()
            await until(second.leads, TIMEOUT)
            await until(lambda: fake.connection_count == 1, TIMEOUT)
            fake.post_user_message(general, "to the new leader")
            await until(lambda: "to the new leader" in second.texts(), TIMEOUT)
            assert "to the leader" not in second.texts()


async def test_a_node_that_never_leads_never_reads(
        redis: AsyncStoreRedis, keys: Keys, tmp_path: Path) -> None:
    """Someone else holds the account for the whole test: no poll, no priming, no cursor."""
    holder = await RedisLeases(redis, keys).acquire("account:telegram", "elsewhere", 30.0)
    assert holder is not None
    async with running(FakeTelegram()) as fake:
        node = ReaderNode.on(telegram_adapter(f"{fake.url}/i/b", tmp_path / "b"), redis, keys,
                             "node-b", ttl_s=TTL_S)
        try:
            node.start()
            await until(node.on_standby, TIMEOUT)
            for _ in range(3):  # campaign rounds, each refused: still standby, still silent
                await node.election.step()
                assert not node.election.is_leader
            assert node.on_standby() and fake.polls_by["b"] == 0
            assert len(fake.calls("deleteWebhook")) == 0
            assert await stored_cursors(redis, keys, "telegram") == {}
        finally:
            await node.stop()


async def test_slack_polling_follows_a_thread_the_standby_node_answered_in(
        redis: AsyncStoreRedis, keys: Keys, tmp_path: Path) -> None:
    """Without Socket Mode the poller reads threads the bot answered in; the answer may go
    out from a node that does not poll, which publishes the thread for the poller."""
    async with running(FakeSlack()) as fake:
        general = "C0GENERAL1"
        first, second = (ReaderNode.on(slack_adapter(fake.base_url, tmp_path / name,
                                                      default_channel=general,
                                                      poll_interval_s=0.02),
                                       redis, keys, f"node-{name}", ttl_s=TTL_S)
                         for name in "ab")
        async with leader_then_standby(first, second):
            question = fake.post_user_message(general, "a question")
            await until(lambda: "a question" in first.texts(), TIMEOUT)
            await second.adapter.send(OutboundMessage(provider="slack", chat_id=general,
                                                      content="an answer",
                                                      thread_id=question["ts"]))
            fake.post_user_message(general, "a follow-up", thread_ts=question["ts"])
            await until(lambda: "a follow-up" in first.texts(), TIMEOUT)
            (follow_up,) = [m for m in first.received if m.text == "a follow-up"]
            assert follow_up.platform_data.get("bot_thread")
            assert not second.received
