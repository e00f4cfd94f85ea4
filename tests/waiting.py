"""Waiting on a condition in async tests: poll it briefly until it holds or a timeout fails
the test, instead of sleeping a fixed time and hoping."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Return once `predicate()` is true; raise TimeoutError after `timeout` seconds."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.002)
