"""Settings turned into the backend (`SOULFLOW_BACKEND`, `REDIS_URL`, …): the one place that
picks files or Redis. Everything else is handed the `Backend` and its stores.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soulflow.agent.run.timing import FinishedListener
from soulflow.backends.base import Backend, BackendKind, BackendUnavailable
from soulflow.backends.file.backend import FileBackend
from soulflow.errors import StoreError


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
    sync_interval_s: float = 1.0  # how often the file journals are fsynced

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
                   fsync=settings["JOURNAL_FSYNC"],
                   sync_interval_s=int(settings["JOURNAL_FSYNC_INTERVAL_MS"]) / 1000)


def build_backend(config: BackendConfig, runtime_dir: Path, *,
                  redact: Callable[[str], str] | None = None,
                  redact_strings: Callable[[Any], Any] | None = None,
                  on_run_finished: FinishedListener | None = None) -> Backend:
    """The backend, not started (nothing is connected yet): the daemon builds its services
    around it, then `await backend.start()` first thing in `Runtime.start()`. A missing or
    malformed REDIS_URL is a BackendUnavailable (one sentence, exit status != 0).

    `redact` blanks known secrets in what the stores keep as text (sessions, inbound dead
    letters), `redact_strings` in the run journals' records; `on_run_finished` hears each
    run's status and duration (the daemon's /metrics)."""
    node_id = config.node_id or default_node_id()
    if config.kind is BackendKind.FILE:
        return FileBackend(runtime_dir, node_id=node_id, fsync=config.fsync,
                           sync_interval_s=config.sync_interval_s, redact=redact,
                           redact_strings=redact_strings, on_run_finished=on_run_finished)
    if not config.redis_url:
        raise BackendUnavailable("SOULFLOW_BACKEND=redis needs REDIS_URL "
                                 "(e.g. redis://localhost:6379/0)")
    from soulflow.backends.redis.backend import RedisBackend, client_for

    client = client_for(config.redis_url, socket_timeout_s=max(1.0, config.lease_ttl_s / 2))
    return RedisBackend(client, node_id=node_id, prefix=config.key_prefix,
                        partitions=config.partitions, lease_ttl_s=config.lease_ttl_s,
                        redact=redact, redact_strings=redact_strings,
                        on_run_finished=on_run_finished, url=config.redis_url)


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
        await backend.stop()
        raise
    return backend


@contextmanager
def command_backend(config: BackendConfig, runtime_dir: Path) -> Iterator[Backend]:
    """For `soulflow cron` / `soulflow secret` without a daemon: the backend built but not
    started (this process takes no partition of chats, nothing is read until a store is used),
    stopped afterwards (what it built flushed and closed); a store that fails meanwhile (Redis
    away) is one sentence for the operator (`BackendUnavailable`), not a traceback."""
    backend = build_backend(config, runtime_dir)
    try:
        yield backend
    except StoreError as exc:
        raise backend.unavailable(exc) from None
    finally:
        _stop(backend)


def _stop(backend: Backend) -> None:
    """Stop a backend from synchronous code: on an event loop of its own, in a worker thread
    when the caller already runs one (a command called from async code, as tests do)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(backend.stop())
        return
    worker = threading.Thread(target=asyncio.run, args=(backend.stop(),),
                              name="backend-stop")
    worker.start()
    worker.join()
