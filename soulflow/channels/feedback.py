"""Signals that a message was seen and is being worked on: read-ack and typing.

Typing indicators expire on every platform after a few seconds, so they are re-sent while
a run is active; both are cosmetic and never fail the reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from soulflow.channels.base import ChannelAdapter

log = logging.getLogger(__name__)

TYPING_REFRESH_S = 4.0
READ_ACK_EMOJI = {"slack": "eyes", "telegram": "👀", "discord": "👀"}


async def acknowledge(adapter: ChannelAdapter, chat_id: str, message_id: str) -> None:
    """React to a message to show it was read (platforms that have reactions)."""
    emoji = READ_ACK_EMOJI.get(adapter.name)
    if emoji is None:
        return
    try:
        await adapter.add_reaction(chat_id, message_id, emoji)
    except Exception as exc:
        log.debug("read-ack on %s failed: %s", adapter.name, exc)


async def _keep_typing(adapter: ChannelAdapter, chat_id: str, interval: float) -> None:
    while True:
        try:
            await adapter.set_typing(chat_id, True)
        except Exception as exc:
            log.debug("typing on %s failed: %s", adapter.name, exc)
        await asyncio.sleep(interval)


@contextlib.asynccontextmanager
async def typing_while(adapter: ChannelAdapter | None, chat_id: str,
                       interval: float = TYPING_REFRESH_S) -> AsyncIterator[None]:
    """Show a typing indicator for the duration of the block."""
    if adapter is None:
        yield
        return
    task = asyncio.create_task(_keep_typing(adapter, chat_id, interval),
                               name=f"typing:{adapter.name}:{chat_id}")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(Exception):
            await adapter.set_typing(chat_id, False)
