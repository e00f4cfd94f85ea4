"""What every provider does the same way around one chat turn: refuse a turn it cannot start,
and race the turn against the user's /stop.

The records and the `Provider` protocol live in `soulflow.contracts`, so the agent and the
task planner depend on the contract, not on this package.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from soulflow.contracts import ProviderError

__all__ = ["race_abort", "refuse_unstartable_turn"]

T = TypeVar("T")


def refuse_unstartable_turn(closed: bool, abort: asyncio.Event | None,
                            error: Callable[[str, str], ProviderError]) -> None:
    """The two reasons every provider refuses a turn before sending anything: it was closed
    (`not_configured`), or the user already stopped the run (`aborted`)."""
    if closed:
        raise error("not_configured", "the provider has been closed")
    if abort is not None and abort.is_set():
        raise error("aborted", "the request was aborted before it was sent")


async def race_abort(work: Awaitable[T], abort: asyncio.Event,
                     aborted: Callable[[], ProviderError]) -> T:
    """Run `work` until it finishes or `abort` fires; on an abort `work` is cancelled (which
    kills a CLI child or drops an HTTP request) and `aborted()` is raised."""
    work_task = asyncio.ensure_future(work)
    abort_task = asyncio.ensure_future(abort.wait())
    try:
        await asyncio.wait({work_task, abort_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (work_task, abort_task):
            task.cancel()
        await asyncio.wait({work_task, abort_task})
    if not work_task.cancelled():
        return work_task.result()
    raise aborted()
