"""The fakes enforce each platform's documented limits, in its real wire format: sends per chat,
Telegram's groups (20 a minute) and edits (paced as messages of their chat), Slack's method
tiers (conversations.history / .replies at Tier 3, one a minute and 15 a page for a new app
outside the Marketplace), Discord's edit bucket.

Driven by the real SDKs (python-telegram-bot, slack_sdk, discord.py) plus raw HTTP where the
exact bytes on the wire are the point. Limits are on by default; tests that do not care about
pacing relax them per instance, and tests that need one on their own time scale say so.
"""

from __future__ import annotations

import asyncio
import datetime as dtm
from collections.abc import AsyncIterator

import discord
import discord.http
import httpx
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from telegram import Bot
from telegram.error import RetryAfter

from tests.fakes.discord_api import FakeDiscord, redirect_discord_py
from tests.fakes.rate_limits import (
    SLACK_LIMITS,
    SLACK_NON_MARKETPLACE_LIMITS,
    TELEGRAM_LIMITS,
    Limiter,
    PlatformLimits,
    Rate,
    Window,
)
from tests.fakes.slack_api import BOT_TOKEN, FakeSlack
from tests.fakes.telegram_api import DEFAULT_TOKEN, FakeTelegram
from tests.running import running, running_fixture

CHAT = 4242


telegram = running_fixture(FakeTelegram)


def tg_bot(fake: FakeTelegram) -> Bot:
    return Bot(DEFAULT_TOKEN, base_url=fake.base_url, base_file_url=fake.base_file_url)


async def test_telegram_paces_one_chat_and_answers_429_in_bot_api_format(
    telegram: FakeTelegram,
) -> None:
    telegram.add_chat(CHAT)
    telegram.add_chat(CHAT + 1)
    async with tg_bot(telegram) as bot:
        for index in range(3):  # the tolerated short burst
            await bot.send_message(CHAT, f"burst {index}")
        with pytest.raises(RetryAfter) as caught:
            await bot.send_message(CHAT, "one too many")
        assert caught.value.retry_after in (1, dtm.timedelta(seconds=1))
        await bot.send_message(CHAT + 1, "another chat has its own budget")
        await bot.send_chat_action(CHAT, "typing")
    async with httpx.AsyncClient(base_url=f"{telegram.base_url}{DEFAULT_TOKEN}") as raw:
        response = await raw.post("/sendMessage", data={"chat_id": str(CHAT), "text": "again"})
    assert response.status_code == 429
    assert response.json() == {"ok": False, "error_code": 429,
                               "description": "Too Many Requests: retry after 1",
                               "parameters": {"retry_after": 1}}
    assert telegram.stats() == {"replies": 4, "rate_limited": {"sendMessage": 2},
                                "best_effort": {"sendChatAction": 1}, "conflicts": 0}
    assert telegram.sent_texts(CHAT) == ["burst 0", "burst 1", "burst 2"]


async def test_telegram_bot_wide_budget_spans_chats(telegram: FakeTelegram) -> None:
    # a slow refill keeps the 31st send over budget however slow this machine is
    telegram.set_limits(PlatformLimits(per_chat=None, per_bot=Rate(0.01, burst=30)))
    async with httpx.AsyncClient(base_url=f"{telegram.base_url}{DEFAULT_TOKEN}") as raw:
        statuses = []
        for chat in range(1, 32):
            telegram.add_chat(chat)
            response = await raw.post("/sendMessage", data={"chat_id": str(chat), "text": "hi"})
            statuses.append(response.status_code)
    assert statuses[:30] == [200] * 30 and statuses[30] == 429


def test_the_default_telegram_limits_refill_one_per_second_per_chat_and_30_per_bot() -> None:
    now = [0.0]
    limiter = Limiter(TELEGRAM_LIMITS, clock=lambda: now[0])
    assert [limiter.admit("a") for _ in range(4)] == [0.0, 0.0, 0.0, 1.0]
    now[0] = 1.0
    assert limiter.admit("a") == 0.0 and limiter.admit("a") > 0
    admitted = sum(limiter.admit(f"chat{i}") == 0.0 for i in range(40))
    assert admitted == 29  # the bot-wide bucket refilled to 30 at t=1, then "a" spent one


