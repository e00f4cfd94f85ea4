"""Adapters and fakes set up the way the channel tests want them, in one place.

Each test file used to spell out the same constructor: a state file, the fake's token and URL,
and the small timeouts that keep a test fast (a short Telegram long poll, no Discord identify
pause, a quick reconnect). A test passes only what it is about (`api_url` through a proxy,
`feedback_timeout_s`, `send_interval_s`...) as keyword overrides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soulflow.channels.discord.adapter import DiscordChannel
from soulflow.channels.slack.adapter import SlackChannel
from soulflow.channels.state import ChannelState
from soulflow.channels.telegram.adapter import TelegramChannel
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.slack_api import BOT_TOKEN
from tests.fakes.telegram_api import DEFAULT_TOKEN

#: Discord pacing switched off (1e5 per second, no route limits): for tests about something else.
DISCORD_UNLIMITED = (100_000, 1.0)


def telegram_adapter(api_url: str, tmp_path: Path, **overrides: Any) -> TelegramChannel:
    """A TelegramChannel on the fake's token whose cursor starts past the fake's update 0,
    with a 1 s long poll and a 50 ms retry delay."""
    state = ChannelState(tmp_path / "telegram.json")
    state.set("offset", 1)
    options: dict[str, Any] = {"poll_timeout_s": 1, "retry_delay_s": 0.05, **overrides}
    return TelegramChannel(token=DEFAULT_TOKEN, state=state, api_url=api_url, **options)


def slack_adapter(api_url: str, tmp_path: Path, **overrides: Any) -> SlackChannel:
    """A SlackChannel with the fake's bot token (add `app_token=` for Socket Mode)."""
    return SlackChannel(bot_token=BOT_TOKEN, state=ChannelState(tmp_path / "slack.json"),
                        api_url=api_url, **overrides)


def discord_adapter(fake: FakeDiscord, tmp_path: Path, **overrides: Any) -> DiscordChannel:
    """A DiscordChannel on the fake (REST and gateway) that skips the identify pause, waits
    50 ms for guilds and reconnects after 50 ms; `api_url=` routes REST elsewhere (a proxy)."""
    options: dict[str, Any] = {
        "api_url": fake.api_url, "gateway_url": fake.gateway_url, "guild_ready_timeout": 0.05,
        "fast_identify": True, "ready_timeout": 5.0, "reconnect_delay_s": 0.05,
        "send_interval_s": 0.0, **overrides}
    return DiscordChannel(token=fake.token, state=ChannelState(tmp_path / "discord.json"),
                          **options)


def unpaced_discord() -> FakeDiscord:
    """A FakeDiscord that enforces no rate limit, with 250 ms heartbeats."""
    return FakeDiscord(heartbeat_interval_ms=250, rate_limit=DISCORD_UNLIMITED, route_limits={},
                       enforce_limits=False)
