"""The file backend: the embedded default, every store in files under `runtime/`.

The file stores are synchronous and fast (an append to a buffered file); the bus's ones get the
asynchronous shape of `base.py` from thin adapters. One daemon owns a workspace
(`runtime/daemon.lock`), so leases here are an in-memory table (`leases.py`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from soulflow.backends.base import BackendKind
from soulflow.backends.file.cursors import FileCursors
from soulflow.backends.file.dead_letters import (
    DeadLetterQueue,
    FileDeadLetters,
    FileInboundDeadLetters,
    InboundDeadLetters,
)
from soulflow.backends.file.inbound import FileInbound, InboundJournal
from soulflow.backends.file.leases import MemoryLeases
from soulflow.backends.file.outbox import FileOutbox, Outbox


class FileBackend:
    """The journals under `runtime/bus/` and `runtime/dlq/`, as the data map lists them."""

    kind = BackendKind.FILE

    def __init__(self, runtime_dir: Path, *, node_id: str, fsync: str = "interval",
                 seen_ttl_s: float = 7 * 24 * 3600,
                 redact: Callable[[str], str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.node_id = node_id
        self.inbound = FileInbound(InboundJournal(runtime_dir / "bus" / "inbound.jsonl",
                                                  fsync=fsync, seen_ttl_s=seen_ttl_s,
                                                  clock=clock))
        self.outbox = FileOutbox(Outbox(runtime_dir / "bus" / "outbox.jsonl", fsync=fsync,
                                        clock=clock))
        self.dlq = FileDeadLetters(DeadLetterQueue(runtime_dir / "dlq" / "outbound.jsonl",
                                                   clock=clock))
        self.inbound_dlq = FileInboundDeadLetters(InboundDeadLetters(
            runtime_dir / "dlq" / "inbound.jsonl", redact=redact, clock=clock))
        self.leases = MemoryLeases()
        self.cursors = FileCursors(runtime_dir / "bus" / "cursors", self.leases)

    async def start(self) -> None:
        """Nothing to connect: the files were loaded when the backend was built."""

    def owns(self, chat_key: str) -> bool:
        """One daemon per workspace: every chat is this node's."""
        return True

    def on_partitions_changed(self, callback: Callable[[], None]) -> None:
        """Ownership never changes here, so the callback is never called."""

    def status(self) -> dict[str, Any]:
        return {"kind": str(self.kind), "node_id": self.node_id, "connected": True,
                "since": None, "last_error": "", "partitions": None}

    def sync(self) -> None:
        self.inbound.journal.sync()
        self.outbox.outbox.sync()

    def compact_if_needed(self) -> None:
        journal, outbox = self.inbound.journal, self.outbox.outbox
        if journal.needs_compaction:
            journal.compact()
        if outbox.needs_compaction:
            outbox.compact()

    async def close(self) -> None:
        self.inbound.journal.close()
        self.outbox.outbox.close()
        self.dlq.dlq.close()
        self.inbound_dlq.letters.close()
