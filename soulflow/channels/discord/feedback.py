"""Discord's best-effort calls (typing, read-acks) on a REST client of their own.

discord.py's client paces itself per rate-limit bucket and waits out a 429 inside the SDK; a
global 429 pauses every request of that client. If typing and reactions shared the client
that sends replies, a burst of them could hold a reply's connection or pause it globally.
So they run on this second `HTTPClient`: its own small connection pool, its own buckets and
global pause. `ChannelFeedback` bounds every call with a short timeout (which also bounds any
wait discord.py does inside) and cools the chat down when one is rate-limited or times out.
"""

from __future__ import annotations

import asyncio

import aiohttp
import discord.http
from discord.http import handle_message_parameters
from discord.message import convert_emoji_reaction

from soulflow.channels.base import BEST_EFFORT_CONNECTIONS
from soulflow.channels.discord import format as fmt
from soulflow.channels.discord.http import RoutedHTTPClient
from soulflow.contracts import SendError

#: Longest rate-limit wait a feedback call sits out inside discord.py (ChannelFeedback's
#: default call timeout); anything longer comes back as a cool-down.
RATE_LIMIT_PATIENCE_S = 5.0


class DiscordFeedbackClient:
    """Typing and reactions through a dedicated, logged-in `discord.http.HTTPClient`."""

    def __init__(self, api_url: str) -> None:
        self.api_url = api_url
        self._http: discord.http.HTTPClient | None = None

    async def start(self, token: str) -> None:
        http = RoutedHTTPClient(asyncio.get_running_loop(),
                                aiohttp.TCPConnector(limit=BEST_EFFORT_CONNECTIONS),
                                api_url=self.api_url)
        # A 429 asking for more than this is raised (RateLimited: the chat cools down for
        # its retry_after) instead of slept through. The constructor floors the value at
        # 30 s, a reply's patience; feedback's is its call timeout, so it is set here.
        http.max_ratelimit_timeout = RATE_LIMIT_PATIENCE_S
        try:
            await http.static_login(token)
        except BaseException:
            await http.close()
            raise
        self._http = http

    async def stop(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    def _client(self) -> discord.http.HTTPClient:
        if self._http is None:
            raise SendError("Discord is not connected (reconnecting); will retry")
        return self._http

    async def typing(self, chat_id: str) -> None:
        http = self._client()
        if not chat_id.isdigit():
            raise SendError(f"{chat_id[:80]!r} is not a Discord channel id", permanent=True)
        try:
            await http.send_typing(int(chat_id))
        except fmt.SEND_FAILURES as exc:
            raise fmt.send_error(exc) from exc

    async def edit(self, chat_id: str, message_id: str, text: str) -> None:
        """PATCH the bot's own message (mentions disabled, as for every send)."""
        http, target = self._client(), _message(chat_id, message_id)
        try:
            with handle_message_parameters(content=text,
                                           allowed_mentions=fmt.ALLOWED_MENTIONS) as params:
                await http.edit_message(int(chat_id), target, params=params)
        except fmt.SEND_FAILURES as exc:
            raise fmt.send_error(exc) from exc

    async def react(self, chat_id: str, message_id: str, emoji: str) -> None:
        http, target = self._client(), _message(chat_id, message_id)
        try:
            await http.add_reaction(int(chat_id), target, convert_emoji_reaction(emoji))
        except fmt.SEND_FAILURES as exc:
            raise fmt.send_error(exc) from exc


def _message(chat_id: str, message_id: str) -> int:
    """The message id to edit or react to; a permanent SendError when either id is not one."""
    target = fmt.reply_target(message_id)
    if target is None or not chat_id.isdigit():
        raise SendError(f"{chat_id[:40]!r}/{message_id[:40]!r} is not a Discord message",
                        permanent=True)
    return target
