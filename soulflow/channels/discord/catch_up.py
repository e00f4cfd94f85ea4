"""What a new gateway session must fetch before its live messages may pass.

The gateway delivers live events from the first instant of a session, and the catch-up of the
time away (a history fetch per channel) runs only after READY. A live message queued first
would move its channel's cursor past the messages written while the bot was away, and a
crash before the catch-up, or a catch-up that then starts after the live message, would never
fetch them. So from the IDENTIFY of a session, every channel with a cursor is *behind*: its
live messages are held here until its catch-up has queued what was missed, then released
behind them. Each channel's messages thus reach the queue, and the journal, in the order they
were written, and a committed cursor never passes a message that was not queued.
"""

from __future__ import annotations

from collections.abc import Callable

from soulflow.contracts import InboundMessage


class ChannelCatchUp:
    """Channel cursors (the newest message id queued per channel) and the live messages held
    for channels whose catch-up has not run in this session."""

    def __init__(self, release: Callable[[InboundMessage], None]) -> None:
        self._release = release  # queues a held message (still deduplicated there)
        self.cursors: dict[int, int] = {}
        self._held: dict[int, list[InboundMessage]] = {}
        # which session the held messages belong to: a catch-up of an earlier session (still
        # fetching when a new one identified) must not release the new session's messages
        self.session = 0

    def session_starting(self) -> None:
        """A new session is about to IDENTIFY: everything known is behind until fetched.
        Messages still held from an abandoned session are dropped: the cursor did not move
        past them, so this session's catch-up fetches them again."""
        self.session += 1
        self._held = {channel_id: [] for channel_id in self.cursors}

    def behind(self) -> list[int]:
        """Channels still to be fetched in this session, in the order they became known."""
        return list(self._held)

    def hold(self, message: InboundMessage) -> bool:
        """Keep a live message of a channel that is behind; False if it may be queued now."""
        if message.kind != "message" or not message.chat_id.isdigit():
            return False
        held = self._held.get(int(message.chat_id))
        if held is None:
            return False
        held.append(message)
        return True

    def caught_up(self, channel_id: int, session: int) -> None:
        """The channel's missed messages are queued by `session`'s catch-up: its live ones
        follow, in order (unless a newer session began meanwhile: its own catch-up does it)."""
        if session != self.session:
            return
        for message in self._held.pop(channel_id, []):
            self._release(message)

    def forget(self, channel_id: int, session: int) -> None:
        """The channel is gone or closed to the bot: no cursor, nothing more to fetch."""
        self.cursors.pop(channel_id, None)
        self.caught_up(channel_id, session)

    def queued(self, channel_id: int, message_id: int) -> None:
        """A message of the channel reached the queue: the next catch-up starts after it."""
        self.cursors[channel_id] = max(self.cursors.get(channel_id, 0), message_id)

    @property
    def held(self) -> int:
        return sum(len(messages) for messages in self._held.values())