def test_the_default_telegram_limits_hold_a_group_to_20_a_minute() -> None:
    now = [0.0]
    limiter = Limiter(TELEGRAM_LIMITS, clock=lambda: now[0])
    accepted = []
    while now[0] < 60.0:  # a group offered a send every half second, a private chat one a second
        if limiter.admit("-100", group=True) == 0.0:
            accepted.append(now[0])
        if now[0] == int(now[0]):
            assert limiter.admit("7") == 0.0  # 1/s holds a private chat, not 20 a minute
        now[0] += 0.5
    assert len(accepted) == 20  # the per-second budget is not the group's limit
    now[0] = accepted[0] + 60.0  # the first send leaves the minute: one more fits
    assert limiter.admit("-100", group=True) == 0.0
    assert limiter.admit("-100", group=True) > 0


async def test_telegram_paces_a_group_per_minute_and_edits_as_its_messages() -> None:
    # the group's limit on this test's time scale: two messages a minute
    limits = PlatformLimits(per_chat=None, per_group=Window(2, 60.0))
    async with running(FakeTelegram(limits=limits)) as fake:
        fake.add_chat(-1001234, "supergroup", title="team")
        fake.add_chat(CHAT)
        async with tg_bot(fake) as bot:
            first = await bot.send_message(-1001234, "one")
            await bot.send_message(-1001234, "two")
            with pytest.raises(RetryAfter) as caught:
                await bot.edit_message_text("one, edited", chat_id=-1001234,
                                            message_id=first.message_id)
            assert caught.value.retry_after in (60, dtm.timedelta(seconds=60))
            with pytest.raises(RetryAfter):
                await bot.send_message(-1001234, "three")
            for index in range(5):  # a private chat is not a group
                sent = await bot.send_message(CHAT, f"private {index}")
            await bot.edit_message_text("edited", chat_id=CHAT, message_id=sent.message_id)
        assert fake.sent_texts(-1001234) == ["one", "two"]
        assert fake.stats()["rate_limited"] == {"editMessageText": 1, "sendMessage": 1}


async def test_telegram_edits_share_a_private_chats_budget(telegram: FakeTelegram) -> None:
    telegram.add_chat(CHAT)
    async with tg_bot(telegram) as bot:
        sent = [await bot.send_message(CHAT, f"burst {index}") for index in range(3)]
        with pytest.raises(RetryAfter):
            await bot.edit_message_text("too soon", chat_id=CHAT,
                                        message_id=sent[0].message_id)
    [refused] = [r for r in telegram.requests if r.status == 429]
    assert refused.method == "editMessageText" and refused.retry_after == 1
    assert telegram.sent_texts(CHAT) == ["burst 0", "burst 1", "burst 2"]


async def test_telegram_limits_relax_per_instance() -> None:
    fake = FakeTelegram(limits=TELEGRAM_LIMITS.relaxed())
    await fake.start()
    try:
        fake.add_chat(CHAT)
        async with tg_bot(fake) as bot:
            for index in range(10):
                await bot.send_message(CHAT, f"fast {index}")
        assert fake.stats()["replies"] == 10 and fake.stats()["rate_limited"] == {}
    finally:
        await fake.stop()


async def test_slack_paces_chat_post_message_per_channel() -> None:
    fake = FakeSlack()
    await fake.start()
    try:
        client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.base_url)
        posted = [await client.chat_postMessage(channel="C0GENERAL1", text=f"n{i}")
                  for i in range(3)]
        with pytest.raises(SlackApiError) as caught:
            await client.chat_postMessage(channel="C0GENERAL1", text="one too many")
        response = caught.value.response
        assert response.status_code == 429 and response["error"] == "ratelimited"
        assert int(response.headers["Retry-After"]) >= 1
        await client.reactions_add(channel="C0GENERAL1", name="eyes", timestamp=posted[0]["ts"])
        assert fake.stats() == {"replies": 3, "rate_limited": {"chat.postMessage": 1},
                                "best_effort": {"reactions.add": 1}}
    finally:
        await fake.stop()


