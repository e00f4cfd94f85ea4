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
- a tool call the model is writing as text is never shown half-written: visible text stops where
  a tool-call block (or a prefix that could become one) starts.

Not wired into the dispatcher yet: the caller feeds `update`/`finish` and carries out `due`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

# Openers of the text tool-call shapes `agent/toolcall_text.py` parses.
_TOOL_OPENERS = ("```tool_call", "```tool", "<tool_call>", "<function=")
_FENCE_RE = re.compile(r"```[ \t]*(?P<lang>[\w-]*)")


class EditKind(Enum):
    SEND = "send"
    EDIT = "edit"


@dataclass(frozen=True, slots=True)
class EditAction:
    """One platform call: create piece `index` (SEND) or replace its text (EDIT)."""

    kind: EditKind
    index: int
    text: str


def visible_text(raw: str) -> str:
    """The part of a streaming answer that may be shown: everything before the first tool-call
    block, and without a trailing fragment that could still turn into one (`<tool_c`, an
    unlabelled fence whose language has not arrived yet, an open ```json fence)."""
    cut = len(raw)
    for opener in _TOOL_OPENERS:
        at = raw.find(opener)
        if at != -1:
            cut = min(cut, at)
    for match in _FENCE_RE.finditer(raw, 0, cut):
        rest = raw[match.end():cut]
        lang = match.group("lang")
        # A fence whose first line has not ended may still be labelled tool_call; an open json
        # fence may hold a bare call object. Both are held back until they are decided.
        if ("\n" not in rest and lang in ("", "tool", "tool_", "tool_c", "tool_ca", "tool_cal")) \
                or (lang == "json" and "```" not in rest):
            cut = min(cut, match.start())
            break
    text = raw[:cut]
    for opener in _TOOL_OPENERS:
        for size in range(min(len(opener) - 1, len(text)), 0, -1):
            if text.endswith(opener[:size]):
                text = text[:-size]
                break
    return text


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

    def update(self, raw: str) -> None:
        """The model's answer so far (raw; tool-call text is hidden here)."""
        if not self.final:
            self.wanted = visible_text(raw)

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
