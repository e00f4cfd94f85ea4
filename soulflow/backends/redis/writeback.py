"""Writing the agent's hot stores to Redis off the event loop, in batches.

The run journal, the sessions and the usage counters are written many times per turn from
synchronous code deep in the agent. Sent one by one on the synchronous client, each write was
a round trip that held the event loop (13 per message, and a slow Redis froze every chat, the
dashboard and the leases with it), and ~60 Redis commands per message. So on a started
backend these stores only *queue* what they write: their caches answer the reads that follow
at once, and one named task, `backend:writeback`, sends everything queued as one pipeline on
the asynchronous client, where a turn's three journal events become one script call and its
session records one push.

**When a write is durable.** The task writes everything queued `delay_s` (0.5 s) after the
first write of a batch. Somebody who must know that a write is stored marks it due and waits
(`settle()`): the task then sends at once what is due (a run's events, a session's records),
and the rest waits for its time, so a busy node still writes a turn's events in one go
rather than a piece whenever another chat settles. The agent settles where a crash must not lose
the write: before a tool runs (its journal says it started) and at the end of every step of a
run, before the reply goes to the outbox and the message is marked done. What a SIGKILL can
lose is therefore only what a re-run repeats anyway: a model call, a streamed piece's message
id (one extra partial message, as before), up to `delay_s` of usage counts.

**When Redis is away.** A failed batch stays queued, in order, and is sent again (after a
growing pause, at most `max_backoff_s`); a `settle()` waiting for it raises `StoreUnavailable`,
so the turn is given back as with any store error. Nothing is dropped: a source only forgets
what it queued once Redis has confirmed it.

Without the task (a backend that was not started: tools and store tests), the stores write
through, one call at a time, as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from redis.exceptions import NoScriptError

from soulflow.backends.redis.clients import AsyncStoreRedis
from soulflow.errors import StoreError, StoreUnavailable

log = logging.getLogger(__name__)

WRITE_DELAY_S = 0.5  # how long a batch gathers writes nobody waits for
MAX_BACKOFF_S = 5.0


class Staged(Protocol):
    """What a source added to a batch: told how the batch ended."""

    def written(self, results: list[Any]) -> None:
        """Redis ran the batch; `results` are this source's commands' replies, in order
        (a command's own error is in the list as an exception)."""

    def failed(self) -> None:
        """The batch did not reach Redis: take what was staged back, ahead of what was
        queued since."""


class WriteSource(Protocol):
    """A store that queues writes (the run journal, sessions, usage)."""

    def stage(self, batch: Batch, *, full: bool) -> Staged | None:
        """Add what is queued to `batch`: everything when `full`, else only what a
        `settle()` marked due; None when there is nothing to add."""


@dataclass(slots=True)
class Batch:
    """One pipeline being filled: sources add commands and scripts by name."""

    pipe: Any
    shas: dict[str, str]
    count: int = 0

    def execute_command(self, *args: Any) -> None:
        """One command, as on a pipeline (so the stores write either with the same code)."""
        self.pipe.execute_command(*args)
        self.count += 1

    def script(self, name: str, keys: list[str], args: list[Any]) -> None:
        self.execute_command("EVALSHA", self.shas[name], len(keys), *keys, *args)


@dataclass(slots=True)
class _Turn:
    """Waiters for the batch after the one in flight."""

    done: asyncio.Future[None]
    error: BaseException | None = field(default=None)


class WriteBehind:
    """The queue's writer (see the module docstring). Sources register once; `notify()` says
    something was queued; `settle()` waits until it is in Redis."""

    def __init__(self, client: AsyncStoreRedis, *, delay_s: float = WRITE_DELAY_S,
                 max_backoff_s: float = MAX_BACKOFF_S) -> None:
        self._client = client
        self._delay_s = delay_s
        self._max_backoff_s = max_backoff_s
        self._sources: list[WriteSource] = []
        self._scripts: dict[str, str] = {}  # name → Lua source
        self._shas: dict[str, str] = {}
        self._queued = asyncio.Event()
        self._first_queued_at: float | None = None  # of what waits for its time
        self._urgent = asyncio.Event()
        self._waiters: list[asyncio.Future[None]] = []
        self._running = False
        self.batches = 0  # batches written
        self.failing_since: float | None = None  # wall clock of the first failed batch
        self.last_error = ""

    @property
    def client(self) -> AsyncStoreRedis:
        """The asynchronous client, for the stores' reads before a turn (`preload`)."""
        return self._client

    @property
    def running(self) -> bool:
        """The task runs: the sources queue instead of writing through."""
        return self._running

    def status(self) -> dict[str, object]:
        """For the backend's status (/api/state): batches written, and since when they fail
        (None while they get through) with the last error."""
        return {"batches": self.batches, "failing_since": self.failing_since,
                "last_error": self.last_error}

    def register(self, source: WriteSource, scripts: dict[str, str] | None = None) -> None:
        self._sources.append(source)
        self._scripts.update(scripts or {})

    def notify(self) -> None:
        if self._first_queued_at is None:
            self._first_queued_at = time.monotonic()
        self._queued.set()

    def hurry(self) -> None:
        """Send what is due now, without waiting for it (a run that just finished)."""
        self.notify()
        self._urgent.set()

    async def settle(self) -> None:
        """Return once what the sources marked due before this call is in Redis; raise
        `StoreUnavailable` if the batch carrying it failed (it stays queued)."""
        if not self._running:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._queued.set()
        self._urgent.set()
        await asyncio.shield(waiter)

    async def run(self, stopping: asyncio.Event) -> None:
        """The `backend:writeback` task: until `stopping`, then one last batch."""
        self._running = True
        backoff = 0.1
        try:
            while not stopping.is_set():
                await _first(self._queued.wait(), stopping.wait())
                due_at = (self._first_queued_at or time.monotonic()) + self._delay_s
                if not self._urgent.is_set():
                    await _first(self._urgent.wait(), stopping.wait(),
                                 asyncio.sleep(max(0.0, due_at - time.monotonic())))
                full = stopping.is_set() or time.monotonic() >= due_at
                if await self._write_once(full=full):
                    backoff = 0.1
                    continue
                await _first(stopping.wait(), asyncio.sleep(backoff))
                backoff = min(self._max_backoff_s, backoff * 2)
        finally:
            self._running = False
            await self._write_once(full=True)  # a clean stop leaves nothing queued
            self._release(StoreUnavailable("the Redis writer stopped"))

    async def _write_once(self, *, full: bool) -> bool:
        """One batch (everything queued when `full`, else what is due); False if it did not
        reach Redis."""
        self._queued.clear()
        self._urgent.clear()
        waiters, self._waiters = self._waiters, []
        try:
            await self._write(full)
            if full:
                self._first_queued_at = None
            elif self._first_queued_at is not None:
                self._queued.set()  # the rest still waits for its time
        except Exception as exc:  # noqa: BLE001 - the writer must outlive any one batch
            if not isinstance(exc, StoreError | OSError):
                log.exception("writing queued store records to Redis failed; they stay "
                              "queued and are sent again")
            elif self.failing_since is None:  # one line per outage, not one per try
                log.warning("writing queued store records to Redis failed (%s); they stay "
                            "queued and are sent again", exc)
            else:
                log.debug("writing queued store records to Redis failed again: %s", exc)
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(StoreUnavailable(str(exc)))
            self._queued.set()
            self.failing_since = self.failing_since or time.time()
            self.last_error = str(exc) or type(exc).__name__
            return False
        if self.failing_since is not None:
            log.info("writing queued store records to Redis works again")
        self.failing_since = None
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        return True

    async def _write(self, full: bool) -> None:
        if self._scripts.keys() - self._shas.keys():
            await self._load_scripts()
        batch = Batch(self._client.pipeline(transaction=False), self._shas)
        staged: list[tuple[Staged, int, int]] = []
        try:
            for source in self._sources:
                start = batch.count
                part = source.stage(batch, full=full)
                if part is not None:
                    staged.append((part, start, batch.count))
            if not staged:
                return
            results = await batch.pipe.execute(raise_on_error=False)
        except BaseException:
            for part, _, _ in staged:
                part.failed()
            raise
        if any(isinstance(result, NoScriptError) for result in results):
            for part, _, _ in staged:  # Redis restarted without its scripts: load, resend
                part.failed()
            self._shas.clear()
            raise StoreUnavailable("Redis lost the store scripts (restarted); reloading")
        self.batches += 1
        for part, start, end in staged:
            part.written(results[start:end])

    async def _load_scripts(self) -> None:
        for name, source in self._scripts.items():
            self._shas[name] = await self._client.script_load(source)

    def _release(self, error: BaseException) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(error)


async def _first(*waits: Any) -> None:
    """Wait until the first of `waits` (coroutines) finishes; cancel the others."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


Notify = Callable[[], None]
