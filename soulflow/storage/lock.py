"""One daemon per workspace: an advisory lock file that the kernel releases when we die.

`flock` is tied to the open file description, so a `kill -9` frees it at once and a restart
never has to clean up a stale lock by hand.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from soulflow.storage.errors import StorageError


class WorkspaceLocked(StorageError):
    """Another live process holds the workspace."""

    def __init__(self, path: Path, holder: str) -> None:
        who = f" (pid {holder})" if holder else ""
        super().__init__(f"another SoulFlow process{who} is already running in this workspace "
                         f"(lock file {path}); stop it first or use another --workspace")
        self.path = path
        self.holder = holder


class WorkspaceLock:
    """Exclusive, non-blocking lock on `runtime/daemon.lock`; holds the owner's pid."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            raise WorkspaceLocked(self.path, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def is_locked_by_other(self) -> bool:
        """True when a live process holds the lock (used by CLI commands to find the daemon)."""
        if not self.path.exists():
            return False
        fd = os.open(self.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def __enter__(self) -> WorkspaceLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
