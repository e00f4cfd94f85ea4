"""Run work serially per key and concurrently across keys, with a global bound.

One chat's messages must be handled in order (a reply must not overtake the previous one),
while a slow chat must never stall the others. Each key gets a short-lived worker task that
drains that key's queue and exits when it is empty.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Job = Callable[[], Awaitable[None]]


class KeyedSerialExecutor:
    """`submit(key, job)`: jobs of one key run one at a time in order; at most `limit` at once."""

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self._limit = asyncio.Semaphore(limit)
        self._queues: dict[str, deque[Job]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._closed = False

    def submit(self, key: str, job: Job) -> None:
        if self._closed:
            raise RuntimeError(f"{self.name} is stopped")
        self._queues.setdefault(key, deque()).append(job)
        if key not in self._workers:
            self._workers[key] = asyncio.create_task(self._drain(key), name=f"{self.name}:{key}")

    async def _drain(self, key: str) -> None:
        queue = self._queues[key]
        try:
            while queue:
                job = queue.popleft()
                async with self._limit:
                    try:
                        await job()
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        log.exception("%s: a job for %s failed", self.name, key)
        finally:
            self._workers.pop(key, None)
            if not queue:
                self._queues.pop(key, None)

    @property
    def pending(self) -> int:
        return sum(len(q) for q in self._queues.values())

    @property
    def active_keys(self) -> int:
        return len(self._workers)

    async def join(self, timeout: float | None = None) -> bool:
        """Wait for queued work to finish; False if `timeout` passed first."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self._workers:
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return False
            done, _ = await asyncio.wait(list(self._workers.values()), timeout=remaining)
            if not done:
                return False
        return True

    async def stop(self, timeout: float) -> None:
        """Stop accepting work, let running jobs finish within `timeout`, then cancel."""
        self._closed = True
        for queue in self._queues.values():
            queue.clear()
        if not await self.join(timeout):
            for task in list(self._workers.values()):
                task.cancel()
            await asyncio.gather(*self._workers.values(), return_exceptions=True)
