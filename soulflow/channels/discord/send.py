"""Sending one reply to Discord as its rendered parts, in order, resuming after a failure.

A long reply goes out as several messages. When one part fails (a 429 beyond discord.py's
own wait, a dropped connection) the dispatcher retries the whole reply later; the parts that
were already delivered are remembered per outbound message id, so the retry sends only the
rest instead of repeating the start.
"""

from __future__ import annotations

from collections import OrderedDict

import discord
import discord.abc

from soulflow.bus.messages import OutboundMessage, SendError
from soulflow.channels.base import ChannelLimits
from soulflow.channels.discord import format as fmt
from soulflow.channels.splitting import RenderedPart, render_reply

_REMEMBERED = 1000  # replies with delivered parts kept for their retry


def reply_parts(message: OutboundMessage, limits: ChannelLimits) -> list[RenderedPart]:
    """Rendered parts; a dispatcher that already chose a file says so in the metadata."""
    meta = message.metadata
    if meta.get("as_file"):
        return [RenderedPart(text=message.content, as_file=True,
                             filename=str(meta.get("filename") or "reply.txt"),
                             note=str(meta.get("note") or ""))]
    return render_reply(message.content, limits)


class ResumableSends:
    """The parts already delivered of replies whose send failed midway (bounded)."""

    def __init__(self, remembered: int = _REMEMBERED) -> None:
        self._delivered: OrderedDict[str, list[str]] = OrderedDict()
        self._remembered = remembered

    async def send(self, channel: discord.abc.Messageable, message: OutboundMessage,
                   limits: ChannelLimits) -> list[str]:
        """Send the parts not delivered yet; the ids of every part, in order."""
        parts = reply_parts(message, limits)
        delivered = self._delivered.pop(message.message_id, [])
        target = fmt.reply_target(message.reply_to)
        try:
            for part in parts[len(delivered):]:
                reference = None
                if target is not None and not delivered:
                    reference = discord.MessageReference(
                        message_id=target, channel_id=channel.id,
                        fail_if_not_exists=False)
                sent = await fmt.send_part(channel, part, reference)
                delivered.append(str(sent.id))
        except SendError:
            if delivered:
                self._delivered[message.message_id] = delivered
                while len(self._delivered) > self._remembered:
                    self._delivered.popitem(last=False)
            raise
        return delivered
