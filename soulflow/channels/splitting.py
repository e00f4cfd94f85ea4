"""One reply turned into what a platform accepts, by the limits its adapter declares: chunks
under its limit, or a file. The only place text is split for a platform: the conversation
calls `split_reply` once per reply (conversation/replies.py) and stores each part in the
outbox as a message of its own; the adapters send each as it is.

Past `file_fallback_threshold` characters the reply becomes one `.txt` attachment. Longer than
`max_text`, it is cut into chunks numbered `[i/n]`, so a reader can tell that more is coming
and in which order; a code fence left open at a cut is closed and reopened. Splitting prefers
paragraph breaks, then line breaks, then spaces, and only cuts inside a word when a single
word is longer than the limit. Last, a part the platform would still count as too long (its
own `measure`: Telegram counts UTF-16 code units, so emoji-heavy text can be under 4,096
characters and still over) is cut again at natural breaks, into halves until each fits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from soulflow.channels.base import ChannelLimits
from soulflow.contracts import ReplyOptions

_MARKER_RESERVE = 12  # room for a "[99/99] " prefix
_FENCE = re.compile(r"^```", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class ReplyPart:
    """One message to send: its `text`, and how (`options.as_file`: as a file)."""

    text: str
    options: ReplyOptions = ReplyOptions()


def _cut_point(text: str, limit: int) -> int:
    """Where to cut `text` so the first piece is at most `limit` characters."""
    window = text[:limit]
    for separator in ("\n\n", "\n", " "):
        index = window.rfind(separator)
        if index > limit // 3:
            return index + len(separator)
    return limit


def split_text(text: str, limit: int) -> list[str]:
    """Split into pieces of at most `limit` characters at natural boundaries."""
    if limit <= 0:
        raise ValueError("limit must be positive")
    pieces: list[str] = []
    rest = text
    while len(rest) > limit:
        cut = _cut_point(rest, limit)
        piece = rest[:cut].rstrip()
        if piece:
            pieces.append(piece)
        rest = rest[cut:].lstrip("\n")
    if rest.strip() or not pieces:
        pieces.append(rest)
    return pieces


def _balance_fences(chunks: list[str]) -> list[str]:
    """Close a code fence left open at the end of a chunk and reopen it in the next one."""
    balanced: list[str] = []
    carry = False
    for chunk in chunks:
        text = f"```\n{chunk}" if carry else chunk
        open_fence = len(_FENCE.findall(text)) % 2 == 1
        balanced.append(f"{text}\n```" if open_fence else text)
        carry = open_fence
    return balanced


def split_reply(text: str, limits: ChannelLimits, *, filename: str = "reply.txt"
                ) -> list[ReplyPart]:
    """The parts to send for `text` on a platform with `limits`, in order."""
    if len(text) > limits.file_fallback_threshold:
        note = (f"The answer is {len(text):,} characters long, so it is attached as "
                f"{filename}.")
        return [ReplyPart(text, ReplyOptions(as_file=True, filename=filename, note=note))]
    if len(text) <= limits.max_text:
        chunks = [text]
    else:
        size = max(1, min(limits.chunk_size, limits.max_text) - _MARKER_RESERVE - 8)
        pieces = _balance_fences(split_text(text, size))
        chunks = [f"[{i}/{len(pieces)}] {piece}" for i, piece in enumerate(pieces, 1)]
    return [ReplyPart(text=piece) for chunk in chunks for piece in _fit(chunk, limits)]


def _fit(text: str, limits: ChannelLimits) -> list[str]:
    """`text` as is when the platform's own measure keeps it under `max_text`; else cut at
    natural breaks into pieces of at most `chunk_size` characters and half of it, until
    each piece fits (only a platform whose measure is not the character count gets here)."""
    if limits.measure(text) <= limits.max_text:
        return [text]
    limit = min(limits.chunk_size, max(1, len(text) // 2))
    return [fitted for piece in split_text(text, limit) for fitted in _fit(piece, limits)]
