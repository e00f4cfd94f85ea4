"""Where heartbeat and ops notices go: a chat named `provider:chat_id`.

`HEARTBEAT_CHAT` names one explicitly; otherwise the platforms' default chats
(`TELEGRAM_DEFAULT_CHAT_ID`, `SLACK_DEFAULT_CHANNEL`, `DISCORD_DEFAULT_CHANNEL`) are used, in
that order, for the platforms this daemon runs. With none of them, notices go to a local
chat (visible in the dashboard and `soulflow chat --chat-id NAME`), never nowhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

from soulflow.contracts import ChatRef

__all__ = ["DEFAULT_CHAT_SETTINGS", "notice_target", "parse_chat"]

log = logging.getLogger(__name__)

DEFAULT_CHAT_SETTINGS: tuple[tuple[str, str], ...] = (
    ("telegram", "TELEGRAM_DEFAULT_CHAT_ID"),
    ("slack", "SLACK_DEFAULT_CHANNEL"),
    ("discord", "DISCORD_DEFAULT_CHANNEL"),
)


def parse_chat(text: str) -> ChatRef:
    """`provider:chat_id` (a chat id may itself hold `:`); ValueError if malformed."""
    provider, sep, chat_id = text.strip().partition(":")
    if not sep or not provider or not chat_id.strip():
        raise ValueError(f"{text!r} is not a chat: write provider:chat_id, e.g. "
                         "telegram:-1001234567890 or slack:C0123456789")
    return ChatRef(provider.strip().lower(), chat_id.strip())


def notice_target(setting: Callable[[str], Any], channels: Collection[str], *,
                  explicit: str = "", fallback_chat_id: str = "notices") -> ChatRef:
    """The chat for notices: `explicit` (e.g. HEARTBEAT_CHAT) if it names a running channel,
    else the first platform default chat, else `local:<fallback_chat_id>`."""
    if explicit:
        try:
            target = parse_chat(explicit)
        except ValueError as exc:
            log.error("%s; notices go to the default chat instead", exc)
        else:
            if target.provider in channels:
                return target
            log.error("notices should go to %s, but there is no %r channel in this daemon "
                      "(running: %s); using the default chat", target.key, target.provider,
                      ", ".join(sorted(channels)))
    for provider, name in DEFAULT_CHAT_SETTINGS:
        chat_id = str(setting(name) or "").strip()
        if chat_id and provider in channels:
            return ChatRef(provider, chat_id)
    return ChatRef("local", fallback_chat_id)
