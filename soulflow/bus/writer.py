"""The "outbox:writer" task: published messages are stored in the outbox in the order they
were published, and only then handed on for sending; a turn's completion of the messages it
answered is written in the same line, behind its reply.

One writer per daemon keeps a chat's replies in order whoever publishes them (the turn, a
tool, a notice), and lets a caller that must know a reply is durable await it. Everything
waiting when the writer comes round is stored as one batch (`OutboxStore.store`: one round
trip on Redis), in line order: under load the replies of every chat answered meanwhile, and
each one's completion, share a round trip, and a completion is never recorded before the
reply queued ahead of it. A store that fails (Redis lost) is retried with a backoff, the
batch staying first in line: publishers wait, nothing is skipped or dropped while the daemon
runs. `StoreHealth` logs one line when the store starts failing and one when
it answers again, for the writer and the dispatcher alike.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from soulflow.backends.base import Completing, Completion, OutboxWrite, WriteResult
from soulflow.contracts import OutboundMessage

log = logging.getLogger(__name__)


@dataclass(slots=True)
class StoreHealth:
    """Whether the outbox store failed last time; logged once per change, not per try."""

    down: bool = False

    def failed(self, doing: str, exc: BaseException) -> None:
        if not self.down:
            log.error("outbox: %s failed (%s: %s); retrying with a backoff", doing,
                      type(exc).__name__, exc)
            self.down = True

    def ok(self) -> None:
        if self.down:
            log.warning("outbox: the store answers again")
            self.down = False


MAX_BATCH = 256  # writes stored in one step at most


class OutboxWriter:
    def __init__(self, store: Callable[[list[OutboxWrite]], Awaitable[list[WriteResult]]],
                 stored: Callable[[OutboundMessage], None], health: StoreHealth,
                 sleep: Callable[[float], Awaitable[None]],
                 backoff: tuple[float, float] = (0.2, 5.0)) -> None:
        self._store = store
        self._stored = stored  # called with each message newly stored, in publish order
        self._health = health
        self._sleep = sleep  # returns early when the dispatcher stops
        self._backoff = backoff
        self._writes: deque[tuple[OutboxWrite, asyncio.Future[Any]]] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def unstored(self) -> int:
        """Published messages and completions not stored yet (held back by a failing
        store)."""
        return len(self._writes)

    @property
    def closed(self) -> bool:
        """Stopped: nothing queued now would be stored."""
        return self._closed

    def publish(self, message: OutboundMessage) -> asyncio.Future[bool]:
        """Queue a message for storing; the future says whether it was stored (False: an
        entry with its id was already pending)."""
        return self._queue(message)

    def complete(self, completing: Completing) -> asyncio.Future[list[Completion]]:
        """Queue the completion of inbound messages behind everything published so far; the
        future holds how each key's completion ended."""
        return self._queue(completing)

    def _queue(self, write: OutboxWrite) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self._closed:  # after stop(): nothing would store it
            log.warning("outbox: %s published after the stop; not stored", _named(write))
            future.cancel()
            return future
        self._writes.append((write, future))
        self.start()
        self._wake.set()
        return future

    def start(self) -> None:
        """Run the writer task if it is not running (a publish before the bus starts, e.g.
        a CLI replaying dead letters, stores too)."""
        self._closed = False
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="outbox:writer")

    async def _run(self) -> None:
        delay = self._backoff[0]
        while True:
            if not self._writes:
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = list(itertools.islice(self._writes, MAX_BATCH))
            try:
                results = await self._store([write for write, _ in batch])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._health.failed("storing replies", exc)
                await self._sleep(delay)
                delay = min(delay * 2, self._backoff[1])
                continue
            delay = self._backoff[0]
            self._health.ok()
            for (write, future), result in zip(batch, results, strict=True):
                self._writes.popleft()
                if result is True and isinstance(write, OutboundMessage):
                    self._stored(write)
                if not future.done():
                    future.set_result(result)

    async def stop(self, timeout: float) -> None:
        """Store what was published, for up to `timeout`; then stop. What could not be stored
        by then (the store was down all along) is logged and its publishers are cancelled."""
        if self._writes and self._task is not None and not self._task.done():
            try:
                await asyncio.wait_for(self._drain(), timeout=timeout)
            except TimeoutError:
                pass
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
        if self._writes:
            log.error("outbox: %d published message(s) or completion(s) could not be stored "
                      "before the stop; those replies are lost (the messages they answer stay "
                      "unfinished, and are run again)", len(self._writes))
            for _, future in self._writes:
                future.cancel()
            self._writes.clear()

    async def _drain(self) -> None:
        while self._writes:
            await asyncio.shield(self._writes[-1][1])


def _named(write: OutboxWrite) -> str:
    if isinstance(write, Completing):
        return f"the completion of {', '.join(write.keys)}"
    return f"{write.message_id} for {write.chat_key}"
