"""Active agent runs per chat, so `/stop` or a stop reaction can abort them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class ActiveRuns:
    def __init__(self) -> None:
        self._runs: dict[str, set[asyncio.Event]] = {}

    @contextlib.contextmanager
    def track(self, chat_key: str) -> Iterator[asyncio.Event]:
        """Register a run for the block's duration; the event is set to abort it."""
        abort = asyncio.Event()
        self._runs.setdefault(chat_key, set()).add(abort)
        try:
            yield abort
        finally:
            runs = self._runs.get(chat_key)
            if runs is not None:
                runs.discard(abort)
                if not runs:
                    del self._runs[chat_key]

    def stop(self, chat_key: str) -> int:
        """Abort every active run of a chat; returns how many were running."""
        runs = self._runs.get(chat_key, set())
        for abort in runs:
            abort.set()
        return len(runs)

    def count(self) -> int:
        return sum(len(r) for r in self._runs.values())
