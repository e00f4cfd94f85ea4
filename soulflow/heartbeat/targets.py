"""Where heartbeat and ops notices go: a chat named `provider:chat_id`.

`HEARTBEAT_CHAT` names one explicitly; otherwise the platforms' default chats
(`TELEGRAM_DEFAULT_CHAT_ID`, `SLACK_DEFAULT_CHANNEL`, `DISCORD_DEFAULT_CHANNEL`) are used, in
that order, for the platforms this daemon runs. With none of them, notices go to a local
chat (visible in the dashboard and `soulflow chat --chat-id NAME`), never nowhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_CHAT_SETTINGS", "ChatTarget", "notice_target"]

log = logging.getLogger(__name__)

DEFAULT_CHAT_SETTINGS: tuple[tuple[str, str], ...] = (
    ("telegram", "TELEGRAM_DEFAULT_CHAT_ID"),
    ("slack", "SLACK_DEFAULT_CHANNEL"),
    ("discord", "DISCORD_DEFAULT_CHANNEL"),
)


@dataclass(frozen=True, slots=True)
class ChatTarget:
    """A chat on one channel, optionally a thread in it."""

    provider: str
    chat_id: str
    thread_id: str | None = None

    @classmethod
    def parse(cls, text: str) -> ChatTarget:
        """`provider:chat_id` (a chat id may itself hold `:`); ValueError if malformed."""
        provider, sep, chat_id = text.strip().partition(":")
        if not sep or not provider or not chat_id.strip():
            raise ValueError(f"{text!r} is not a chat: write provider:chat_id, e.g. "
                             "telegram:-1001234567890 or slack:C0123456789")
        return cls(provider.strip().lower(), chat_id.strip())

    @property
    def key(self) -> str:
        return f"{self.provider}:{self.chat_id}"

    def to_chat(self) -> dict[str, Any]:
        return {"provider": self.provider, "chat_id": self.chat_id, "thread_id": self.thread_id}


def notice_target(setting: Callable[[str], Any], channels: Collection[str], *,
                  explicit: str = "", fallback_chat_id: str = "notices") -> ChatTarget:
    """The chat for notices: `explicit` (e.g. HEARTBEAT_CHAT) if it names a running channel,
    else the first platform default chat, else `local:<fallback_chat_id>`."""
    if explicit:
        try:
            target = ChatTarget.parse(explicit)
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
            return ChatTarget(provider, chat_id)
    return ChatTarget("local", fallback_chat_id)
