"""Build the configured backend from settings (`SOULFLOW_BACKEND`, `REDIS_URL`, …)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soulflow.backends.base import Backend, BackendKind, BackendUnavailable
from soulflow.backends.file import FileBackend


def default_node_id() -> str:
    """Hostname and pid: unique among live daemons, readable in logs and in Redis."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, slots=True)
class BackendConfig:
    kind: BackendKind = BackendKind.FILE
    redis_url: str = ""
    node_id: str = ""
    key_prefix: str = "soulflow:"
    partitions: int = 16
    lease_ttl_s: float = 6.0
    fsync: str = "interval"

    @classmethod
    def from_settings(cls, settings: Any) -> BackendConfig:
        """From validated `Settings` (anything indexable by setting name)."""
        return cls(kind=BackendKind(settings["SOULFLOW_BACKEND"]),
                   redis_url=settings["REDIS_URL"],
                   node_id=settings["SOULFLOW_NODE_ID"] or default_node_id(),
                   key_prefix=settings["REDIS_KEY_PREFIX"],
                   partitions=int(settings["REDIS_PARTITIONS"]),
                   lease_ttl_s=float(settings["REDIS_LEASE_TTL_S"]),
                   fsync=settings["JOURNAL_FSYNC"])


async def open_backend(config: BackendConfig, runtime_dir: Path, *,
                       redact: Callable[[str], str] | None = None) -> Backend:
    """The backend, started. A Redis that cannot be used is a BackendUnavailable (one sentence,
    exit status != 0 from `soulflow run`)."""
    node_id = config.node_id or default_node_id()
    if config.kind is BackendKind.FILE:
        backend: Backend = FileBackend(runtime_dir, node_id=node_id, fsync=config.fsync,
                                       redact=redact)
        await backend.start()
        return backend
    if not config.redis_url:
        raise BackendUnavailable("SOULFLOW_BACKEND=redis needs REDIS_URL "
                                 "(e.g. redis://localhost:6379/0)")
    from soulflow.backends.redis.backend import RedisBackend, connect

    client = await connect(config.redis_url, socket_timeout_s=max(1.0, config.lease_ttl_s / 2))
    backend = RedisBackend(client, node_id=node_id, prefix=config.key_prefix,
                           partitions=config.partitions, lease_ttl_s=config.lease_ttl_s,
                           redact=redact)
    try:
        await backend.start()
    except BaseException:
        await client.aclose()
        raise
    return backend


async def refuse_unwired_backend(config: BackendConfig) -> None:
    """Boot guard for the daemon while only the stores run on Redis: with
    SOULFLOW_BACKEND=redis, a bad or unreachable REDIS_URL is reported as such, and a working
    one is refused too, because the channels and the agent still use the files (a daemon that
    quietly ran on files would look highly available and not be). docs/scaling.md says what
    exists today."""
    if config.kind is BackendKind.FILE:
        return
    if not config.redis_url:
        raise BackendUnavailable("SOULFLOW_BACKEND=redis needs REDIS_URL "
                                 "(e.g. redis://localhost:6379/0)")
    from soulflow.backends.redis.backend import connect, shown_url

    client = await connect(config.redis_url)
    await client.aclose()
    raise BackendUnavailable(
        f"SOULFLOW_BACKEND=redis: Redis at {shown_url(config.redis_url)} answers, but this "
        "version of the daemon does not run on it yet (see docs/scaling.md); set "
        "SOULFLOW_BACKEND=file")
