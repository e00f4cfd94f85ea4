"""The local channel: the operator's own chat, from `soulflow chat` and the dashboard.

It uses the same adapter interface as the platforms. Its "platform" is a transcript per chat
(`runtime/local/<chat>.jsonl`) that clients read and wait on, so a reply sent while no client
is connected is still there when one connects. Sends are idempotent on the outbox message id,
which makes redelivery after a crash exactly-once from the reader's point of view.

A reply that edits one already sent (a streamed reply growing, `ReplyOptions.edit_of`) is a
record of its own that names the message it replaces (`edits`); readers fold it into that
message (edits.py), so the transcript stays append-only and a crash never half-rewrites it.

On a shared backend (Redis, several nodes) the local chat of a node is that node's conversation
with its operator: the channel is given the node id and names its chats `<chat>@<node id>` for
the rest of the daemon (the transcript stays `<chat>.jsonl`). The backend keeps such a chat in
the node's private partition (backends/redis/keys.py), so it is run and answered by this node
only, and its session and runs are this node's own.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soulflow.channels.base import ChannelAdapter, ChannelError, ChannelLimits
from soulflow.contracts import InboundMessage, OutboundMessage, SendError, SendResult, new_id
from soulflow.storage.jsonl import JsonlFile

log = logging.getLogger(__name__)

CHAT_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
OPERATOR_ID = "operator"
# entries of a transcript kept in RAM: a client that keeps up reads from here, one further
# behind from the file; 1,000 filled 20 busy chats' caches over half an hour of the soak
_RECENT = 200
_OPEN_TRANSCRIPTS = 64  # chats whose transcript (open file, last _RECENT entries) stays loaded
_PERMANENT_OS_ERRORS = (PermissionError, IsADirectoryError, NotADirectoryError)
# edit targets looked up in a transcript's file (older than its recent entries), remembered
# so a stream that outlived the recent window reads the file once, not once per edit
_TARGETS_KEPT = 32


class InvalidChatId(ChannelError, ValueError):
    """A local chat id that is not one (also a `ValueError`, like `ForeignLocalChat`: the
    transcript writer catches a chat id it cannot use that way)."""

    def __init__(self, chat_id: str) -> None:
        super().__init__(f"chat id {chat_id[:80]!r} is invalid: use 1-64 letters, digits, "
                         "'.', '_' or '-'")


class ForeignLocalChat(ChannelError, ValueError):
    """A reply for another node's local chat: only that node can show it."""

    def __init__(self, chat_id: str, node_id: str) -> None:
        super().__init__(f"local chat {chat_id[:200]!r} belongs to another node, not to "
                         f"{node_id!r}")


@dataclass
class _Transcript:
    file: JsonlFile
    recent: deque[dict[str, Any]]
    next_seq: int
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    recent_ids: set[str] = field(default_factory=set)
    waiters: int = 0  # long polls waiting on `changed`: the transcript stays loaded
    # id -> (role, the message it edits or "") of edit targets found in the file
    targets: OrderedDict[str, tuple[str, str]] = field(default_factory=OrderedDict)

    def remember(self, record: dict[str, Any]) -> None:
        if len(self.recent) == self.recent.maxlen:
            self.recent_ids.discard(self.recent[0].get("id"))
        self.recent.append(record)
        self.recent_ids.add(record.get("id"))


