"""Workflow events on files: `runtime/events/events.jsonl`, one event per line, and
`runtime/events/index.json`, the ids of the last `index_size` events for dedupe.

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
from soulflow.storage.jsonl import JsonlFile

INDEX_VERSION = 1
DEFAULT_INDEX_SIZE = 10_000  # event ids remembered for dedupe


class FileWorkflowLog:
    """`WorkflowLog` in files: `events.jsonl` plus `index.json` (the last `index_size` ids) in
    one directory."""

    def __init__(self, directory: Path, *, index_size: int = DEFAULT_INDEX_SIZE,
                 fsync: str = "interval") -> None:
        self.index_size = index_size
        self.journal = JsonlFile(directory / "events.jsonl", fsync=fsync)
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
        for record in self.journal.tail(self.index_size):
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
        self.journal.append(record)
        self._index_dirty = True
        await self._write_index()
        return True

    def recent(self, count: int) -> list[dict[str, Any]]:
        return self.journal.tail(count)

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
