"""Waiting on a condition in async tests: poll it briefly until it holds or a timeout fails
the test, instead of sleeping a fixed time and hoping."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Return once `predicate()` is true; raise TimeoutError after `timeout` seconds."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.002)


@asynccontextmanager
async def loop_gaps(every_s: float = 0.01) -> AsyncIterator[list[float]]:
    """While the body runs, a task sleeps `every_s` at a time and notes how long each sleep
    really took: a call that held the event loop shows as a gap that long."""
    gaps: list[float] = []
    stop = asyncio.Event()

    async def tick() -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while not stop.is_set():
            await asyncio.sleep(every_s)
            gaps.append(loop.time() - last)
            last = loop.time()

    ticking = asyncio.create_task(tick())
    try:
        yield gaps
    finally:
        stop.set()
        await ticking
