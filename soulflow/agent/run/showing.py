"""What a run needs from whoever shows its answer while the model writes it.

The conversation implements `AnswerStream` (conversation/streaming.py) for a turn whose reply is
streamed: the loop hands it each model call's text as it arrives, already stripped of tool-call
blocks, and lets it record, in the run's own journal, the platform id of each piece it shows.
That record is what keeps a streamed reply whole across a crash: the same leg driven again
after a restart (its inbound message replayed, or the run resumed) edits the pieces already in
the chat instead of sending new ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from soulflow.agent.toolcall_text import TextStreamFilter

RecordShown = Callable[[int, str], None]
"""Record that piece `index` of the leg's streamed answer is the platform message `id`."""


@dataclass(frozen=True, slots=True)
class ShownLeg:
    """The leg of a run a stream shows: its run and number (what makes the pieces' outbox ids
    the same in every drive of it) and the pieces an earlier drive already showed."""

    run_id: str
    leg: int
    shown: tuple[str, ...]
    record: RecordShown


class AnswerStream(Protocol):
    def begin(self, leg: ShownLeg) -> None:
        """The drive starts (or resumes) this leg."""

    def restart(self) -> None:
        """A new model call: its text replaces what the last one wrote (a call that ended in
        tool calls wrote a preamble; the next call writes the answer)."""

    def feed(self, text: str) -> None:
        """More text of the current model call, safe to show. Must not block."""


class StreamFeed:
    """One model call's `on_stream` callback: deltas through the tool-call filter, to a
    stream."""

    def __init__(self, stream: AnswerStream) -> None:
        self._stream = stream
        self._filter = TextStreamFilter()
        stream.restart()

    def rewind(self) -> None:
        """The provider retries the call (or fails over): its text starts over."""
        self._filter = TextStreamFilter()
        self._stream.restart()

    def __call__(self, delta: str) -> None:
        shown = self._filter.feed(delta)
        if shown:
            self._stream.feed(shown)

    def close(self) -> None:
        rest = self._filter.flush()
        if rest:
            self._stream.feed(rest)
