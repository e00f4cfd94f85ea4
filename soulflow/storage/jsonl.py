"""Append-only JSONL journals, and their rotation.

Each record is one `os.write` of one line on an `O_APPEND` descriptor, so concurrent appenders
(tasks, threads, even processes) never interleave bytes, and a `kill -9` leaves at most one torn
line at the end. That torn line is skipped and cut off on load instead of failing the boot.
Durability against power loss is a policy: `always` fsyncs every record, `interval` leaves it
to a periodic `sync()` (a process crash loses nothing either way: the kernel holds the bytes).

A file that would grow with every message is capped by rotation: `rotate(target)` renames the
whole file to `target` (one atomic rename, made durable) and the next append starts a new one,
so each file keeps the rules above and a reader of the tail reads the newest file first
(`tail_of`). What is rotated out is kept, never cut: the owner decides how many to keep.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from soulflow.storage.atomic import fsync_dir, write_all, write_bytes_atomic

log = logging.getLogger(__name__)

FSYNC_POLICIES = ("always", "interval", "never")
_TAIL_BLOCK = 64 * 1024
R = TypeVar("R")


def encode_record(record: dict[str, Any]) -> bytes:
    """One compact line; `ensure_ascii=False` keeps non-English text readable in the file."""
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def _decode_line(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


class JsonlFile:
    """One append-only JSONL file with torn-line repair and reads from the end."""

    def __init__(self, path: Path, *, fsync: str = "interval") -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync policy must be one of {FSYNC_POLICIES}, got {fsync!r}")
        self.path = path
        self.fsync_policy = fsync
        self._fd: int | None = None
        self._dirty = False
        self._lock = threading.Lock()
        self._repaired = False

    # -- writing -------------------------------------------------------------------------

    def _descriptor(self) -> int:
        if self._fd is None:
            if not self._repaired:
                self.repair()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_SH)  # tells repair() in other processes we write here
            self._fd = fd
        return self._fd

    def append(self, record: dict[str, Any]) -> int:
        """Append one record with a single write call; returns the bytes written."""
        return self.append_many([record])

    def append_many(self, records: Iterable[dict[str, Any]]) -> int:
        """Append several records in one write (still whole lines, never a partial record);
        returns the bytes written."""
        data = b"".join(encode_record(r) for r in records)
        if not data:
            return 0
        with self._lock:
            fd = self._descriptor()
            write_all(fd, data)
            if self.fsync_policy == "always":
                os.fsync(fd)
            else:
                self._dirty = True
        return len(data)

    def sync(self) -> None:
        """Flush appended records to disk (called periodically, from a worker thread).

        The fsync runs on a duplicate descriptor outside the lock, so appends from the event
        loop never wait for the disk.
        """
        with self._lock:
            if self._fd is None or not self._dirty:
                return
            fd = os.dup(self._fd)
            self._dirty = False
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        with self._lock:
            self._flush_and_close()

    def _flush_and_close(self) -> None:
        """Close the open descriptor, synced first if it has unsynced appends (lock held)."""
        if self._fd is not None:
            if self._dirty and self.fsync_policy != "never":
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            self._dirty = False

    def rewrite(self, records: Iterable[dict[str, Any]]) -> None:
        """Replace the whole file atomically (compaction)."""
        data = b"".join(encode_record(r) for r in records)
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            write_bytes_atomic(self.path, data)
            self._dirty = False
            self._repaired = True

    def rotate(self, target: Path) -> bool:
        """Rename the file to `target` (replacing it), flushed first; the next append starts a
        new file. False if there was nothing to rotate."""
        with self._lock:
            self._flush_and_close()
            try:
                os.replace(self.path, target)
            except FileNotFoundError:
                return False
            fsync_dir(self.path.parent)
            self._repaired = True  # the new file starts empty
            return True

    # -- reading -------------------------------------------------------------------------

    def repair(self) -> int:
        """Cut a torn last line (no trailing newline) off the file; returns bytes removed.

        Cutting is only safe when no other process is appending (its line may be half
        visible); writers hold a shared lock, so when the exclusive lock is not free the torn
        end is closed with a newline instead (it is then skipped as an unreadable line).
        """
        self._repaired = True
        try:
            handle = open(self.path, "rb+")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return 0
        with handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                return 0
            handle.seek(size - 1)
            if handle.read(1) == b"\n":
                return 0
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._close_line()
                return 0
            size = os.fstat(handle.fileno()).st_size
            end = self._last_newline_end(handle, size)
            handle.truncate(end)
        removed = size - end
        log.warning("%s: cut a torn last line of %d bytes (left by an interrupted write)",
                    self.path, removed)
        return removed

    def _close_line(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"\n")
        finally:
            os.close(fd)

    @staticmethod
    def _last_newline_end(handle: Any, size: int) -> int:
        """Offset just after the last newline in the file, or 0 if there is none."""
        position = size
        while position > 0:
            start = max(0, position - _TAIL_BLOCK)
            handle.seek(start)
            block = handle.read(position - start)
            index = block.rfind(b"\n")
            if index >= 0:
                return start + index + 1
            position = start
        return 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.iter_records()

    def iter_records(self) -> Iterator[dict[str, Any]]:
        """Every readable record in order; unreadable lines are logged and skipped."""
        if not self._repaired:
            self.repair()
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 - closed in finally of the generator
        except FileNotFoundError:
            return
        with handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                record = _decode_line(line)
                if record is None:
                    log.warning("%s:%d: skipped an unreadable line", self.path, number)
                    continue
                yield record

    def read_all(self) -> list[dict[str, Any]]:
        return list(self.iter_records())

    def tail(self, count: int) -> list[dict[str, Any]]:
        """The last `count` records, read backwards in blocks: cost depends on `count` only."""
        if count <= 0:
            return []
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 - closed by the with below
        except FileNotFoundError:
            return []
        with handle:
            position = handle.seek(0, os.SEEK_END)
            chunks: list[bytes] = []
            newlines = 0
            while position > 0 and newlines <= count:
                start = max(0, position - _TAIL_BLOCK)
                handle.seek(start)
                block = handle.read(position - start)
                chunks.append(block)
                newlines += block.count(b"\n")
                position = start
        lines = b"".join(reversed(chunks)).split(b"\n")
        if position > 0:
            lines = lines[1:]  # the first piece may be the end of an earlier line
        records: list[dict[str, Any]] = []
        for line in reversed(lines):
            if line.strip() and (record := _decode_line(line)) is not None:
                records.append(record)
                if len(records) == count:
                    break
        records.reverse()
        return records

    def size_bytes(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0


def tail_of(files: Sequence[JsonlFile], count: int) -> list[dict[str, Any]]:
    """The last `count` records over `files` (oldest file first, e.g. a rotated file and the
    current one), reading each from its end and only as far back as needed."""
    records: list[dict[str, Any]] = []
    for file in reversed(files):
        if len(records) >= count:
            break
        records[:0] = file.tail(count - len(records))
    return records


def dated_name(path: Path) -> Path:
    """A free `<stem>-<UTC date and time>[-n]<suffix>` beside `path`, for a rotated file."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    target = path.with_name(f"{path.stem}-{stamp}{path.suffix}")
    counter = 1
    while target.exists():
        target = path.with_name(f"{path.stem}-{stamp}-{counter}{path.suffix}")
        counter += 1
    return target


