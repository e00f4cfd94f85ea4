"""Cancel many in-flight platform calls at scattered moments: the load that leaked pools.

A reply finishing cancels its typing indicator, a stop cancels a long poll, a shutdown cancels
sends: in production calls are cancelled while they wait for a connection, connect, write or
wait for the answer. `churn` reproduces that without wall-clock sleeps: each call is cancelled
after a random number of event-loop turns (seeded, so a failure replays).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

Call = Callable[[int], Awaitable[Any]]


async def churn(call: Call, *, total: int, batch: int = 100, max_turns: int = 40,
                seed: int = 13) -> int:
    """Start `total` calls, `batch` at a time (more than any pool holds); after 0..max_turns
    loop turns cancel the batch in quick succession, the way a finished burst cancels its
    typing tasks. Cancelling back to back hits calls that the pool has just handed a fresh
    connection to, the moment that leaked. Returns how many were cancelled mid-flight."""
    rng = random.Random(seed)
    cancelled = 0
    for first in range(0, total, batch):
        tasks = [asyncio.ensure_future(call(i)) for i in range(first, min(total, first + batch))]
        for _ in range(rng.randrange(max_turns + 1)):
            await asyncio.sleep(0)
        for task in tasks:
            if rng.random() < 0.3:
                await asyncio.sleep(0)
            cancelled += task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return cancelled
