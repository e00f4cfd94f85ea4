"""What the agent gets besides a Slack message's text: the sender's display name and, for a
mention inside a thread, the thread's earlier lines. Both are best effort (short timeouts; a
failure leaves them empty) and skipped for primed history and the bot's own messages."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from soulflow.channels.slack.format import THREAD_CONTEXT_LINES, thread_context_lines
from soulflow.channels.slack.inbound import NETWORK_ERRORS
from soulflow.contracts import InboundMessage

log = logging.getLogger(__name__)

_NAME_LOOKUP_S = 3.0
_THREAD_LOOKUP_S = 3.0


class SlackEnricher:
    """Fills in names (`users.info`, cached per user) and thread context (`conversations.replies`)
    of a batch, through the adapter's Web API client."""

    def __init__(self, api: Callable[[], AsyncWebClient]) -> None:
        self._api = api
        self._names: dict[str, str] = {}

    async def fill(self, batch: list[InboundMessage]) -> None:
        await self._fill_names(batch)
        await self._fill_thread_context(batch)

    async def _fill_thread_context(self, batch: list[InboundMessage]) -> None:
        """Earlier messages of a mention's thread for the agent (sealed by the intake like
        the message). Best effort: a failure skips it."""
        for message in batch:
            if message.priming or not (message.thread_id and message.is_mention):
                continue
            try:
                reply = await asyncio.wait_for(self._api().conversations_replies(
                    channel=message.chat_id, ts=message.thread_id, limit=THREAD_CONTEXT_LINES + 1),
                    timeout=_THREAD_LOOKUP_S)
            except Exception as exc:
                log.debug("slack: no thread context for %s: %s", message.key, exc)
                continue
            message.thread_context = tuple(thread_context_lines(
                reply.get("messages") or [], exclude_ts=message.message_id))

    async def _fill_names(self, batch: list[InboundMessage]) -> None:
        """Display names for the agent (`users.info`, cached; a failure leaves it empty)."""
        for message in batch:
            if not message.priming and not message.from_bot and not message.sender_name:
                message.sender_name = await self.user_name(message.sender_id)

    async def user_name(self, user_id: str) -> str:
        if user_id not in self._names:
            name = ""
            try:
                reply = await asyncio.wait_for(self._api().users_info(user=user_id),
                                               _NAME_LOOKUP_S)
                user = reply["user"]
                profile = user.get("profile") or {}
                name = str(profile.get("display_name") or user.get("real_name")
                           or user.get("name") or "")
            except (SlackApiError, *NETWORK_ERRORS, KeyError, TypeError, AttributeError) as exc:
                log.debug("slack: no name for %s (%s)", user_id, exc)
            self._names[user_id] = name
        return self._names[user_id]
