"""Leases for one process: the file backend's single daemon (one per workspace, the workspace
lock) needs no shared table, but code that runs on either backend holds leases, so they keep the
contract (fencing tokens grow, one holder at a time) in memory, for nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from soulflow.backends.base import Lease


@dataclass(slots=True)
class _Held:
    owner: str
    token: int
    expires: float


@dataclass(slots=True)
class MemoryLeases:
    """Leases for one process (the file backend's single daemon)."""

    clock: Callable[[], float] = time.monotonic
    _held: dict[str, _Held] = field(default_factory=dict)
    _fences: dict[str, int] = field(default_factory=dict)

    def _current(self, name: str) -> _Held | None:
        held = self._held.get(name)
        if held is not None and held.expires <= self.clock():
            del self._held[name]
            return None
        return held

    def is_current(self, lease: Lease) -> bool:
        held = self._current(lease.name)
        return held is not None and (held.owner, held.token) == (lease.owner, lease.token)

    async def acquire(self, name: str, owner: str, ttl_s: float) -> Lease | None:
        if self._current(name) is not None:
            return None
        token = self._fences.get(name, 0) + 1
        self._fences[name] = token
        now = self.clock()
        self._held[name] = _Held(owner, token, now + ttl_s)
        return Lease(name, owner, token, now + ttl_s * 2 / 3)

    async def renew(self, lease: Lease, ttl_s: float) -> Lease | None:
        if not self.is_current(lease):
            return None
        held = self._held[lease.name]
        now = self.clock()
        held.expires = now + ttl_s
        return Lease(lease.name, lease.owner, lease.token, now + ttl_s * 2 / 3)

    async def release(self, lease: Lease) -> bool:
        if not self.is_current(lease):
            return False
        del self._held[lease.name]
        return True

    async def holder(self, name: str) -> tuple[str, int] | None:
        held = self._current(name)
        return None if held is None else (held.owner, held.token)
