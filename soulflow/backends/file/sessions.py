"""Conversation history on files: `runtime/sessions/<key>.jsonl`, a metadata line, then one
message per line.

Appends are single writes, the last N messages are read from the end of the file (a long-lived
chat never slows down), and a range read streams the file instead of loading it.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from soulflow.backends.base import METADATA_TYPE, SessionInfo
from soulflow.storage.jsonl import JsonlFile

TAIL_CACHE = 64  # messages per open session kept in memory: the agent reads the tail each turn
MAX_OPEN = 256  # sessions kept open (file and tail); the least recently used is closed


def session_filename(key: str) -> str:
    """A reversible, filesystem-safe name for any session key (keys hold `:` and user ids)."""
    return quote(key, safe="") + ".jsonl"


class FileSessionStore:
    """`SessionStore` in files: append-only message history, one JSONL file per session key."""

    def __init__(self, directory: Path, *, fsync: str = "interval", max_open: int = MAX_OPEN,
                 redact: Callable[[str], str] | None = None) -> None:
        self.directory = directory
        self._redact = redact
        self._fsync = fsync
        self._max_open = max_open
        self._files: OrderedDict[str, JsonlFile] = OrderedDict()
        self._tails: dict[str, deque[dict[str, Any]]] = {}

    def _file(self, key: str) -> JsonlFile:
        journal = self._files.get(key)
        if journal is None:
            journal = JsonlFile(self.directory / session_filename(key), fsync=self._fsync)
            self._files[key] = journal
            while len(self._files) > self._max_open:
                old_key, old = self._files.popitem(last=False)
                old.close()
                self._tails.pop(old_key, None)
        else:
            self._files.move_to_end(key)
        return journal

    def append(self, key: str, message: dict[str, Any]) -> None:
        """Append one message (`role`, `content`, …); the file starts with a metadata line."""
        journal = self._file(key)
        record = {"at": time.time(), **message}
        if self._redact is not None and isinstance(record.get("content"), str):
            record["content"] = self._redact(record["content"])  # a last net behind sealing
        tail = self._tail(key, journal)
        if not tail and journal.size_bytes() == 0:
            meta = {"_type": METADATA_TYPE, "key": key, "created_at": record["at"]}
            journal.append_many([meta, record])
        else:
            journal.append(record)
        tail.append(record)

    def _tail(self, key: str, journal: JsonlFile) -> deque[dict[str, Any]]:
        tail = self._tails.get(key)
        if tail is None:
            records = journal.tail(TAIL_CACHE + 1)
            tail = deque((r for r in records if r.get("_type") != METADATA_TYPE),
                         maxlen=TAIL_CACHE)
            self._tails[key] = tail
        return tail

    def last(self, key: str, count: int) -> list[dict[str, Any]]:
        """The last `count` messages, oldest first (from memory when `count` is small)."""
        if count <= 0:
            return []
        journal = self._file(key)
        if count <= TAIL_CACHE:
            return list(itertools.islice(reversed(self._tail(key, journal)), count))[::-1]
        records = journal.tail(count + 1)
        return [r for r in records if r.get("_type") != METADATA_TYPE][-count:]

    def range(self, key: str, start: int, end: int | None = None) -> list[dict[str, Any]]:
        """Messages `start` (inclusive) to `end` (exclusive), counted from the first message."""
        messages = (r for r in self._file(key) if r.get("_type") != METADATA_TYPE)
        return list(itertools.islice(messages, start, end))

    def metadata(self, key: str) -> dict[str, Any] | None:
        for record in self._file(key):
            return record if record.get("_type") == METADATA_TYPE else None
        return None

    def list_sessions(self, limit: int | None = None) -> list[SessionInfo]:
        """Every session (or the `limit` latest), most recently updated first."""
        if not self.directory.is_dir():
            return []
        infos = []
        for path in self.directory.glob("*.jsonl"):
            stat = path.stat()
            key = unquote(path.name[: -len(".jsonl")])
            infos.append(SessionInfo(key, path, stat.st_size, stat.st_mtime))
        infos.sort(key=lambda info: info.updated_at, reverse=True)
        return infos if limit is None else infos[:limit]

    async def settle(self, key: str | None = None) -> None:
        """Nothing on its way: each append is written before it returns."""

    async def preload(self, key: str, chat_key: str) -> None:
        """Nothing to read ahead: the tail is read from the local file (and cached)."""

    def sync(self) -> None:
        for journal in list(self._files.values()):
            journal.sync()

    def close(self) -> None:
        for journal in self._files.values():
            journal.close()
        self._files.clear()
        self._tails.clear()
