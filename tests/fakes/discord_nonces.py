"""Discord's `enforce_nonce` on message create, as Discord documents it.

"nonce: Can be used to verify a message was sent (up to 25 characters). Will appear in the
message create event." -- "enforce_nonce: If true and nonce is present, it will be checked for
uniqueness in the past few minutes. If another message was created by the same author with the
same nonce, that message will be returned and no new message will be created."

Discord does not publish the window ("the past few minutes"); the fake keeps a nonce for
`window_s` (default two minutes, the short end of what bots observe), so a test that passes
here does not depend on a longer window than Discord may give.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_NONCE_LENGTH = 25
DEFAULT_WINDOW_S = 120.0


@dataclass
class NonceMemory:
    """Messages created with `enforce_nonce`, by (channel, author, nonce), for `window_s`."""

    window_s: float = DEFAULT_WINDOW_S
    clock: Callable[[], float] = time.monotonic
    _seen: dict[tuple[int, int, str], tuple[float, dict[str, Any]]] = field(default_factory=dict)
    hits: int = 0  # creates answered with an earlier message

    @staticmethod
    def key_of(payload: dict[str, Any]) -> str | None:
        """The nonce Discord enforces for this create payload, or None (no nonce, or
        `enforce_nonce` not true). Raises ValueError for a nonce Discord refuses."""
        nonce = payload.get("nonce")
        if nonce is None or payload.get("enforce_nonce") is not True:
            return None
        if isinstance(nonce, bool) or not isinstance(nonce, str | int):
            raise ValueError("nonce must be a string or an integer")
        text = str(nonce)
        if len(text) > MAX_NONCE_LENGTH:
            raise ValueError(f"nonce is longer than {MAX_NONCE_LENGTH} characters")
        return text

    def existing(self, channel_id: int, author_id: int, nonce: str) -> dict[str, Any] | None:
        """The message an earlier create with this nonce made, if still in the window."""
        self._expire()
        found = self._seen.get((channel_id, author_id, nonce))
        if found is None:
            return None
        self.hits += 1
        return found[1]

    def remember(self, channel_id: int, author_id: int, nonce: str,
                 message: dict[str, Any]) -> None:
        self._seen[(channel_id, author_id, nonce)] = (self.clock(), message)

    def _expire(self) -> None:
        cutoff = self.clock() - self.window_s
        for key in [k for k, (at, _) in self._seen.items() if at < cutoff]:
            del self._seen[key]
