"""redis-py's asyncio connections with a cheaper write: the write timeout as a scope on the
caller's task instead of a task of its own.

redis-py bounds each write with `asyncio.wait_for(..., socket_timeout)`, which on Python 3.11
wraps the write in a new Task for every command sent: on the bus that is a task, its first
step and its wake-up per round trip, about a tenth of the daemon's CPU per message
(`python bench/pipeline.py --backend redis`). `asyncio.timeout` gives the same bound from
inside the calling task. Everything else (connecting, health checks, a failed write
disconnecting and raising redis-py's own errors) stays redis-py's: this class only replaces
the step that carried the task, and hands every other case to it unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["ScopedWriteTimeout", "lean_connection_class"]


class ScopedWriteTimeout(AbstractConnection):
    """The write step of the bus's connections (the module docstring says why)."""

    async def send_packed_command(self, command: str | bytes | Iterable[bytes],
                                  check_health: bool = True) -> None:
        if not self.socket_timeout or not self.is_connected:
            # no timeout to apply, or a (re)connect first: redis-py's own path
            await super().send_packed_command(command, check_health)
            return
        if check_health:
            await self.check_health()
        if isinstance(command, str):
            command = command.encode()
        if isinstance(command, bytes):
            command = [command]
        try:
            async with asyncio.timeout(self.socket_timeout):
                await self._send_packed_command(command)
        except TimeoutError:
            await self.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout writing to socket") from None
        except OSError as exc:
            await self.disconnect(nowait=True)
            raise RedisConnectionError(f"Error while writing to socket: {exc}") from exc
        except BaseException:
            # a write cut off half-way leaves the stream unusable: never pool it again
            await self.disconnect(nowait=True)
            raise


class _LeanConnection(ScopedWriteTimeout, Connection):
    pass


class _LeanSSLConnection(ScopedWriteTimeout, SSLConnection):
    pass


class _LeanUnixConnection(ScopedWriteTimeout, UnixDomainSocketConnection):
    pass


_LEAN: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: _LeanConnection,
    SSLConnection: _LeanSSLConnection,
    UnixDomainSocketConnection: _LeanUnixConnection,
}


def lean_connection_class(chosen: type[AbstractConnection]) -> type[AbstractConnection]:
    """The lean twin of the class redis-py chose for a URL (`redis://`, `rediss://`,
    `unix://`); any other class (a test's own, say) is kept as it is."""
    return _LEAN.get(chosen, chosen)