class LocalChannel(ChannelAdapter):
    name = "local"
    can_stream = True  # send() records an edit of `options.edit_of` (edits.py)
    confirms_final_text = True  # a reply is whole at its first record that is not partial

    def __init__(self, directory: Path, *, send_interval_s: float = 0.0,
                 on_event: Callable[[str, dict[str, Any]], None] | None = None,
                 node_id: str | None = None) -> None:
        self.directory = directory
        self.node_id = node_id  # set on a shared backend: chats are `<chat>@<node id>`
        self.limits = ChannelLimits(max_text=1_000_000, chunk_size=1_000_000,
                                    file_fallback_threshold=10_000_000,
                                    send_interval_s=send_interval_s)
        self._on_event = on_event or (lambda kind, data: None)
        self._incoming: asyncio.Queue[tuple[InboundMessage, asyncio.Future[None]]] = (
            asyncio.Queue())
        self._waiting: dict[str, asyncio.Future[None]] = {}
        self._transcripts: dict[str, _Transcript] = {}

    # -- chat ids --------------------------------------------------------------------------

    def platform_chat_id(self, chat_id: str) -> str:
        """The id the daemon knows the transcript `chat_id` by (its sessions, runs, replies)."""
        return f"{chat_id}@{self.node_id}" if self.node_id else chat_id

    def transcript_id(self, platform_chat_id: str) -> str:
        """The transcript of a chat the daemon names; ForeignLocalChat for another node's (an
        id without a node, e.g. a cron job's `local:ops`, is this node's transcript)."""
        chat_id, at, node = platform_chat_id.partition("@")
        if at and node != self.node_id:
            raise ForeignLocalChat(platform_chat_id, self.node_id or "")
        return chat_id

    # -- transcripts ---------------------------------------------------------------------

    def _transcript(self, chat_id: str) -> _Transcript:
        """The chat's transcript, loaded on first use; the least recently used idle ones are
        closed past _OPEN_TRANSCRIPTS, so the chat ids a client invents cost no memory or
        descriptor once it moves on (a closed one is read back from its file)."""
        if not CHAT_ID_PATTERN.match(chat_id):
            raise InvalidChatId(chat_id)
        transcript = self._transcripts.pop(chat_id, None)  # back in last: most recent
        if transcript is None:
            file = JsonlFile(self.directory / f"{chat_id}.jsonl")
            try:
                recent = deque(file.tail(_RECENT), maxlen=_RECENT)
            except OSError as exc:  # sends will fail and say why; reading must not
                log.warning("local chat %s: cannot read its transcript (%s)", chat_id, exc)
                recent = deque(maxlen=_RECENT)
            next_seq = int(recent[-1].get("seq", len(recent) - 1)) + 1 if recent else 0
            transcript = _Transcript(file, recent, next_seq,
                                     recent_ids={r.get("id") for r in recent})
        self._transcripts[chat_id] = transcript
        while len(self._transcripts) > _OPEN_TRANSCRIPTS:
            idle = next((cid for cid, t in self._transcripts.items() if not t.waiters), None)
            if idle is None or idle == chat_id:
                break
            self._transcripts.pop(idle).file.close()
        return transcript

    async def _append(self, chat_id: str, entry: dict[str, Any]) -> dict[str, Any]:
        transcript = self._transcript(chat_id)
        record = {"seq": transcript.next_seq, "at": time.time(), **entry}
        transcript.file.append(record)
        transcript.next_seq += 1
        transcript.remember(record)
        async with transcript.changed:
            transcript.changed.notify_all()
        self._on_event("local.message", {"chat_id": chat_id, **record})
        return record

    def messages(self, chat_id: str, after: int = -1, limit: int = 200) -> list[dict[str, Any]]:
        """Transcript entries with `seq > after` (recent ones from memory, older from disk)."""
        transcript = self._transcript(chat_id)
        if transcript.recent and transcript.recent[0]["seq"] <= after + 1:
            found = [r for r in transcript.recent if r["seq"] > after]
        else:
            found = [r for r in transcript.file.iter_records() if r.get("seq", -1) > after]
        return found[:limit]

    async def wait_messages(self, chat_id: str, after: int, timeout: float) -> list[dict[str, Any]]:
        """Long poll: return entries newer than `after`, waiting up to `timeout` for one."""
        transcript = self._transcript(chat_id)
        transcript.waiters += 1
        try:
            async with transcript.changed:
                try:
                    await asyncio.wait_for(transcript.changed.wait_for(
                        lambda: transcript.next_seq - 1 > after), timeout)
                except TimeoutError:
                    return []
        finally:
            transcript.waiters -= 1
        return self.messages(chat_id, after)

    # -- inbound -------------------------------------------------------------------------

    async def submit(self, chat_id: str, text: str, *, sender_name: str = "operator") -> str:
        """Hand a message to the daemon; returns once it is journaled (its id)."""
        self._transcript(chat_id)  # validates the chat id before anything is queued
        message = InboundMessage(provider=self.name, chat_id=self.platform_chat_id(chat_id),
                                 message_id=new_id("in"), sender_id=OPERATOR_ID,
                                 sender_name=sender_name, text=text, is_direct=True)
        journaled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[message.message_id] = journaled
        await self._incoming.put((message, journaled))
        await journaled
        return message.message_id

    async def read(self) -> list[InboundMessage]:
        try:
            first = await asyncio.wait_for(self._incoming.get(), timeout=1.0)
        except TimeoutError:
            return []
        batch = [first[0]]
        while not self._incoming.empty():
            batch.append(self._incoming.get_nowait()[0])
        return batch

    def commit(self, messages: list[InboundMessage]) -> None:
        for message in messages:
            asyncio.get_running_loop().create_task(self._record_user_message(message))

    async def _record_user_message(self, message: InboundMessage) -> None:
        """Show the user's message in the transcript (the journal already holds it)."""
        try:
            await self._append(self.transcript_id(message.chat_id), {
                "id": message.message_id, "role": "user", "content": message.text})
        except (OSError, ValueError) as exc:
            log.warning("local chat %s: cannot write its transcript (%s)", message.chat_id, exc)
        finally:
            future = self._waiting.pop(message.message_id, None)
            if future is not None and not future.done():
                future.set_result(None)

    # -- outbound ------------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> SendResult:
        try:
            chat_id = self.transcript_id(message.chat_id)
            transcript = self._transcript(chat_id)
        except (InvalidChatId, ForeignLocalChat) as exc:
            raise SendError(str(exc), permanent=True) from None
        edit_of = message.options.edit_of
        # the platform id of a local message is its own id; an edit keeps the one it edits
        platform_id = edit_of or message.message_id
        if message.message_id in transcript.recent_ids:
            return SendResult(platform_message_ids=[platform_id])  # already delivered
        entry: dict[str, Any] = {"id": message.message_id, "role": "assistant",
                                 "content": message.content}
        if edit_of:
            entry["edits"] = self._edit_target(chat_id, transcript, edit_of)
        entry["reply_to"] = message.reply_to
        if message.options.partial:  # a stream's in-between text: the whole reply follows
            entry["partial"] = True
        try:
            await self._append(chat_id, entry)
        except _PERMANENT_OS_ERRORS as exc:
            raise SendError(f"cannot write the local transcript: {exc}", permanent=True) from None
        except OSError as exc:
            raise SendError(f"cannot write the local transcript: {exc}") from None
        return SendResult(platform_message_ids=[platform_id])

    def _edit_target(self, chat_id: str, transcript: _Transcript, edit_of: str) -> str:
        """The id an edit of `edit_of` names: the message itself, or the one it edits when it
        is an edit record (edits stay one level deep, so readers fold them in one pass).

        Looked up in the recent entries, then (rarely: a stream that outlived the last
        _RECENT entries) in the file, remembered. A target that is not an assistant entry
        of this chat is named all the same and logged: readers show such an edit as a
        message of its own and never rewrite a user's words with it (edits.py)."""
        found = next(((str(r.get("role")), str(r.get("edits") or ""))
                      for r in reversed(transcript.recent) if r.get("id") == edit_of), None)
        if found is None or found[0] != "assistant":
            known = transcript.targets.get(edit_of)
            if known is not None:
                return known[1] if known[0] == "assistant" and known[1] else edit_of
            if found is None:
                try:
                    found = next(((str(r.get("role")), str(r.get("edits") or ""))
                                  for r in transcript.file.iter_records()
                                  if r.get("id") == edit_of), ("", ""))
                except OSError:  # the append that follows fails and says why
                    return edit_of
            transcript.targets[edit_of] = found
            while len(transcript.targets) > _TARGETS_KEPT:
                transcript.targets.popitem(last=False)
            if found[0] != "assistant":  # once per target, not once per edit
                log.warning("local chat %s: an edit names %s, which is no reply of this "
                            "chat; it is shown as a message of its own", chat_id,
                            edit_of[:80])
        role, edits = found
        return edits if role == "assistant" and edits else edit_of
