"""The file backend: the embedded default, every store in files under `runtime/`.

The file stores are synchronous and fast (an append to a buffered file); the bus's ones get the
asynchronous shape of `base.py` from thin adapters. One daemon owns a workspace
(`runtime/daemon.lock`), so every chat is this node's and leases are an in-memory table
(`leases.py`). Each store is built (its file read) on first use: a command that needs one store
(`soulflow cron`, `soulflow secret`) never opens the daemon's journals. The journals are
fsynced by the backend's one loop, "journals:sync", in a worker thread (`JOURNAL_FSYNC`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from soulflow.agent.run.timing import FinishedListener
from soulflow.backends.base import (
    SEEN_WINDOW_S,
    BackendKind,
    BackendUnavailable,
    LoopFactory,
    P,
    R,
)
from soulflow.backends.file.approvals import FileApprovalMap
from soulflow.backends.file.cron import FileCronStore
from soulflow.backends.file.cursors import FileCursors
from soulflow.backends.file.dead_letters import (
    DeadLetterQueue,
    FileDeadLetters,
    FileInboundDeadLetters,
    InboundDeadLetters,
)
from soulflow.backends.file.decisions import FileDecisionStore
from soulflow.backends.file.heartbeat import FileHeartbeatState
from soulflow.backends.file.inbound import FileInbound, InboundJournal
from soulflow.backends.file.leases import MemoryLeases
from soulflow.backends.file.outbox import FileOutbox, Outbox
from soulflow.backends.file.proposals import FileProposalMap
from soulflow.backends.file.runs import FileRunJournal
from soulflow.backends.file.sessions import FileSessionStore
from soulflow.backends.file.tasks import FileTaskStore
from soulflow.backends.file.usage import FileUsageStore
from soulflow.backends.file.vault import FileSecretEntries
from soulflow.backends.file.workflow import FileWorkflowLog


class Closed(Protocol):
    def close(self) -> None: ...


class Flushed(Closed, Protocol):
    def sync(self) -> None: ...


class Compacted(Closed, Protocol):
    @property
    def needs_compaction(self) -> bool: ...

    def compact(self) -> None: ...


class FileBackend:
    """The stores under `runtime/`, at the paths of the data map (ARCHITECTURE.md)."""

    kind = BackendKind.FILE
    shared = False  # one daemon per workspace: every chat is this node's
    notice_claims = None  # nobody else to tell a problem

    def __init__(self, runtime_dir: Path, *, node_id: str, fsync: str = "interval",
                 sync_interval_s: float = 1.0, seen_ttl_s: float = SEEN_WINDOW_S,
                 redact: Callable[[str], str] | None = None,
                 redact_strings: Callable[[Any], Any] | None = None,
                 on_run_finished: FinishedListener | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.runtime_dir = runtime_dir
        self.node_id = node_id
        self._fsync = fsync
        self._sync_interval_s = sync_interval_s
        self._seen_ttl_s = seen_ttl_s
        self._redact = redact
        self._redact_strings = redact_strings
        self._on_run_finished = on_run_finished
        self._clock = clock
        # the open files of the stores built so far: fsynced by the loop, compacted when they
        # have grown, closed by stop()
        self._flushed: list[Flushed] = []
        self._compacted: list[Compacted] = []
        self._closed: list[Closed] = []

    def _opened(self, file: Any, *, flushed: bool = True, compacted: bool = False) -> None:
        self._closed.append(file)
        if flushed:
            self._flushed.append(file)
        if compacted:
            self._compacted.append(file)

    # -- the bus's stores --------------------------------------------------------------

    @cached_property
    def inbound(self) -> FileInbound:
        journal = InboundJournal(self.runtime_dir / "bus" / "inbound.jsonl", fsync=self._fsync,
                                 seen_ttl_s=self._seen_ttl_s, clock=self._clock)
        self._opened(journal, compacted=True)
        return FileInbound(journal)

    @cached_property
    def outbox(self) -> FileOutbox:
        outbox = Outbox(self.runtime_dir / "bus" / "outbox.jsonl", fsync=self._fsync,
                        clock=self._clock)
        self._opened(outbox, compacted=True)
        return FileOutbox(outbox, self.inbound.complete)

    @cached_property
    def dlq(self) -> FileDeadLetters:
        letters = DeadLetterQueue(self.runtime_dir / "dlq" / "outbound.jsonl", clock=self._clock)
        self._opened(letters, flushed=False)  # written with fsync="always"
        return FileDeadLetters(letters)

    @cached_property
    def inbound_dlq(self) -> FileInboundDeadLetters:
        letters = InboundDeadLetters(self.runtime_dir / "dlq" / "inbound.jsonl",
                                     redact=self._redact, clock=self._clock)
        self._opened(letters, flushed=False)  # written with fsync="always"
        return FileInboundDeadLetters(letters)

    @cached_property
    def leases(self) -> MemoryLeases:
        return MemoryLeases()

    @cached_property
    def cursors(self) -> FileCursors:
        return FileCursors(self.runtime_dir / "bus" / "cursors", self.leases)

    # -- the agent's and the services' stores ------------------------------------------

    @cached_property
    def sessions(self) -> FileSessionStore:
        sessions = FileSessionStore(self.runtime_dir / "sessions", fsync=self._fsync,
                                    redact=self._redact)
        self._opened(sessions)
        return sessions

    @cached_property
    def runs(self) -> FileRunJournal:
        runs = FileRunJournal(self.runtime_dir / "threads", fsync=self._fsync,
                              redact=self._redact_strings, on_finished=self._on_run_finished)
        self._opened(runs, compacted=True)
        return runs

    @cached_property
    def approvals(self) -> FileApprovalMap:
        return FileApprovalMap(self.runtime_dir / "approvals" / "messages.json")

    @cached_property
    def task_prompts(self) -> FileApprovalMap:
        return FileApprovalMap(self.runtime_dir / "tasks" / "prompt-messages.json")

    @cached_property
    def cron(self) -> FileCronStore:
        return FileCronStore(self.runtime_dir / "cron" / "cron-store.json")

    @cached_property
    def tasks(self) -> FileTaskStore:
        return FileTaskStore(self.runtime_dir / "tasks")

    @cached_property
    def proposals(self) -> FileProposalMap:
        return FileProposalMap(self.runtime_dir / "tasks" / "proposals.json")

    @cached_property
    def workflow(self) -> FileWorkflowLog:
        return FileWorkflowLog(self.runtime_dir / "events", fsync=self._fsync)

    @cached_property
    def decisions(self) -> FileDecisionStore:
        return FileDecisionStore(self.runtime_dir / "decisions" / "index.json")

    @cached_property
    def secrets(self) -> FileSecretEntries:
        return FileSecretEntries(self.runtime_dir / "security" / "secrets.json")

    @cached_property
    def heartbeat(self) -> FileHeartbeatState:
        return FileHeartbeatState(self.runtime_dir / "heartbeat" / "state.json")

    @cached_property
    def usage(self) -> FileUsageStore:
        store = FileUsageStore(self.runtime_dir / "usage" / "usage.json")
        self._opened(store)  # written by the sync loop and at stop
        return store

    # -- lifecycle and ownership -------------------------------------------------------

    async def start(self) -> None:
        """Nothing to connect: each file is read when its store is first used."""

    def loops(self) -> dict[str, LoopFactory]:
        return {"journals:sync": self._sync_loop}

    async def _sync_loop(self) -> None:
        """fsync in a worker thread so the disk never stalls the event loop; compact journals
        that have grown, in the loop (they share in-memory state with it)."""
        while True:
            await asyncio.sleep(self._sync_interval_s)
            await asyncio.to_thread(self.sync)
            self.compact_if_needed()

    def owns(self, chat_key: str) -> bool:
        """One daemon per workspace: every chat is this node's."""
        return True

    def on_partitions_changed(self, callback: Callable[[], None]) -> None:
        """Ownership never changes here, so the callback is never called."""

    def hold_chats(self, running: Callable[[], Iterable[str]]) -> None:
        """Nothing is ever taken from this node."""

    def status(self) -> dict[str, Any]:
        return {"kind": str(self.kind), "node_id": self.node_id, "connected": True,
                "since": None, "last_error": "", "partitions": None}

    def unavailable(self, exc: BaseException) -> BackendUnavailable:
        return BackendUnavailable(f"the stores under {self.runtime_dir} failed: {exc}")


    async def offload(self, call: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Right here: the file stores are local, fast, and not made for threads."""
        return call(*args, **kwargs)
    def sync(self) -> None:
        """fsync every journal built (safe from a worker thread)."""
        for journal in tuple(self._flushed):
            journal.sync()

    def compact_if_needed(self) -> None:
        """Rewrite the journals that have grown (call from the event loop)."""
        for journal in self._compacted:
            if journal.needs_compaction:
                journal.compact()

    async def stop(self) -> None:
        """Compact and flush the journals, then close every store built."""
        self.compact_if_needed()
        self.sync()
        if (workflow := self.__dict__.get("workflow")) is not None:
            await workflow.close()
        for file in self._closed:
            file.close()
