"""Turn one reply into what a platform accepts: chunks under its limit, or a file.

Splitting prefers paragraph breaks, then line breaks, then spaces, and only cuts inside a
word when a single word is longer than the limit. Chunks are numbered `[i/n]` so a reader
can tell that more is coming and in which order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from soulflow.channels.base import ChannelLimits

_MARKER_RESERVE = 12  # room for a "[99/99] " prefix
_FENCE = re.compile(r"^```", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class RenderedPart:
    """One message to send: `text`, or a file (`as_file`) named `filename` with a `note`."""

    text: str
    as_file: bool = False
    filename: str = ""
    note: str = ""


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


def render_reply(text: str, limits: ChannelLimits, *, filename: str = "reply.txt"
                 ) -> list[RenderedPart]:
    """The parts to send for `text` on a platform with `limits`, in order."""
    if len(text) > limits.file_fallback_threshold:
        note = (f"The answer is {len(text):,} characters long, so it is attached as "
                f"{filename}.")
        return [RenderedPart(text=text, as_file=True, filename=filename, note=note)]
    if len(text) <= limits.max_text:
        return [RenderedPart(text=text)]
    size = max(1, min(limits.chunk_size, limits.max_text) - _MARKER_RESERVE - 8)
    chunks = _balance_fences(split_text(text, size))
    total = len(chunks)
    return [RenderedPart(text=f"[{i}/{total}] {chunk}") for i, chunk in enumerate(chunks, 1)]
