"""The adapter interface every channel implements: local, Slack, Telegram, Discord.

The conversation (soulflow/conversation/) and the outbound bus only ever talk to this
interface, so neither they nor the agent know which platform a message came from.
"""

from __future__ import annotations

import abc
import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Protocol, TypeVar

from soulflow.bus.pacing import SendBudget
from soulflow.channels.leadership import AccountLeadership, Election
from soulflow.contracts import (
    Attachment,
    InboundMessage,
    OutboundMessage,
    SendError,
    SendResult,
)
from soulflow.errors import SoulFlowError

if TYPE_CHECKING:
    from soulflow.backends.base import CursorStore
    from soulflow.channels.state import ChannelState

#: Connections each platform client keeps for best-effort calls (typing, read-acks), apart
#: from the pool replies use, so feedback can never take a connection a reply needs.
#: `ChannelFeedback` runs at most this many best-effort calls per adapter at once.
BEST_EFFORT_CONNECTIONS = 4

_COMMAND = re.compile(r"^\s*/([\w가-힣]+)(?:@\S+)?(?:\s+(.*))?$", re.DOTALL)


T = TypeVar("T")


class ChannelError(SoulFlowError):
    """The base of the platform edge's own errors: a channel that cannot start (each
    platform's `...StartError`), a read loop to be restarted (`reader.ChannelRestart`), a
    local chat id that names no chat of this node. A message a platform would not take is a
    `SendError` (`soulflow.contracts`): the bus, below the channels, catches that one."""


async def drain(queue: asyncio.Queue[T], wait_s: float) -> list[T]:
    """What a push connection queued: wait up to `wait_s` for the first item, then take
    everything already there (one batch, so a burst is journaled and committed together)."""
    try:
        first = await asyncio.wait_for(queue.get(), wait_s)
    except TimeoutError:
        return []
    batch = [first]
    while not queue.empty():
        batch.append(queue.get_nowait())
    return batch

@dataclass(frozen=True, slots=True)
class ChannelLimits:
    """What a platform accepts: a reply is split by these once, before it is stored
    (splitting.py), and the dispatcher paces sends by `send_interval_s`."""

    max_text: int = 4000  # the longest message, as `measure` counts it
    chunk_size: int = 3500  # at most this many characters per numbered chunk of a long reply
    file_fallback_threshold: int = 14_000  # longer replies (characters) go as a .txt file
    send_interval_s: float = 0.0
    measure: Callable[[str], int] = len  # how the platform counts a message's length


class AttachmentFolder(Protocol):
    """Where `download()` saves a file a person sent: the conversation hands the chat's own
    folder (`soulflow.conversation.attachments.ChatFiles`), so an adapter never decides where
    a chat's files live."""

    async def save(self, name: str, data: bytes) -> PurePosixPath:
        """Write ``data`` as ``name``; the workspace-relative path it was saved at."""
        ...


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    args: str


