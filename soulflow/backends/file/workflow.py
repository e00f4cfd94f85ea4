"""Workflow events on files: `runtime/events/events.jsonl`, one event per line, and
`runtime/events/index.json`, the ids of the last `index_size` events for dedupe.

The journal is capped: once it passes `rotate_bytes` (8 MiB, about 16,000 events) it is
renamed to `events.1.jsonl`, replacing the previous one, so the two hold at most about twice
that (the Redis backend keeps the newest 10,000 events). `recent()` reads the newest first
and reaches into `events.1.jsonl` when the current file is short; the dedupe index is its own
file and outlives a rotation.

Appends go through the storage JSONL path (one write per line, torn lines repaired); the index
is rebuilt from the journal's tail at boot, so a crash between the two writes cannot let a
replay through.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from pathlib import Path
from typing import Any

from soulflow.storage.atomic import read_json, write_json_atomic
from soulflow.storage.jsonl import JsonlFile, tail_of

INDEX_VERSION = 1
DEFAULT_INDEX_SIZE = 10_000  # event ids remembered for dedupe
ROTATE_BYTES = 8 * 2**20  # events.jsonl is renamed to events.1.jsonl past this size


class FileWorkflowLog:
    """`WorkflowLog` in files: `events.jsonl` plus `index.json` (the last `index_size` ids) in
    one directory."""

    def __init__(self, directory: Path, *, index_size: int = DEFAULT_INDEX_SIZE,
                 fsync: str = "interval", rotate_bytes: int = ROTATE_BYTES) -> None:
        self.index_size = index_size
        self.rotate_bytes = rotate_bytes
        self.journal = JsonlFile(directory / "events.jsonl", fsync=fsync)
        self.rotated = JsonlFile(directory / "events.1.jsonl", fsync=fsync)
        self._size = self.journal.size_bytes()
        self.index_path = directory / "index.json"
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._index_dirty = False
        self._index_lock = asyncio.Lock()
        self._load_index()

    def _load_index(self) -> None:
        data = read_json(self.index_path, {})  # unreadable: moved aside, rebuilt from the tail
        ids = data.get("ids", []) if isinstance(data, dict) else []
        for event_id in ids:
            self._remember(str(event_id))
        for record in self.recent(self.index_size):
            if isinstance(record.get("event_id"), str):
                self._remember(record["event_id"])

    def _remember(self, event_id: str) -> None:
        self._seen[event_id] = None
        self._seen.move_to_end(event_id)
        while len(self._seen) > self.index_size:
            self._seen.popitem(last=False)

    def seen(self, event_id: str) -> bool:
        return event_id in self._seen

    async def record(self, record: dict[str, Any]) -> bool:
        event_id = str(record["event_id"])
        if event_id in self._seen:
            return False
        self._remember(event_id)  # before any await: a concurrent duplicate is dropped
        self._size += self.journal.append(record)
        if self._size >= self.rotate_bytes:
            self.journal.rotate(self.rotated.path)
            self._size = 0
        self._index_dirty = True
        await self._write_index()
        return True

    def recent(self, count: int) -> list[dict[str, Any]]:
        """The newest `count` events, oldest first (from the end of the files)."""
        return tail_of([self.rotated, self.journal], count)

    async def close(self) -> None:
        await self._write_index()
        await asyncio.to_thread(self.journal.close)

    async def _write_index(self) -> None:
        """Write index.json off the loop; concurrent callers share one write."""
        async with self._index_lock:
            if not self._index_dirty:
                return
            self._index_dirty = False
            data = {"version": INDEX_VERSION, "ids": list(self._seen)}
            await asyncio.to_thread(write_json_atomic, self.index_path, data, indent=None)
