"""The fakes enforce each platform's documented send limits, in its real wire format.

Driven by the real SDKs (python-telegram-bot, slack_sdk, discord.py) plus raw HTTP where the
exact bytes on the wire are the point. Limits are on by default; tests that do not care about
pacing relax them per instance.
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
from tests.fakes.rate_limits import TELEGRAM_LIMITS, Limiter, PlatformLimits, Rate
from tests.fakes.slack_api import BOT_TOKEN, FakeSlack
from tests.fakes.telegram_api import DEFAULT_TOKEN, FakeTelegram
from tests.running import running_fixture

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


@pytest.fixture
async def discord_fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord(route_limits={"send_message": (2, 0.5)}) as server:
        with redirect_discord_py(server.api_url, server.gateway_url):
            yield server


async def test_discord_defaults_to_five_per_five_seconds_per_channel() -> None:
    assert FakeDiscord().buckets.route_limits == {"send_message": (5, 5.0)}


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
