"""What the agent reads for a batch of messages: their text, attachments as local paths.

Attachments are downloaded into the zone of the chat they were sent in,
`chats/<zone>/files/` (`soulflow.conversation.attachments`); only that workspace-relative path
enters the agent's input, never a remote URL, and it is the spelling the file tools and
`exec` (whose working directory is the workspace) accept. Overlong input is cut, with a note
for the user.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from soulflow.channels.base import ChannelAdapter
from soulflow.contracts import Attachment, InboundMessage
from soulflow.conversation.attachments import chat_files, fetchable_off_loop
from soulflow.storage.beneath import Beneath

if TYPE_CHECKING:
    from soulflow.security.vault import SecretVault

log = logging.getLogger(__name__)


async def attachment_line(adapter: ChannelAdapter | None, message: InboundMessage,
                          attachment: Attachment, workspace: Beneath,
                          vault: SecretVault | None = None) -> str:
    """The line the agent reads for one attachment, after saving it in the chat's zone
    (``vault``: where the inbound sealer put what it sealed in the attachment's URL)."""
    if adapter is None:
        return f"[attachment {attachment.name}: not downloaded, no adapter]"
    folder = chat_files(workspace, message.provider, message.chat_id)
    try:
        path = await adapter.download(await fetchable_off_loop(attachment, message, vault),
                                      folder)
    except Exception as exc:
        log.warning("could not download %s from %s: %s", attachment.name, message.provider, exc)
        return f"[attachment {attachment.name}: could not be downloaded: {exc}]"
    attachment.local_path = str(path)
    return f"[attachment {attachment.name} saved at {path}]"


@dataclass(frozen=True, slots=True)
class AgentInput:
    """What the agent reads for a batch, and what the person is told when it was cut."""

    text: str
    truncation_note: str = ""


async def input_text(batch: list[InboundMessage], adapter: ChannelAdapter | None, *,
                     workspace: Beneath, max_chars: int, attributed: bool = False,
                     vault: SecretVault | None = None) -> AgentInput:
    """The messages' text and attachment lines, cut to `max_chars` (with a note saying so).

    `attributed` (a folded turn: messages that queued up while the chat's last turn ran):
    one numbered line per message with its sender, in order, so the agent answers them
    together and knows who said what.
    """
    if attributed:
        text = await _attributed(batch, adapter, workspace, vault)
    else:
        parts = [m.text for m in batch if m.text]
        for message in batch:
            for attachment in message.attachments:
                parts.append(await attachment_line(adapter, message, attachment, workspace,
                                                   vault))
        text = "\n".join(parts)
    if len(text) > max_chars:
        return AgentInput(text[:max_chars], f"(Your message had {len(text):,} characters; "
                                            f"I read the first {max_chars:,}.)")
    return AgentInput(text)


async def _attributed(batch: list[InboundMessage], adapter: ChannelAdapter | None,
                      workspace: Beneath, vault: SecretVault | None) -> str:
    lines = [f"({len(batch)} messages arrived while I was busy; answer them together, "
             "in order.)"]
    for number, message in enumerate(batch, 1):
        body = [message.text] if message.text else []
        for attachment in message.attachments:
            body.append(await attachment_line(adapter, message, attachment, workspace, vault))
        who = message.sender_name or message.sender_id
        lines.append(f"[{number}] {who}: " + "\n".join(body))
    return "\n".join(lines)