async def test_slack_reads_are_limited_per_method_at_tier_3() -> None:
    """conversations.history and conversations.replies are Tier 3: 50 a minute each (per
    workspace, whatever the channel), answered 429 `ratelimited` with Retry-After."""
    async with running(FakeSlack()) as fake:
        assert fake.limits == SLACK_LIMITS
        client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.base_url)
        parent = await client.chat_postMessage(channel="C0GENERAL1", text="a thread")
        for _ in range(50):
            await client.conversations_history(channel="C0GENERAL1", limit=10)
        with pytest.raises(SlackApiError) as caught:
            await client.conversations_history(channel="C0RANDOM01", limit=10)
        response = caught.value.response
        assert response.status_code == 429 and response["error"] == "ratelimited"
        # the wait until the first read leaves its minute, in whole seconds
        reads = fake.calls("conversations.history")
        assert reads[-1].status == 429
        until = reads[0].time + 60 - reads[-1].time
        assert until <= int(response.headers["Retry-After"]) <= until + 1
        # another method has its own budget
        await client.conversations_replies(channel="C0GENERAL1", ts=parent["ts"])
        assert fake.stats()["rate_limited"] == {"conversations.history": 1}


async def test_slack_reads_of_a_new_non_marketplace_app() -> None:
    """One history read a minute, and at most 15 messages a page (the default too)."""
    async with running(FakeSlack(limits=SLACK_NON_MARKETPLACE_LIMITS)) as fake:
        for index in range(20):
            fake.post_user_message("C0GENERAL1", f"m{index}", "U0HUMAN001")
        client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.base_url)
        page = await client.conversations_history(channel="C0GENERAL1", limit=200)
        assert len(page["messages"]) == 15 and page["has_more"]
        assert page["response_metadata"]["next_cursor"]
        with pytest.raises(SlackApiError) as caught:
            await client.conversations_history(channel="C0GENERAL1", limit=200)
        assert caught.value.response.status_code == 429
        first, refused = fake.calls("conversations.history")
        until = first.time + 60 - refused.time
        assert until <= int(caught.value.response.headers["Retry-After"]) <= until + 1


async def test_slack_chat_update_is_paced_by_its_tier() -> None:
    # Tier 3 on this test's time scale: two edits a minute
    limits = PlatformLimits(per_chat=None, per_method={"chat.update": Window(2, 60.0)})
    async with running(FakeSlack(limits=limits)) as fake:
        client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.base_url)
        posted = await client.chat_postMessage(channel="C0GENERAL1", text="status 0")
        for index in (1, 2):
            await client.chat_update(channel="C0GENERAL1", ts=posted["ts"], text=f"status {index}")
        with pytest.raises(SlackApiError) as caught:
            await client.chat_update(channel="C0GENERAL1", ts=posted["ts"], text="status 3")
        assert caught.value.response.status_code == 429
        assert fake.bot_texts("C0GENERAL1") == ["status 2"]
        assert fake.stats() == {"replies": 1, "rate_limited": {"chat.update": 1},
                                "best_effort": {"chat.update": 3}}


@pytest.fixture
async def discord_fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord(route_limits={"send_message": (2, 0.5)}) as server:
        with redirect_discord_py(server.api_url, server.gateway_url):
            yield server


async def test_discord_defaults_to_five_per_five_seconds_per_channel() -> None:
    assert FakeDiscord().buckets.route_limits == {"send_message": (5, 5.0),
                                                  "edit_message": (5, 5.0)}


