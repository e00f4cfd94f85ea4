"""Child-process plumbing shared by the shell tool and the Python sandbox.

Both start children in a new session (own process group) so that one ``killpg`` removes the
child and everything it started. Output goes through an `OutputPipe` we own rather than
asyncio's subprocess pipes: a process that escaped the group (``setsid``) can keep a pipe open
indefinitely, and only a pipe we own can be abandoned and closed cleanly at that point. The
capture keeps a capped prefix and keeps draining, so a chatty child neither exhausts our
memory nor blocks on a full pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

DRAIN_AFTER_KILL_S = 2.0
_POLL_MAX_S = 0.05


class _Capture(asyncio.Protocol):
    """Keeps the first ``cap`` bytes received and counts (discards) the rest."""

    def __init__(self, cap: int, eof: asyncio.Future[None]) -> None:
        self.cap = cap
        self.kept = bytearray()
        self.dropped = 0
        self._eof = eof

    def data_received(self, data: bytes) -> None:
        room = max(self.cap - len(self.kept), 0)
        self.kept += data[:room]
        self.dropped += max(len(data) - room, 0)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._eof.done():
            self._eof.set_result(None)


class OutputPipe:
    """A pipe whose write end is handed to a child and whose read end we capture.

    Usage: ``fd = await pipe.open()``, start the child with ``stdout=fd``, call
    `close_writer` right after spawning (or EOF never comes), and `finish` at the end.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._write_fd: int | None = None
        self._transport: asyncio.ReadTransport | None = None
        self._capture: _Capture | None = None
        self._eof: asyncio.Future[None] | None = None

    async def open(self) -> int:
        loop = asyncio.get_running_loop()
        read_fd, self._write_fd = os.pipe()
        self._eof = loop.create_future()
        eof = self._eof
        reader = os.fdopen(read_fd, "rb", buffering=0)
        self._transport, self._capture = await loop.connect_read_pipe(
            lambda: _Capture(self.cap, eof), reader
        )
        return self._write_fd

    def close_writer(self) -> None:
        if self._write_fd is not None:
            os.close(self._write_fd)
            self._write_fd = None

    async def finish(self) -> None:
        """Wait briefly for EOF, then close the read end whatever happened."""
        self.close_writer()
        if self._eof is not None and not self._eof.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._eof), DRAIN_AFTER_KILL_S)
        if self._transport is not None:
            self._transport.close()

    @property
    def data(self) -> bytes:
        return bytes(self._capture.kept) if self._capture else b""

    @property
    def dropped(self) -> int:
        return self._capture.dropped if self._capture else 0

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def kill_process_group(pgid: int) -> None:
    """SIGKILL every process in the group; a group that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def wait_or_kill(proc: asyncio.subprocess.Process, timeout: float,
                       stop: asyncio.Future[Any] | None = None) -> bool:
    """Wait up to ``timeout`` s for ``proc`` to exit, or until ``stop`` is done; then (or on
    cancellation) kill its group.

    Returns True if the time ran out. The group is killed even when the process exited on its
    own, so background children (``sleep 100 &``) never outlive the call.
    """
    try:
        exited = await wait_for_exit(proc, timeout, stop)
        return not exited and not (stop is not None and stop.done())
    finally:
        kill_process_group(proc.pid)
        await wait_for_exit(proc, DRAIN_AFTER_KILL_S)


async def wait_for_exit(proc: asyncio.subprocess.Process, timeout: float,
                        stop: asyncio.Future[Any] | None = None) -> bool:
    """True once ``proc`` has exited, False if ``timeout`` s pass (or ``stop`` is done) first.

    Polls ``returncode`` instead of awaiting ``proc.wait()``: on Python 3.11 ``wait()`` also
    waits for the process's asyncio pipes to close, which is not what "exited" means.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.002
    while proc.returncode is None:
        remaining = deadline - loop.time()
        if remaining <= 0 or (stop is not None and stop.done()):
            return False
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 2, _POLL_MAX_S)
    return True
