"""The base of what the file layer refuses: `StorageError`.

A path that is a link or climbs out of its root (`beneath.RefusedPath`, also an `OSError`, so
code that reads files already handles it), a `.env` that is not safe to read
(`env_file.UnsafeEnvFile`) and a workspace another process holds (`lock.WorkspaceLocked`).
An I/O failure of the files themselves stays the `OSError` the kernel gave.
"""

from __future__ import annotations

from soulflow.errors import SoulFlowError

__all__ = ["StorageError"]


class StorageError(SoulFlowError):
    """The file layer refused to open, read or lock what it was asked to."""
