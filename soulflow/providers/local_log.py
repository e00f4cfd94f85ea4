"""The local model server's log, `runtime/local-model/server.log`: the server's stdout and
stderr, marked where each launch starts, kept under LOG_ROTATE_BYTES.

The llama.cpp server logs every request, so the log grows with traffic. It is rotated in two
ways: at a launch (nothing writes to it then) by renaming it to `server.log.1`; while the
server runs (`trim()`, from the supervisor's health checks) by copying it to `server.log.1`
and emptying it in place, because the server writes through an `O_APPEND` descriptor: its
next line lands at the new end, where a rename would leave it writing to the old file. A line
written between the copy and the cut is lost; that is the price of not restarting the server.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import time
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

LOG_ROTATE_BYTES = 5_000_000


class ServerLog:
    """The log file, and where the current launch's output starts in it (for `tail()`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rotated = path.with_name(path.name + ".1")
        self._offset = 0

    def open_for_launch(self, command: list[str]) -> IO[bytes]:
        """The log, rotated when big, marked where this launch's output starts; the caller
        hands it to the server as stdout and closes its own copy."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            if self.path.stat().st_size > LOG_ROTATE_BYTES:
                self.path.replace(self.rotated)
        handle = open(self.path, "ab")  # noqa: SIM115 - the caller closes it
        handle.write(f"===== {time.strftime('%F %T')} starting: {shlex.join(command)}\n".encode())
        handle.flush()
        self._offset = handle.tell()
        return handle

    def trim(self) -> None:
        """Past LOG_ROTATE_BYTES, copy the log to `server.log.1` and empty it in place
        (blocking: from a worker thread)."""
        try:
            if self.path.stat().st_size <= LOG_ROTATE_BYTES:
                return
            shutil.copyfile(self.path, self.rotated)
            os.truncate(self.path, 0)
        except OSError as exc:
            log.warning("could not rotate %s: %s", self.path, exc)
            return
        self._offset = 0

    def tail(self, count: int = 20) -> str:
        """The last `count` lines the current launch wrote, for an error message."""
        try:
            text = self.path.read_bytes()[self._offset:].decode("utf-8", "replace")
        except OSError as exc:
            return f"(log unreadable: {exc})"
        return "\n".join(text.strip().splitlines()[-count:]) or "(the server wrote nothing)"
