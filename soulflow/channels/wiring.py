"""Build the platform adapters that the settings enable (a token set = a channel on)."""

from __future__ import annotations

from pathlib import Path

from soulflow.channels.base import ChannelAdapter
from soulflow.channels.state import ChannelState
from soulflow.config import Settings

PLATFORMS = ("slack", "telegram", "discord")


def build_platform_channels(settings: Settings, runtime_dir: Path) -> list[ChannelAdapter]:
    """Adapters for every platform with a token; SDKs are imported only when used."""
    cursors = runtime_dir / "bus" / "cursors"
    interval = settings.seconds_from_ms("CHANNEL_SEND_INTERVAL_MS")
    max_bytes = int(settings["MAX_DOWNLOAD_MB"]) * 2**20
    adapters: list[ChannelAdapter] = []
    if settings["SLACK_BOT_TOKEN"]:
        from soulflow.channels.slack.adapter import SlackChannel

        adapters.append(SlackChannel(
            bot_token=settings["SLACK_BOT_TOKEN"], app_token=settings["SLACK_APP_TOKEN"] or None,
            api_url=settings["SLACK_API_URL"],
            default_channel=settings["SLACK_DEFAULT_CHANNEL"] or None,
            state=ChannelState(cursors / "slack.json"),
            poll_interval_s=settings.seconds_from_ms("SLACK_POLL_INTERVAL_MS"),
            max_download_bytes=max_bytes, send_interval_s=interval))
    if settings["TELEGRAM_BOT_TOKEN"]:
        from soulflow.channels.telegram.adapter import TelegramChannel

        adapters.append(TelegramChannel(
            token=settings["TELEGRAM_BOT_TOKEN"], api_url=settings["TELEGRAM_API_URL"],
            state=ChannelState(cursors / "telegram.json"),
            poll_timeout_s=int(settings["CHANNEL_POLL_TIMEOUT_S"]),
            max_download_bytes=max_bytes, send_interval_s=interval))
    if settings["DISCORD_BOT_TOKEN"]:
        from soulflow.channels.discord.adapter import DiscordChannel

        adapters.append(DiscordChannel(
            token=settings["DISCORD_BOT_TOKEN"], api_url=settings["DISCORD_API_URL"],
            gateway_url=settings["DISCORD_GATEWAY_URL"] or None,
            state=ChannelState(cursors / "discord.json"),
            max_download_bytes=max_bytes, send_interval_s=interval))
    return adapters
