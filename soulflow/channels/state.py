"""Small persisted state per channel: cursors, offsets, "primed" flags.

Adapters keep the position they have read up to here (Telegram's update offset, Slack's
last `ts` per channel, ...). It is written only from `commit()`, which the intake calls
after the messages are journaled: a crash replays, never skips. Adapters read and write it
synchronously (`get`, `update`); where it is stored depends on the backend:

- File (default): `runtime/bus/cursors/<channel>.json`, written atomically by a writer thread
  (two fsyncs stay off the event loop); an adapter's `stop()` waits for it (`drain()`).
- Shared (SOULFLOW_BACKEND=redis, after `share()`): the backend's `CursorStore`, loaded when
  this node becomes the account's reader (`load()`), written by a supervised task, each write
  fenced by the account's lease: once another node reads the account, our late writes are
  refused and the reader is told to stop (`AccountLeadership.fence`).

Losing the last cursor advance to a crash only replays messages the journal already knows;
losing a *priming baseline* would make the next start prime again past messages sent while
the daemon was down, so adapters wait for baselines with `await state.drain()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soulflow.storage.atomic import read_json
from soulflow.storage.background import BackgroundJsonFile

if TYPE_CHECKING:
    from soulflow.backends.base import CursorStore
    from soulflow.channels.leadership import AccountLeadership

log = logging.getLogger(__name__)

_RETRY_S = (0.2, 0.5, 1.0, 2.0)  # pauses between failed shared writes (the last repeats)


class ChannelState:
    """A persisted JSON object for one channel: `runtime/bus/cursors/<channel>.json`, or the
    backend's cursors of the account once `share()` was called."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = BackgroundJsonFile(path)
        data = read_json(path, {})
        self._data: dict[str, Any] = data if isinstance(data, dict) else {}
        self._shared: _SharedCursors | None = None
        self._seed: dict[str, Any] = {}  # the file's values, for an empty shared store

    def share(self, store: CursorStore, channel: str, leadership: AccountLeadership) -> None:
        """Keep this state in the backend's cursor store, fenced by `leadership` (redis). What
        the file holds (a node that ran on files before) seeds a store that has nothing yet,
        so switching backends does not prime the account again."""
        self._shared = _SharedCursors(store, channel, leadership)
        self._seed, self._data = self._data, {}

    @property
    def shared(self) -> bool:
        return self._shared is not None

    async def load(self) -> None:
        """Read the shared cursors (each time this node becomes the reader: the previous
        reader moved them) and start the writer. File state: nothing to do."""
        if self._shared is not None:
            await self._shared.stop()
            self._data = await self._shared.store.load(self._shared.channel)
            self._shared.start()
            if not self._data and self._seed:
                log.info("%s: the shared read position starts from %s", self._shared.channel,
                         self.path)
                self.update(self._seed)
            self._seed = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def set(self, key: str, value: Any, *, durable: bool = False) -> None:
        """Set and persist one value."""
        self.update({key: value}, durable=durable)

    def update(self, values: dict[str, Any], *, durable: bool = False) -> None:
        """Set several values and hand them to the writer in one atomic write.

        ``durable`` waits until the write is on disk (file state; shared state cannot block
        the loop it writes from: callers there `await drain()`)."""
        with self._lock:
            changed = {k: v for k, v in values.items() if self._data.get(k) != v}
            if not changed:
                return
            self._data.update(changed)
            if self._shared is not None:
                self._shared.queue(changed)
                return
            self._file.save(dict(self._data))
        if durable:
            self._file.flush()

    def snapshot(self) -> dict[str, Any]:
        return dict(self._data)

    async def publish(self, key: str, value: Any) -> None:
        """Store one value now, outside the reader's fence: for a key only this node writes,
        which the reader (perhaps on another node) picks up with `fetch()`. Raises if the
        backend cannot be reached. File state: the same as `set()`."""
        if self._shared is None:
            self.set(key, value)
            return
        await self._shared.store.update(self._shared.channel, {key: value})

    async def fetch(self, prefix: str) -> dict[str, Any]:
        """The values of the keys starting with `prefix` as stored now (other nodes write
        them on a shared account). Raises if the backend cannot be reached."""
        data = (self._data if self._shared is None
                else await self._shared.store.load(self._shared.channel))
        return {k: v for k, v in data.items() if k.startswith(prefix)}

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until the last update is on disk (file state; tests)."""
        return self._file.flush(timeout)

    async def drain(self, timeout: float = 10.0) -> bool:
        """Wait until every update is stored; False if it timed out or a shared write was
        refused (another node reads the account now)."""
        if self._shared is None:
            return await asyncio.to_thread(self._file.flush, timeout)
        return await self._shared.drain(timeout)

    async def close(self) -> None:
        """Stop the shared writer (after `drain()`; what is still queued is dropped: the next
        reader replays from the stored cursor, and the journal drops what it already has)."""
        if self._shared is not None:
            await self._shared.stop()


class _SharedCursors:
    """The writer of one channel's shared cursors: changes are merged while a write is on its
    way (the newest value of each key wins) and written in order, fenced by the lease."""

    def __init__(self, store: CursorStore, channel: str, leadership: AccountLeadership) -> None:
        self.store = store
        self.channel = channel
        self._leadership = leadership
        self._pending: dict[str, Any] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._refused = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._pending.clear()
        self._refused = False
        self._idle.set()
        self._task = asyncio.create_task(self._run(), name=f"cursors:{self.channel}")

    def queue(self, values: dict[str, Any]) -> None:
        if self._task is None or self._refused:
            return  # not the reader (or no longer): the current reader owns the cursors
        self._pending.update(values)
        self._idle.clear()
        self._wake.set()

    async def drain(self, timeout: float) -> bool:
        if self._task is None:
            return not self._refused
        lease = self._leadership.lease
        if lease is None:  # no longer the reader: nothing more can be stored
            return False
        timeout = min(timeout, max(0.0, lease.deadline - time.monotonic()))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)
        return self._idle.is_set() and not self._refused

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._pending.clear()
        self._idle.set()

    async def _run(self) -> None:
        failures = 0
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                values, self._pending = self._pending, {}
                lease = self._leadership.lease
                if lease is None:  # the term is over already: the next reader moves it
                    self._refuse(None)
                    return
                try:
                    stored = await self.store.update(self.channel, values, lease=lease)
                except Exception as exc:  # Redis unreachable: keep the values, retry
                    self._pending = {**values, **self._pending}
                    if failures == 0:
                        log.warning("%s: cannot store the read position (%s); retrying",
                                    self.channel, exc)
                    await asyncio.sleep(_RETRY_S[min(failures, len(_RETRY_S) - 1)])
                    failures += 1
                    continue
                if failures:
                    log.info("%s: the read position is stored again", self.channel)
                    failures = 0
                if not stored:
                    self._refuse("the backend refused a cursor write under our lease "
                                 f"(token {lease.token})")
                    return
            self._idle.set()

    def _refuse(self, reason: str | None) -> None:
        """Drop what is queued; with a `reason` (the backend refused a write under a lease we
        still believed in) end the reader's term too."""
        self._refused = True
        self._pending.clear()
        self._idle.set()
        if reason is not None:
            self._leadership.fence(reason)
