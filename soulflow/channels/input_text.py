"""What the agent reads for a batch of messages: their text, attachments as local paths.

Attachments are downloaded to `runtime/inbound-files/<provider>/`; only the local path
enters the agent's input, never a remote URL. Overlong input is cut, with a note for the
user.
"""

from __future__ import annotations

import logging
from pathlib import Path

from soulflow.bus.messages import Attachment, InboundMessage
from soulflow.channels.base import ChannelAdapter

log = logging.getLogger(__name__)


async def attachment_line(adapter: ChannelAdapter | None, message: InboundMessage,
                          attachment: Attachment, files_dir: Path) -> str:
    if adapter is None:
        return f"[attachment {attachment.name}: not downloaded, no adapter]"
    try:
        path = await adapter.download(attachment, files_dir / message.provider)
    except Exception as exc:
        log.warning("could not download %s from %s: %s", attachment.name, message.provider, exc)
        return f"[attachment {attachment.name}: could not be downloaded: {exc}]"
    attachment.local_path = str(path)
    return f"[attachment {attachment.name} saved at {path}]"


async def input_text(batch: list[InboundMessage], adapter: ChannelAdapter | None, *,
                     files_dir: Path, max_chars: int, attributed: bool = False) -> str:
    """The messages' text and attachment lines, cut to `max_chars` (noted on the first).

    `attributed` (a folded turn: messages that queued up while the chat's last turn ran):
    one numbered line per message with its sender, in order, so the agent answers them
    together and knows who said what.
    """
    if attributed:
        text = await _attributed(batch, adapter, files_dir)
    else:
        parts = [m.text for m in batch if m.text]
        for message in batch:
            for attachment in message.attachments:
                parts.append(await attachment_line(adapter, message, attachment, files_dir))
        text = "\n".join(parts)
    if len(text) > max_chars:
        batch[0].metadata["truncation_note"] = (
            f"(Your message had {len(text):,} characters; I read the first {max_chars:,}.)")
        text = text[:max_chars]
    return text


async def _attributed(batch: list[InboundMessage], adapter: ChannelAdapter | None,
                      files_dir: Path) -> str:
    lines = [f"({len(batch)} messages arrived while I was busy; answer them together, "
             "in order.)"]
    for number, message in enumerate(batch, 1):
        body = [message.text] if message.text else []
        for attachment in message.attachments:
            body.append(await attachment_line(adapter, message, attachment, files_dir))
        who = message.sender_name or message.sender_id
        lines.append(f"[{number}] {who}: " + "\n".join(body))
    return "\n".join(lines)
