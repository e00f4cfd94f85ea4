"""Small JSON files written off the caller's thread, the latest value winning.

A channel's cursor file and the approval-message map change on the event loop, often (every
Telegram batch moves the offset), and each atomic write costs a file fsync and a directory
fsync. `BackgroundJsonFile.save` only hands the new value over: one writer thread per file
writes it atomically, and values saved while a write is under way collapse into the next one.

Crash safety is unchanged for the callers: they save after what the value refers to is
journaled (the journal's bytes are in the kernel before `save` returns), so a crash before
the write lands replays from the older value, never skips. `flush()` waits until the last
saved value is on disk (shutdown, tests); `close()` flushes and refuses later saves.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from soulflow.storage.atomic import write_json_atomic

log = logging.getLogger(__name__)


class BackgroundJsonFile:
    """One JSON file with a coalescing writer thread that exists only while there is work."""

    def __init__(self, path: Path, *, indent: int | None = 2, mode: int = 0o644) -> None:
        self.path = path
        self._indent = indent
        self._mode = mode
        self._cond = threading.Condition()
        self._pending: Any = None
        self._has_pending = False
        self._saved = 0  # generation of the last value handed over
        self._written = 0  # generation of the last value on disk (or given up on)
        self._worker: threading.Thread | None = None
        self._closed = False
        self.last_error: BaseException | None = None

    def save(self, value: Any) -> None:
        """Queue `value` (a snapshot the caller no longer mutates) to replace the file."""
        with self._cond:
            if self._closed:
                raise RuntimeError(f"{self.path} is closed")
            self._pending, self._has_pending = value, True
            self._saved += 1
            if self._worker is None:
                self._worker = threading.Thread(target=self._drain, daemon=False,
                                                name=f"storage-writer:{self.path.name}")
                self._worker.start()

    def _drain(self) -> None:
        while True:
            with self._cond:
                if not self._has_pending:
                    self._worker = None
                    self._cond.notify_all()
                    return
                value, generation = self._pending, self._saved
                self._pending, self._has_pending = None, False
            try:
                write_json_atomic(self.path, value, indent=self._indent, mode=self._mode)
                error = None
            except Exception as exc:  # keep the thread's contract: log, remember, go on
                log.exception("writing %s failed; the next change retries", self.path)
                error = exc
            with self._cond:
                self._written = generation
                self.last_error = error
                self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything saved so far is written; False on timeout."""
        with self._cond:
            target = self._saved
            return self._cond.wait_for(lambda: self._written >= target, timeout)

    def close(self, timeout: float | None = None) -> bool:
        with self._cond:
            self._closed = True
        return self.flush(timeout)
