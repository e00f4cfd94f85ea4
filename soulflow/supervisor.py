"""Named background loops that restart after a crash and stop cleanly.

A loop that raises is logged with its traceback and started again after a backoff that grows
while it keeps failing and resets once it has run for a while; one broken loop never takes the
daemon down, and `stop()` cancels every loop and waits for it; `cancel(names)` does that for
the loops one service started, so each service stops its own loops when it stops.
`restart()` lets a watchdog (soulflow/ops) start a loop again that is alive but wedged, with
the reason recorded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

LoopFactory = Callable[[], Awaitable[None]]
Cleanup = Callable[[], Awaitable[None]]


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel every task and wait until each has ended, whatever it raised: how a service
    stops the tasks it started (a stop that returns earlier leaves them running)."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)


@dataclass(slots=True)
class LoopState:
    name: str
    restarts: int = 0
    last_error: str = ""
    running: bool = False
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    restart_reason: str | None = None
    cleanup: Cleanup | None = field(default=None, repr=False)


class Supervisor:
    def __init__(self, *, initial_backoff_s: float = 0.5, max_backoff_s: float = 30.0,
                 stable_after_s: float = 60.0) -> None:
        self._initial = initial_backoff_s
        self._max = max_backoff_s
        self._stable_after = stable_after_s
        self._loops: dict[str, LoopState] = {}

    def spawn(self, name: str, factory: LoopFactory) -> None:
        """Run `factory()` as a supervised loop named `name`."""
        if name in self._loops:
            raise ValueError(f"a loop named {name!r} is already running")
        state = LoopState(name)
        state.task = asyncio.create_task(self._run(state, factory), name=name)
        self._loops[name] = state

    async def _run(self, state: LoopState, factory: LoopFactory) -> None:
        loop = asyncio.get_running_loop()
        backoff = self._initial
        while True:
            started = loop.time()
            state.running = True
            try:
                await factory()
                log.info("loop %s finished", state.name)
                state.running = False
                return
            except asyncio.CancelledError:
                state.running = False
                # `restart()` cancels this task once with a reason; any other cancellation
                # (stop) still ends the loop
                current = asyncio.current_task()
                if state.restart_reason is None or current is None or current.uncancel() > 0:
                    raise
                await self._restarted(state)
                continue
            except Exception as exc:
                state.running = False
                state.restarts += 1
                state.last_error = f"{type(exc).__name__}: {exc}"
                if loop.time() - started >= self._stable_after:
                    backoff = self._initial
                log.exception("loop %s crashed; restarting in %.1fs", state.name, backoff)
                await asyncio.sleep(backoff)
                backoff = min(self._max, backoff * 2)

    async def _restarted(self, state: LoopState) -> None:
        """After `restart()` cancelled an attempt: count it, clean up, start again at once."""
        state.restarts += 1
        state.last_error = f"restarted: {state.restart_reason}"
        log.warning("loop %s restarted: %s", state.name, state.restart_reason)
        cleanup, state.cleanup, state.restart_reason = state.cleanup, None, None
        if cleanup is not None:
            try:
                await cleanup()
            except Exception:
                log.exception("cleaning up loop %s before its restart failed", state.name)

    def restart(self, name: str, reason: str, *, cleanup: Cleanup | None = None) -> bool:
        """Cancel the loop's current attempt and start it again (a watchdog found it wedged);
        `cleanup` runs in between (e.g. closing a channel's stuck client). False if no loop
        of that name is running."""
        state = self._loops.get(name)
        if state is None or state.task is None or state.task.done() or not state.running \
                or state.restart_reason is not None:
            return False  # a loop in its crash backoff is restarting already
        state.restart_reason, state.cleanup = reason, cleanup
        state.task.cancel()
        return True

    def names(self) -> list[str]:
        return list(self._loops)

    def status(self) -> list[dict[str, object]]:
        return [{"name": s.name, "running": s.running, "restarts": s.restarts,
                 "last_error": s.last_error} for s in self._loops.values()]

    async def cancel(self, names: Iterable[str], timeout: float = 5.0) -> None:
        """Cancel the named loops and wait up to `timeout` for them to end (a name not running
        is skipped: the start that would have spawned it failed first); a loop that does not
        end in time is logged and left to its cancellation."""
        states = [state for name in names if (state := self._loops.pop(name, None)) is not None]
        tasks = [s.task for s in states if s.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                log.warning("loop %s did not stop within %.1fs", task.get_name(), timeout)

    async def stop(self, timeout: float = 5.0) -> None:
        """Cancel every loop still running."""
        await self.cancel(list(self._loops), timeout)
