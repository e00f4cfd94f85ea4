"""Build the configured backend from settings (`SOULFLOW_BACKEND`, `REDIS_URL`, …)."""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soulflow.backends.base import Backend, BackendKind, BackendUnavailable
from soulflow.backends.file.backend import FileBackend


def default_node_id(workspace: Path | None = None) -> str:
    """Hostname and a digest of the workspace's path: unique among live daemons (one daemon
    per workspace), readable in logs and in Redis, and the same after a restart, so the node's
    own local chat (its private partition, keyed by the node id) is still its own. Without a
    workspace (a bare config): hostname and pid."""
    if workspace is None:
        return f"{socket.gethostname()}-{os.getpid()}"
    digest = hashlib.sha256(str(workspace.resolve()).encode()).hexdigest()[:8]
    return f"{socket.gethostname()}-{digest}"


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
                   node_id=settings["SOULFLOW_NODE_ID"] or default_node_id(
                       getattr(settings, "workspace", None)),
                   key_prefix=settings["REDIS_KEY_PREFIX"],
                   partitions=int(settings["REDIS_PARTITIONS"]),
                   lease_ttl_s=float(settings["REDIS_LEASE_TTL_S"]),
                   fsync=settings["JOURNAL_FSYNC"])


def build_backend(config: BackendConfig, runtime_dir: Path, *,
                  redact: Callable[[str], str] | None = None) -> Backend:
    """The backend, not started (nothing is connected yet): the daemon builds its services
    around it, then `await backend.start()` first thing in `Runtime.start()`. A missing or
    malformed REDIS_URL is a BackendUnavailable (one sentence, exit status != 0)."""
    node_id = config.node_id or default_node_id()
    if config.kind is BackendKind.FILE:
        return FileBackend(runtime_dir, node_id=node_id, fsync=config.fsync, redact=redact)
    if not config.redis_url:
        raise BackendUnavailable("SOULFLOW_BACKEND=redis needs REDIS_URL "
                                 "(e.g. redis://localhost:6379/0)")
    from soulflow.backends.redis.backend import RedisBackend, client_for

    client = client_for(config.redis_url, socket_timeout_s=max(1.0, config.lease_ttl_s / 2))
    return RedisBackend(client, node_id=node_id, prefix=config.key_prefix,
                        partitions=config.partitions, lease_ttl_s=config.lease_ttl_s,
                        redact=redact, url=config.redis_url)


async def open_backend(config: BackendConfig, runtime_dir: Path, *,
                       redact: Callable[[str], str] | None = None,
                       join: bool = True) -> Backend:
    """The backend, started. A Redis that cannot be used is a BackendUnavailable (one sentence,
    exit status != 0 from `soulflow run`). `join=False` (a CLI command on the stores): Redis is
    only checked, this process takes no partition of chats, so no node's work moves to it."""
    backend = build_backend(config, runtime_dir, redact=redact)
    try:
        if join or config.kind is BackendKind.FILE:
            await backend.start()
        else:
            from soulflow.backends.redis.backend import RedisBackend, check_reachable

            assert isinstance(backend, RedisBackend)
            await check_reachable(backend.client, config.redis_url)
    except BaseException:
        await backend.close()
        raise
    return backend
