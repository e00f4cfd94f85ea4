"""Agent runs on files: one append-only journal of every run's events.

`runtime/threads/journal.jsonl` holds `{"run": id, "type", "at", "data"}` records, so an event
costs one append on an open file (a file per run cost more in file creation than the whole
rest of a message). Unfinished runs are kept in memory and rebuilt from the journal at boot;
compaction moves finished runs to `runtime/threads/archive/YYYY-MM-DD.jsonl`, where the
thread of a past run can still be read.

The archive is for reading what a run did (debugging, a user's complaint), not state the daemon
needs, and it grows with every message (about 1.5 KB a run). Compaction keeps the newest
`ARCHIVE_DAYS` daily files, and of those at most `ARCHIVE_MAX_BYTES` (the newest day always
stays); older days are deleted, logged. Copy `archive/` away first to keep more.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import soulflow.agent.run.events as ev
from soulflow.agent.run.reducer import RunState, apply_in_place, fold
from soulflow.agent.run.timing import FinishedListener, report_finished
from soulflow.storage.jsonl import JsonlFile

log = logging.getLogger(__name__)

COMPACT_AFTER = 50_000  # journal records appended before a runtime compaction
ARCHIVE_CHUNK = 1_000  # records a compaction holds at once on their way to the archive
RECENT_FINISHED = 100  # finished runs whose events stay in memory
ARCHIVE_DAYS = 7  # daily archive files kept (the Redis backend keeps finished runs 24 h)
ARCHIVE_MAX_BYTES = 1024 * 2**20  # and at most this much of them


def prune_archive(directory: Path, *, days: int = ARCHIVE_DAYS,
                  max_bytes: int = ARCHIVE_MAX_BYTES) -> list[Path]:
    """Delete the daily archive files past the newest `days`, or past `max_bytes` counted
    from the newest (which always stays); returns what was deleted."""
    files = sorted(directory.glob("????-??-??.jsonl"), reverse=True)  # newest day first
    kept_bytes, doomed = 0, []
    for index, path in enumerate(files):
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            continue
        kept_bytes += size
        if index > 0 and (index >= days or kept_bytes > max_bytes):
            doomed.append(path)
    for path in doomed:
        path.unlink(missing_ok=True)
    if doomed:
        log.info("run archive: deleted %d day(s) past the newest %d or %d MiB (%s..%s)",
                 len(doomed), days, max_bytes // 2**20, doomed[-1].stem, doomed[0].stem)
    return doomed


def _record(run_id: str, event: ev.Event) -> dict[str, Any]:
    return {"run": run_id, **event.to_dict()}


class FileRunJournal:
    """`RunJournal` in files: unfinished runs in memory and in `journal.jsonl`, finished ones in
    the archive. With `on_finished`, each run's status and duration is reported once, when the
    event that finishes it is appended (`agent/run/timing.py`)."""

    def __init__(self, directory: Path, *, fsync: str = "interval",
                 redact: Callable[[Any], Any] | None = None,
                 on_finished: FinishedListener | None = None) -> None:
        self.directory = directory
        # what reaches the disk is redacted (known credentials); memory keeps the run as is
        self._redact = redact
        self._on_finished = on_finished
        self._journal = JsonlFile(directory / "journal.jsonl", fsync=fsync)
        self._events: dict[str, list[ev.Event]] = {}
        self._states: dict[str, RunState] = {}
        self._finished: OrderedDict[str, list[ev.Event]] = OrderedDict()
        records = self._journal.read_all()
        for record in records:
            event = ev.Event.from_dict(record)
            run_id = record.get("run")
            if event is not None and isinstance(run_id, str):
                self._events.setdefault(run_id, []).append(event)
        for run_id, events in list(self._events.items()):
            state = fold(events)
            if state.finished:
                self._remember_finished(run_id, self._events.pop(run_id))
            else:
                self._states[run_id] = state
        self._appended = 0
        self.compact(records)  # the records just read: boot reads the journal once

    def append(self, run_id: str, event: ev.Event) -> RunState:
        """Persist an event, then fold it into the run's state."""
        self._journal.append(self._disk_record(run_id, event))
        self._appended += 1
        events = self._events.setdefault(run_id, [])
        events.append(event)
        state = self._states.setdefault(run_id, RunState())
        apply_in_place(state, event)
        if state.finished:
            self._remember_finished(run_id, self._events.pop(run_id))
            del self._states[run_id]
        if self._on_finished is not None:
            report_finished(self._on_finished, self.events, run_id, event, state)
        return state

    def _disk_record(self, run_id: str, event: ev.Event) -> dict[str, Any]:
        record = _record(run_id, event)
        return self._redact(record) if self._redact is not None else record

    def _remember_finished(self, run_id: str, events: list[ev.Event]) -> None:
        self._finished[run_id] = events
        while len(self._finished) > RECENT_FINISHED:
            self._finished.popitem(last=False)

    def state(self, run_id: str) -> RunState:
        state = self._states.get(run_id)
        return state if state is not None else fold(self.events(run_id))

    def events(self, run_id: str) -> list[ev.Event]:
        """A run's events: from memory, or from the archive for long-finished runs."""
        if run_id in self._events:
            return list(self._events[run_id])
        if run_id in self._finished:
            return list(self._finished[run_id])
        found: list[ev.Event] = []
        for path in sorted((self.directory / "archive").glob("*.jsonl"), reverse=True):
            for record in JsonlFile(path).iter_records():
                if record.get("run") == run_id and (event := ev.Event.from_dict(record)):
                    found.append(event)
            if found:
                break
        return found

    def find(self, *, inbound_key: str | None = None, chat_key: str | None = None,
             statuses: frozenset[str] | None = None) -> list[str]:
        """Unfinished runs matching an inbound message or a chat (`provider:chat_id`)."""
        found = []
        for run_id, state in self._states.items():
            if statuses is not None and state.status not in statuses:
                continue
            if inbound_key is not None and state.inbound_key != inbound_key:
                continue
            if chat_key is not None and state.chat.key != chat_key:
                continue
            found.append(run_id)
        return found

    def claim(self, run_id: str) -> bool:
        """One daemon owns the whole workspace (the workspace lock): nothing to take over."""
        return True

    @property
    def needs_compaction(self) -> bool:
        return self._appended > COMPACT_AFTER

    def compact(self, records: list[dict[str, Any]] | None = None) -> None:
        """Move finished runs' events to the archive; keep only unfinished runs' events.

        The journal is read and archived `ARCHIVE_CHUNK` records at a time: up to
        `COMPACT_AFTER` records held at once made each compaction a step of tens of MiB in
        the daemon's memory (seen in the 2-hour soak)."""
        source = records if records is not None else self._journal.iter_records()
        archive: JsonlFile | None = None
        chunk: list[dict[str, Any]] = []
        for record in source:
            if record.get("run") in self._states:
                continue
            chunk.append(record)
            if len(chunk) >= ARCHIVE_CHUNK:
                archive = self._archive(archive, chunk)
        if chunk:
            archive = self._archive(archive, chunk)
        if archive is not None:
            archive.close()
            prune_archive(self.directory / "archive")
        self._journal.rewrite(self._disk_record(run_id, event)
                              for run_id, events in self._events.items() for event in events)
        self._appended = 0

    def _archive(self, archive: JsonlFile | None, chunk: list[dict[str, Any]]) -> JsonlFile:
        """Append a chunk of finished runs' records to today's archive file (opened on the
        first chunk); the chunk is emptied for the next one."""
        if archive is None:
            archive = JsonlFile(self.directory / "archive" /
                                f"{dt.date.today().isoformat()}.jsonl")
        archive.append_many(chunk)
        chunk.clear()
        return archive

    async def preload(self, chat_key: str) -> None:
        """Nothing to read ahead: the open runs are indexed in memory."""

    async def find_inbound(self, inbound_key: str, chat_key: str | None = None) -> list[str]:
        """`find()`: the index is in memory."""
        return self.find(inbound_key=inbound_key)

    async def read_ahead(self, run_ids: list[str]) -> None:
        """Nothing to read: unfinished runs are in memory, finished ones read on demand."""

    async def find_open(self, statuses: frozenset[str] | None = None, *,
                        chats: Callable[[str], bool] | None = None) -> list[str]:
        """`find()`, filtered by chat: the index and the states are in memory."""
        return [run_id for run_id in self.find(statuses=statuses)
                if chats is None or chats(self._states[run_id].chat.key)]

    async def settle(self, run_id: str | None = None) -> None:
        """Nothing on its way: each append is written before it returns."""

    def sync(self) -> None:
        self._journal.sync()

    def close(self) -> None:
        self._journal.close()
