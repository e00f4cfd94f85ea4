"""Small builders for the backend tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from soulflow.backends.redis.connections import ScopedWriteTimeout
from soulflow.contracts import InboundMessage, OutboundMessage


def inbound(chat: str, n: int, *, provider: str = "telegram", text: str = "",
            at: float | None = None) -> InboundMessage:
    return InboundMessage(provider=provider, chat_id=chat, message_id=str(n), sender_id="u1",
                          text=text or f"{chat} #{n}",
                          received_at=time.time() + n * 1e-3 if at is None else at)


def outbound(chat: str, text: str, *, inbound_key: str | None = None,
             provider: str = "telegram") -> OutboundMessage:
    return OutboundMessage(provider=provider, chat_id=chat, content=text,
                           inbound_key=inbound_key)


async def eventually(check: Callable[[], Awaitable[bool]], *, timeout_s: float = 10.0,
                     what: str = "condition") -> None:
    """Poll an async condition until it holds, or fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def counting_round_trips(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """From now on, every request the bus's Redis connections write (a command, or a whole
    pipeline) is appended to the returned list: one entry per round trip."""
    sends: list[object] = []
    real = ScopedWriteTimeout.send_packed_command

    async def counted(self, command, check_health=True):  # type: ignore[no-untyped-def]
        sends.append(command)
        return await real(self, command, check_health)

    monkeypatch.setattr(ScopedWriteTimeout, "send_packed_command", counted)
    return sends
