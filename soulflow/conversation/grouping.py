"""Burst grouping: several quick messages from one sender become one agent input.

People often split one thought over three messages. With grouping on, messages from the same
sender in the same chat/thread that arrive within a window are answered together, once.
Each message is still journaled on its own before it is grouped, so nothing is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from soulflow.contracts import InboundMessage

Batch = list[InboundMessage]


class Grouper:
    def __init__(self, window_s: float, max_messages: int,
                 flush: Callable[[Batch], None]) -> None:
        self._window_s = window_s
        self._max = max(1, max_messages)
        self._flush = flush
        self._buffers: dict[tuple[str, str | None, str], Batch] = {}
        self._timers: dict[tuple[str, str | None, str], asyncio.TimerHandle] = {}

    @staticmethod
    def _key(message: InboundMessage) -> tuple[str, str | None, str]:
        return (message.chat_key, message.thread_id, message.sender_id)

    def add(self, message: InboundMessage) -> None:
        key = self._key(message)
        buffer = self._buffers.setdefault(key, [])
        buffer.append(message)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if len(buffer) >= self._max:
            self._emit(key)
        else:
            loop = asyncio.get_running_loop()
            self._timers[key] = loop.call_later(self._window_s, self._emit, key)

    def _emit(self, key: tuple[str, str | None, str]) -> None:
        self._timers.pop(key, None)
        batch = self._buffers.pop(key, [])
        if batch:
            self._flush(batch)

    def drain(self, chat_key: str) -> Batch:
        """Take the chat's buffered messages without answering them (they go back to the
        journal, behind a batch given back)."""
        taken: Batch = []
        for key in [k for k in self._buffers if k[0] == chat_key]:
            timer = self._timers.pop(key, None)
            if timer is not None:
                timer.cancel()
            taken += self._buffers.pop(key)
        return taken

    def flush_all(self) -> None:
        for key in list(self._buffers):
            timer = self._timers.pop(key, None)
            if timer is not None:
                timer.cancel()
            self._emit(key)

    @property
    def buffered(self) -> int:
        return sum(len(b) for b in self._buffers.values())