class ChannelAdapter(abc.ABC):
    """A connection to one chat platform.

    `read()` returns the next batch of new messages; it may wait (long poll, push queue) but
    must return within a few seconds so its reader (reader.py) can stop it cleanly.

    Sending and reading start separately, because when several nodes share a platform account
    (SOULFLOW_BACKEND=redis, `share_account()`) every node sends but only the account's leader
    reads: `start()` then opens the sending side only, and the reader calls `start_reading()`
    when this node takes the lease and `stop_reading()` when it loses it. Without a shared
    account (`leadership` None) `start()` opens both, as it always did.
    """

    name: str
    limits: ChannelLimits = ChannelLimits()
    # set by an adapter whose read() met a platform failure it handled itself (and returned
    # []), cleared when reading works again: the channel's health shows it (see health.py)
    read_error: str | None = None

    @property
    def send_interval_s(self) -> float:
        return self.limits.send_interval_s

    #: set by `share_account()`: this node reads the account only while it leads it
    leadership: AccountLeadership | None = None

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Connect; raise a clear error if credentials are wrong. On a shared account only
        the sending side (every node can send)."""

    async def _open_then_read(self, opening: Awaitable[None]) -> None:
        """The end of a `start()`: await `opening` (the sending side's connection and checks),
        then `start_reading()` unless the account is shared (the node leading it reads). Any
        failure, cancellation included, first stops whatever was opened, so a start that
        raises leaves no session or task behind."""
        try:
            await opening
            if self.leadership is None:
                await self.start_reading()
        except BaseException:
            await self.stop()
            raise

    async def start_reading(self) -> None:  # noqa: B027 - optional hook
        """Begin receiving (load the read position, prime, open the push connection). On a
        shared account: called by the reader once this node leads it."""

    async def stop_reading(self) -> None:  # noqa: B027 - optional hook
        """Stop receiving but keep sending (leadership lost); store the read position first."""

    async def stop(self) -> None:  # noqa: B027 - optional hook
        """Disconnect and release resources."""

    def cursor_state(self) -> ChannelState | None:
        """The adapter's persisted read position, if it keeps one."""
        return None

    def share_account(self, election: Election, cursors: CursorStore) -> AccountLeadership:
        """Several nodes share this platform account: read only while `election` says this
        node leads it; keep the read position in the backend's `cursors`, fenced by the lease.
        Call before `start()`."""
        self.leadership = AccountLeadership(election)
        state = self.cursor_state()
        if state is not None:
            state.share(cursors, self.name, self.leadership)
        return self.leadership

    @abc.abstractmethod
    async def read(self) -> list[InboundMessage]:
        """New messages since the last call."""

    def commit(self, messages: list[InboundMessage]) -> None:  # noqa: B027 - optional hook
        """Called after `messages` are journaled: the adapter may now move its cursor/offset."""

    @abc.abstractmethod
    async def send(self, message: OutboundMessage) -> SendResult:
        """Deliver one message; raise `SendError` (permanent or not) on failure."""

    async def set_typing(self, chat_id: str, on: bool) -> None:  # noqa: B027 - optional hook
        """Show or clear a typing indicator where the platform has one.

        Best effort, like `add_reaction`: adapters send it on a client of its own (at most
        `BEST_EFFORT_CONNECTIONS` connections, short timeouts, never retried) and raise
        `SendError(retry_after=...)` on a rate limit, which `ChannelFeedback` turns into a
        cool-down for feedback only."""

    async def add_reaction(self, chat_id: str, message_id: str, emoji: str) -> None:  # noqa: B027
        """React to a message where the platform supports it (best effort, see `set_typing`)."""

    #: `edit` changes a message the bot sent, in place (a task's status message uses it)
    can_edit: bool = False
    #: `send` honours `options.edit_of` (edits that message, on the reply path, formatted as
    #: a send): a reply can be streamed into the chat (conversation/streaming.py)
    can_stream: bool = False
    #: edits the whole account may make in a window (Slack's `chat.update` tier); None: the
    #: platform limits edits per chat only, like its messages (see `chat_budget`)
    edit_budget: SendBudget | None = None

    def chat_budget(self, chat_id: str) -> SendBudget | None:
        """Calls one chat may get in a window, its edits included, where the platform
        documents such a limit (Telegram: 20 a minute in a group); the dispatcher and the
        reply streams keep to it (bus/pacing.py)."""
        return None

    #: a streamed reply's final text goes to `send` even when the message holds it already:
    #: the local transcript records the reply as whole that way (its edits cost nothing)
    confirms_final_text: bool = False

    async def edit(self, chat_id: str, message_id: str, text: str) -> None:
        """Replace the text of a message the bot sent (best effort, like `add_reaction`:
        the feedback client, no retries; `SendError` on failure)."""
        raise SendError(f"the {self.name} channel cannot edit messages", permanent=True)

    async def download(self, attachment: Attachment,
                       folder: AttachmentFolder) -> PurePosixPath:
        """Fetch ``attachment`` and save it in ``folder`` (the chat's zone, see
        `soulflow.conversation.attachments`); the workspace-relative path it was saved at.
        OSError says why it could not be had (too large, refused, network)."""
        raise OSError(f"the {self.name} channel does not deliver files")

    def parse_command(self, text: str) -> Command | None:
        """`/name args` (also `/name@bot args`) → Command; anything else → None."""
        match = _COMMAND.match(text)
        if not match:
            return None
        return Command(match.group(1).casefold(), (match.group(2) or "").strip())

    def parse_agent_mentions(self, text: str) -> list[str]:
        """Names of agents addressed as `@name` in the text."""
        return re.findall(r"(?<![\w@])@([A-Za-z][\w-]{0,63})", text)