class RecordLog(Generic[R]):
    """An append-only JSONL log of typed records with a live count (the two dead-letter
    queues): `parse` turns a line back into a record (TypeError/ValueError: skipped).

    With `max_entries`, the log holds at most that many: the append that fills it renames the
    file to a dated one beside it (`outbound-20261126-171500.jsonl`) and logs where, and the
    next append starts a new file. Nothing is dropped; the dated files are the operator's to
    read (they are plain JSONL) and delete."""

    def __init__(self, path: Path, parse: Callable[[dict[str, Any]], R], *,
                 fsync: str = "always", max_entries: int | None = None) -> None:
        self._file = JsonlFile(path, fsync=fsync)
        self._parse = parse
        self._max_entries = max_entries
        self._count = len(self.entries())

    def _append(self, record: dict[str, Any]) -> None:
        self._file.append(record)
        self._count += 1
        if self._max_entries is not None and self._count >= self._max_entries:
            target = dated_name(self._file.path)
            if self._file.rotate(target):
                log.warning("%s reached its cap of %d entries: moved them to %s (kept, not "
                            "listed any more); new entries start a new file", self._file.path,
                            self._max_entries, target)
            self._count = 0

    def _parse_all(self, records: Iterable[dict[str, Any]]) -> list[R]:
        parsed = []
        for record in records:
            try:
                parsed.append(self._parse(record))
            except (TypeError, ValueError):
                continue
        return parsed

    def entries(self) -> list[R]:
        return self._parse_all(self._file.iter_records())

    def recent(self, limit: int = 20) -> list[R]:
        """The last `limit` entries, read from the end of the file (the dashboard polls)."""
        return self._parse_all(self._file.tail(limit))

    def _keep(self, kept: list[dict[str, Any]]) -> None:
        self._file.rewrite(kept)
        self._count = len(kept)

    def purge(self) -> int:
        removed = len(self.entries())
        self._keep([])
        return removed

    def __len__(self) -> int:
        return self._count

    def close(self) -> None:
        self._file.close()
