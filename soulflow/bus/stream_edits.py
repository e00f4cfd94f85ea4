"""The plan for one streamed reply: which message to create or edit, with what text, and when.

A streamed reply is shown as one platform message created when the first text arrives and
edited as the text grows. Platforms punish edit floods (Telegram's flood control counts edits
like sends), so this planner owns the rules that keep a stream inside them, apart from any
transport, so they can be tested with an injected clock:

- at most one send or edit per `interval_s` per stream, and none while a 429's `retry_after`
  runs; the final text is never dropped, only delayed;
- no edit when the text a message holds has not changed ("message is not modified");
- past the platform's length limit the text continues in a new message; piece boundaries never
  move once text exists past them, so a message already sent is never re-cut;
- the text fed in is already safe to show: the agent's `TextStreamFilter`
  (agent/toolcall_text.py) holds back tool-call blocks before text reaches a plan.

Not wired into the dispatcher yet: the caller feeds `update`/`finish` and carries out `due`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class EditKind(Enum):
    SEND = "send"
    EDIT = "edit"


@dataclass(frozen=True, slots=True)
class EditAction:
    """One platform call: create piece `index` (SEND) or replace its text (EDIT)."""

    kind: EditKind
    index: int
    text: str


def split_pieces(text: str, limit: int) -> list[str]:
    """Cut `text` into pieces of at most `limit` characters, at a newline where one falls in the
    second half of a full piece. A boundary depends only on text before it plus `limit` more
    characters, so it stays put while the text grows."""
    if limit < 1:
        raise ValueError("limit must be positive")
    pieces: list[str] = []
    start = 0
    while len(text) - start > limit:
        window = text[start:start + limit]
        newline = window.rfind("\n")
        end = start + newline + 1 if newline >= limit // 2 else start + limit
        pieces.append(text[start:end])
        start = end
    pieces.append(text[start:])
    return pieces


@dataclass(slots=True)
class StreamPlan:
    """One reply's stream state. `shown[i]` is what piece i's message holds on the platform."""

    limit: int
    interval_s: float
    shown: list[str] = field(default_factory=list)
    wanted: str = ""
    final: bool = False
    next_at: float = 0.0

    def update(self, shown_so_far: str) -> None:
        """The showable answer so far (already filtered of tool-call text)."""
        if not self.final:
            self.wanted = shown_so_far

    def finish(self, final_text: str) -> None:
        """The complete, formatted reply: what the messages must hold in the end."""
        self.wanted = final_text
        self.final = True

    def throttled(self, retry_after_s: float, now: float) -> None:
        """A 429 on a send or edit: nothing more before `retry_after_s` (and the interval)."""
        self.next_at = max(self.next_at, now + max(retry_after_s, self.interval_s))

    def pending(self) -> list[EditAction]:
        """Every call still needed to bring the chat to `wanted`, in order."""
        actions: list[EditAction] = []
        if not self.wanted.strip():
            return actions
        for index, piece in enumerate(split_pieces(self.wanted, self.limit)):
            if index >= len(self.shown):
                actions.append(EditAction(EditKind.SEND, index, piece))
            elif self.shown[index] != piece:
                actions.append(EditAction(EditKind.EDIT, index, piece))
        return actions

    def due(self, now: float) -> EditAction | None:
        """The next call to make now, or None (paced, throttled, or nothing changed). Only one
        call per interval: a stream is one chat's traffic, shared with its other sends."""
        if now < self.next_at:
            return None
        actions = self.pending()
        if not actions:
            return None
        return actions[0]

    def done(self, action: EditAction, now: float) -> None:
        """`action` reached the platform: record what its message holds now."""
        if action.kind is EditKind.SEND:
            self.shown.append(action.text)
        else:
            self.shown[action.index] = action.text
        self.next_at = now + self.interval_s

    @property
    def complete(self) -> bool:
        return self.final and not self.pending()
