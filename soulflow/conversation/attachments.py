"""Where a file a person sent is saved: that chat's own zone, ``chats/<zone>/files/``.

Attachments are a chat's data (docs/security.md, "Trust zones"): saving them in one folder
per platform let every chat on that platform open them by name, and their paths travelled in
transcripts. Each chat's files now live in its zone, named after the chat (never the thread:
threads of one chat share it), where only runs of that chat may read them.

The zone is also where that chat's runs write, so a link could be planted there
(``files -> ../other-chat/files``, or a file name pointing at ``runtime/``): the bytes are
written through `Beneath`, which refuses a link in any component and renames the new file over
whatever the final name was (a link is replaced, never followed). Names come from the adapter
(``<platform file id or its hash>_<sanitised name>``), so they stay unguessable and two files
called ``report.pdf`` never collide.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from soulflow.contracts import Attachment, InboundMessage
from soulflow.security.resolve import resolve_secret_references
from soulflow.security.syntax import iter_secret_refs
from soulflow.security.vault_records import chat_scope
from soulflow.security.zones import ChatZone, zone_named
from soulflow.storage.beneath import Beneath

if TYPE_CHECKING:
    from soulflow.security.vault import SecretVault

__all__ = ["ChatFiles", "chat_files", "fetchable", "fetchable_off_loop"]


@dataclass(frozen=True, slots=True)
class ChatFiles:
    """The attachment folder of one chat: ``workspace``'s ``chats/<zone>/files/``."""

    workspace: Beneath
    zone: ChatZone

    def rel(self, name: str) -> PurePosixPath:
        """The workspace-relative path a file called ``name`` is saved at (what the model is
        told, and what the file tools and ``exec`` accept)."""
        if not name or name in (".", "..") or PurePosixPath(name).name != name:
            raise ValueError(f"{name!r} is not a plain file name")
        return self.zone.files_rel / name

    async def save(self, name: str, data: bytes) -> PurePosixPath:
        """Write ``data`` as ``name`` (atomically, without following links; an existing file
        of that name, the same platform file, is replaced) and return its relative path.

        Never refused for the chat's disk quota: a person's message must not be lost; the
        bytes count toward the quota from here on."""
        rel = self.rel(name)
        await asyncio.to_thread(self.workspace.write_atomic, rel, data)
        return rel


def chat_files(workspace: Beneath, provider: str, chat_id: str) -> ChatFiles:
    """The attachment folder of the chat ``provider:chat_id``."""
    return ChatFiles(workspace, zone_named(provider, chat_id))


def fetchable(attachment: Attachment, message: InboundMessage,
              vault: SecretVault | None) -> Attachment:
    """``attachment`` with the URL the platform gave, for the download only.

    The inbound sealer seals whatever looks secret in a message before it is journaled, the
    attachment's URL included: a Discord URL holds channel and attachment ids that can read
    as card numbers, a Slack or Discord URL holds the file's name. The download needs the
    real URL, so its references are opened here (in the chat's scope, where they were
    sealed) into a copy that lives only in memory; the message keeps the sealed one.
    """
    url = attachment.url
    if not url or vault is None or next(iter_secret_refs(url), None) is None:
        return attachment
    opened = resolve_secret_references(url, vault,
                                       chat=chat_scope(message.provider, message.chat_id))
    return replace(attachment, url=opened.value) if opened.ok else attachment


async def fetchable_off_loop(attachment: Attachment, message: InboundMessage,
                             vault: SecretVault | None) -> Attachment:
    """`fetchable` for the event loop: a URL that holds a reference is opened where the
    vault's store may wait (`SecretVault.offload`); any other costs nothing."""
    if not attachment.url or vault is None or next(iter_secret_refs(attachment.url),
                                                   None) is None:
        return attachment
    return await vault.offload(fetchable, attachment, message, vault)