async def test_discord_py_paces_itself_from_the_rate_limit_headers(
    discord_fake: FakeDiscord,
) -> None:
    client = discord.Client(intents=discord.Intents.none())
    await client.login(discord_fake.token)
    try:
        channel = discord_fake.channel_ids["general"]
        loop = asyncio.get_running_loop()
        started = loop.time()
        for index in range(3):
            params = discord.http.handle_message_parameters(content=f"m{index}")
            await client.http.send_message(channel, params=params)
        assert loop.time() - started >= 0.3  # waited for the window, without being told off
    finally:
        await client.close()
    sends = [r for r in discord_fake.requests if r.name == "send_message"]
    assert [r.status for r in sends] == [200, 200, 200]
    assert discord_fake.stats()["replies"] == 3 and discord_fake.stats()["rate_limited"] == {}


async def test_discord_429_has_the_real_shape(discord_fake: FakeDiscord) -> None:
    channel = discord_fake.channel_ids["general"]
    headers = {"Authorization": f"Bot {discord_fake.token}"}
    async with httpx.AsyncClient(base_url=discord_fake.api_url, headers=headers) as raw:
        statuses = [(await raw.post(f"/channels/{channel}/messages", json={"content": "x"}))
                    for _ in range(3)]
        await raw.post(f"/channels/{channel}/typing")
    assert [r.status_code for r in statuses] == [200, 200, 429]
    limited = statuses[2]
    body = limited.json()
    assert body["message"] and body["global"] is False and 0 < body["retry_after"] <= 0.5
    assert limited.headers["Retry-After"] == "1"
    assert limited.headers["X-RateLimit-Remaining"] == "0"
    assert statuses[1].headers["X-RateLimit-Limit"] == "2"
    assert discord_fake.stats() == {"replies": 2, "rate_limited": {"send_message": 1},
                                    "best_effort": {"typing": 1}}


async def test_discord_edits_have_a_bucket_of_their_own() -> None:
    """PATCH /channels/{id}/messages/{id}: five per five seconds per channel, announced in the
    X-RateLimit-* headers under a bucket other than the send route's; the sixth edit is
    answered 429 with Discord's JSON body."""
    async with FakeDiscord() as fake:
        channel = fake.channel_ids["general"]
        headers = {"Authorization": f"Bot {fake.token}"}
        async with httpx.AsyncClient(base_url=fake.api_url, headers=headers) as raw:
            sent = await raw.post(f"/channels/{channel}/messages", json={"content": "0"})
            message = sent.json()["id"]
            edits = [await raw.patch(f"/channels/{channel}/messages/{message}",
                                     json={"content": f"edit {n}"}) for n in range(6)]
            other = await raw.post(f"/channels/{channel}/messages", json={"content": "1"})
    assert [r.status_code for r in edits] == [200] * 5 + [429]
    assert edits[0].headers["X-RateLimit-Limit"] == "5"
    assert [r.headers["X-RateLimit-Remaining"] for r in edits[:5]] == ["4", "3", "2", "1", "0"]
    assert edits[0].headers["X-RateLimit-Bucket"] != sent.headers["X-RateLimit-Bucket"]
    body = edits[5].json()
    assert body["global"] is False and 0 < body["retry_after"] <= 5.0
    assert edits[5].headers["X-RateLimit-Scope"] == "user"
    assert other.status_code == 200  # sends are not held up by the edits' bucket
    assert fake.stats()["rate_limited"] == {"edit_message": 1}


async def test_discord_py_waits_out_the_edit_bucket() -> None:
    async with FakeDiscord(route_limits={"edit_message": (2, 0.5)}) as fake:
        with redirect_discord_py(fake.api_url, fake.gateway_url):
            client = discord.Client(intents=discord.Intents.none())
            await client.login(fake.token)
            try:
                channel = fake.channel_ids["general"]
                params = discord.http.handle_message_parameters(content="status 0")
                message = await client.http.send_message(channel, params=params)
                for index in range(1, 5):
                    params = discord.http.handle_message_parameters(content=f"status {index}")
                    await client.http.edit_message(channel, int(message["id"]), params=params)
            finally:
                await client.close()
    edits = [r for r in fake.requests if r.name == "edit_message"]
    assert [r.status for r in edits] == [200, 200, 200, 200]  # paced from the headers, no 429
    assert fake.edits[-1].message["content"] == "status 4"
