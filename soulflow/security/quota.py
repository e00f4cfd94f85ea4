"""Disk quotas of chat zones: per chat folder, per `exec` call, and the usage index.

A chat's folder (``chats/<zone>/``, see `soulflow.security.zones`) is the one place a run
writes. Two bounds hold there, each in bytes and in entries:

* **per chat** (``CHAT_DISK_QUOTA_MB``, ``CHAT_DISK_QUOTA_FILES``): what the folder may hold
  in all — working files, attachments, memory;
* **per exec call** (``EXEC_DISK_QUOTA_MB``, ``EXEC_DISK_QUOTA_FILES``): what one call may
  add to it (and to its private ``/tmp`` while it runs).

Bytes are apparent sizes (a sparse file counts in full), entries are files, folders and
links (`soulflow.storage.tree_usage`). A write that would take a folder over its quota is
refused before it happens (`ZoneQuotas.check_write`, for the file tools); an `exec` call is
measured before, during and after it runs (`ZoneQuotas.begin_exec` returns an `ExecBudget`),
and a call over a quota fails and is undone (`ExecBudget.settle`).

The last measured usage of every chat folder is kept in `UsageIndex`
(``runtime/quota/usage.json``), updated after each exec call and write, so ``soulflow
status`` and ``/api/state`` show it without walking a thousand folders per request.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soulflow.config.catalog import SETTINGS
from soulflow.security.errors import SecurityError
from soulflow.security.zones import ChatZone
from soulflow.storage.atomic import read_json
from soulflow.storage.background import BackgroundJsonFile
from soulflow.storage.beneath import Beneath
from soulflow.storage.tree_usage import (
    MAX_DEPTH,
    TreeScan,
    UndoReport,
    Usage,
    open_tree,
    scan,
    undo,
)

if TYPE_CHECKING:  # pragma: no cover
    from soulflow.config import Settings

__all__ = ["ExecBudget", "QuotaExceeded", "QuotaLimits", "UsageIndex", "ZoneQuotas",
           "ZoneUsage"]

log = logging.getLogger(__name__)

MB = 1024 * 1024
SNAPSHOT_LIMIT = 1_000_000
"""A chat folder with more entries than this is not snapshotted: its exec calls are refused."""
INDEX_FILE = Path("quota") / "usage.json"
NOTHING = Usage()
_INDEX_VERSION = 1


class QuotaExceeded(SecurityError):
    """A write or a call that would go (or went) over a quota; ``str()`` is the reason, one
    sentence a model or a person can act on."""


@dataclass(frozen=True, slots=True)
class QuotaLimits:
    """The four bounds, in bytes and entries."""

    chat_bytes: int
    chat_files: int
    exec_bytes: int
    exec_files: int

    @classmethod
    def from_settings(cls, settings: Settings) -> QuotaLimits:
        return cls(chat_bytes=int(settings["CHAT_DISK_QUOTA_MB"]) * MB,
                   chat_files=int(settings["CHAT_DISK_QUOTA_FILES"]),
                   exec_bytes=int(settings["EXEC_DISK_QUOTA_MB"]) * MB,
                   exec_files=int(settings["EXEC_DISK_QUOTA_FILES"]))

    @classmethod
    def defaults(cls) -> QuotaLimits:
        """The catalog's defaults (for a sandbox built without settings, as in tests)."""
        values = {s.name: s.parse(s.default) for s in SETTINGS if "DISK_QUOTA" in s.name}
        return cls(chat_bytes=values["CHAT_DISK_QUOTA_MB"] * MB,
                   chat_files=values["CHAT_DISK_QUOTA_FILES"],
                   exec_bytes=values["EXEC_DISK_QUOTA_MB"] * MB,
                   exec_files=values["EXEC_DISK_QUOTA_FILES"])

    def as_dict(self) -> dict[str, int]:
        return {"chat_bytes": self.chat_bytes, "chat_files": self.chat_files,
                "exec_bytes": self.exec_bytes, "exec_files": self.exec_files}


@dataclass(frozen=True, slots=True)
class ZoneUsage:
    """One chat folder's usage when it was last measured (``updated_at``: Unix time)."""

    zone: str
    bytes: int
    files: int
    updated_at: float

    def as_dict(self) -> dict[str, Any]:
        return {"zone": self.zone, "bytes": self.bytes, "files": self.files,
                "updated_at": round(self.updated_at, 3)}


class UsageIndex:
    """Each chat folder's last measured usage, persisted as one small JSON file written off
    the caller's thread (the latest value wins). Without a path it lives in memory only.

    It is a cache for display, never the basis of a decision: quota checks measure the
    folder itself, so an index lost in a crash only shows older numbers until the next
    write or call in that chat.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._zones: dict[str, ZoneUsage] = {}
        self._file = BackgroundJsonFile(path, indent=None) if path is not None else None
        if path is not None:
            self._zones = _load_index(path)

    def get(self, zone: str) -> ZoneUsage | None:
        with self._lock:
            return self._zones.get(zone)

    def put(self, zone: str, usage: Usage) -> None:
        with self._lock:
            self._zones[zone] = ZoneUsage(zone, usage.bytes, usage.files, time.time())
            snapshot = self._document()
            file = self._file
        if file is not None:
            file.save(snapshot)

    def all(self) -> list[ZoneUsage]:
        with self._lock:
            return list(self._zones.values())

    def close(self) -> None:
        """Write what is pending (shutdown); later changes stay in memory."""
        with self._lock:
            file, self._file = self._file, None
        if file is not None:
            file.close(timeout=10)

    def _document(self) -> dict[str, Any]:
        return {"version": _INDEX_VERSION,
                "zones": {u.zone: [u.bytes, u.files, round(u.updated_at, 3)]
                          for u in self._zones.values()}}


def _load_index(path: Path) -> dict[str, ZoneUsage]:
    data = read_json(path, {})
    zones = data.get("zones") if isinstance(data, dict) else None
    found: dict[str, ZoneUsage] = {}
    for name, row in (zones or {}).items():
        with contextlib.suppress(TypeError, ValueError):
            size, files, at = row
            found[str(name)] = ZoneUsage(str(name), int(size), int(files), float(at))
    return found


class ZoneQuotas:
    """The quotas of one workspace's chat folders and the index of their usage.

    Thread-safe; the daemon holds one and gives it to `exec` (through `CodeSandbox`) and to
    the file tools. Every method that touches a folder blocks: call it from a worker thread.
    """

    def __init__(self, limits: QuotaLimits | None = None, index: UsageIndex | None = None,
                 ) -> None:
        self.limits = limits or QuotaLimits.defaults()
        self.index = index or UsageIndex()

    @classmethod
    def from_settings(cls, settings: Settings) -> ZoneQuotas:
        return cls(QuotaLimits.from_settings(settings),
                   UsageIndex(settings.runtime_dir / INDEX_FILE))

    # -- the file tools --------------------------------------------------------------------

    def check_write(self, workspace: Path, zone: ChatZone, added_bytes: int,
                    added_files: int) -> None:
        """Refuse (`QuotaExceeded`) a write that adds ``added_bytes`` (may be negative: a
        shorter file) and ``added_files`` new entries (the file and any folder made for
        it) to ``zone``'s folder when that would take it over the chat quota; otherwise
        record the usage it will have. A write that adds nothing is never refused."""
        now = self.measure(workspace, zone, record=False)
        after = now + Usage(added_bytes, added_files)
        limits = self.limits
        if added_bytes > 0 and after.bytes > limits.chat_bytes:
            raise QuotaExceeded(
                f"{zone.rel}/ would hold {_mb(after.bytes)}, over this chat's disk quota of "
                f"{_mb(limits.chat_bytes)} (CHAT_DISK_QUOTA_MB); delete something there first")
        if added_files > 0 and after.files > limits.chat_files:
            raise QuotaExceeded(
                f"{zone.rel}/ would hold {after.files} files and folders, over this chat's "
                f"quota of {limits.chat_files} (CHAT_DISK_QUOTA_FILES); delete something "
                "there first")
        self.index.put(zone.name, after)

    def measure(self, workspace: Path, zone: ChatZone, *, record: bool = True) -> Usage:
        """The folder's usage now (zero when it does not exist yet), recorded in the index.
        The walk stops just past the chat's file quota: beyond it the exact number does
        not change any decision."""
        try:
            fd = open_tree(Beneath(workspace), zone.rel)
        except FileNotFoundError:
            return Usage()
        try:
            found = scan(fd, max_files=self.limits.chat_files)
        finally:
            os.close(fd)
        if record:
            self.index.put(zone.name, found.usage)
        return found.usage

    # -- exec ------------------------------------------------------------------------------

    def begin_exec(self, workspace: Path, zone: ChatZone) -> ExecBudget:
        """Create the chat's folder if needed, snapshot it and say what the call may add.

        The budget holds a descriptor of the folder (the sandbox binds exactly that folder,
        and it is measured through it): `ExecBudget.close` it. Refuses (`QuotaExceeded`) a
        folder that cannot be snapshotted whole.
        """
        beneath = Beneath(workspace)
        beneath.make_dirs(zone.rel)
        fd = open_tree(beneath, zone.rel)
        started = time.monotonic()
        try:
            before = scan(fd, keep_entries=True, max_files=SNAPSHOT_LIMIT)
            if not before.exact:
                raise QuotaExceeded(f"exec cannot run: {_unmeasurable(zone, before)}, so what "
                                    "a command adds there could not be measured or undone")
        except BaseException:
            os.close(fd)
            raise
        limits = self.limits
        allowed = Usage(max(0, min(limits.exec_bytes, limits.chat_bytes - before.usage.bytes)),
                        max(0, min(limits.exec_files, limits.chat_files - before.usage.files)))
        return ExecBudget(zone=zone, fd=fd, before=before, allowed=allowed, limits=limits,
                          index=self.index, snapshot_s=time.monotonic() - started)

    # -- status ----------------------------------------------------------------------------

    def summary(self, largest: int = 20) -> dict[str, Any]:
        """What `/api/state` shows: totals over every chat folder in the index, the quotas,
        and the ``largest`` folders by bytes."""
        rows = self.index.all()
        rows.sort(key=lambda u: (-u.bytes, -u.files, u.zone))
        return {"chats": len(rows), "bytes": sum(u.bytes for u in rows),
                "files": sum(u.files for u in rows), "quota": self.limits.as_dict(),
                "largest": [u.as_dict() for u in rows[:largest]]}

    def close(self) -> None:
        self.index.close()


@dataclass(slots=True)
class ExecBudget:
    """One exec call's view of its chat folder: the snapshot before it, what it may add,
    and the descriptor everything is measured through."""

    zone: ChatZone
    fd: int
    before: TreeScan
    allowed: Usage
    limits: QuotaLimits
    index: UsageIndex
    snapshot_s: float = 0.0  # how long the snapshot took: what one check will cost, about
    last_usage: Usage = NOTHING  # what the last `check` measured in the folder

    @property
    def file_size_limit(self) -> int:
        """``RLIMIT_FSIZE`` for the call: one byte more than it may add, so a command that
        tries to write past its budget leaves a measurable excess (and fails with the
        quota's reason) rather than a silently short file."""
        return self.allowed.bytes + 1

    def check(self, tmp: Usage = NOTHING) -> str | None:
        """Measure the folder now (stopping just past the budget) and say why the call is
        over, or None; ``tmp`` is what its private /tmp holds (while it runs)."""
        bound = self.before.usage.files + self.allowed.files - tmp.files
        now = scan(self.fd, max_files=max(bound, 0))
        self.last_usage = now.usage
        return self.excess(now, tmp)

    def excess(self, now: TreeScan, tmp: Usage = NOTHING) -> str | None:
        """Why ``now`` (plus ``tmp``) is over a quota, or None."""
        if not now.exact and (now.too_deep or now.unreadable):
            return _unmeasurable(self.zone, now)
        added = now.usage - self.before.usage + tmp
        limits, where = self.limits, f"{self.zone.rel}/"
        total = self.before.usage + added
        if added.files > self.allowed.files:
            more = "" if now.complete else " or more"  # the walk stopped past the bound
            if added.files > limits.exec_files:
                return (f"it created {added.files}{more} files and folders, over the "
                        f"per-call quota of {limits.exec_files} (EXEC_DISK_QUOTA_FILES)")
            return (f"{where} would hold {total.files}{more} files and folders, over "
                    f"this chat's quota of {limits.chat_files} (CHAT_DISK_QUOTA_FILES)")
        if added.bytes > self.allowed.bytes:
            if added.bytes > limits.exec_bytes:
                return (f"it wrote {_mb(added.bytes)}, over the per-call quota of "
                        f"{_mb(limits.exec_bytes)} (EXEC_DISK_QUOTA_MB)")
            return (f"{where} would hold {_mb(total.bytes)}, over this chat's disk quota of "
                    f"{_mb(limits.chat_bytes)} (CHAT_DISK_QUOTA_MB)")
        return None

    def settle(self, stopped_for: str | None = None) -> ExecOutcome:
        """After the sandbox is gone: measure the folder; when the call is over a quota (or
        was stopped for being over one), undo what it added (`tree_usage.undo`: new entries
        removed, grown files cut back to their old size) and say why. Records the usage."""
        bound = self.before.usage.files + self.allowed.files
        now = scan(self.fd, max_files=bound)
        reason = self.excess(now) or stopped_for
        report = None
        if reason is not None:
            report = undo(self.fd, self.before.entries)
            now = scan(self.fd, max_files=SNAPSHOT_LIMIT)
            log.info("exec in %s went over its disk quota (%s); undone: %d removed, %d cut "
                     "back", self.zone.rel, reason, report.removed, report.truncated)
        self.index.put(self.zone.name, now.usage)
        return ExecOutcome(reason, report, now.usage)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


@dataclass(frozen=True, slots=True)
class ExecOutcome:
    """How the call's disk use ended: ``reason`` is set when it went over a quota (its
    additions were then undone, see ``undone``); ``usage`` is the folder's afterwards."""

    reason: str | None
    undone: UndoReport | None
    usage: Usage

    def message(self) -> str:
        """The sentence the model reads."""
        return (f"exec went over a disk quota: {self.reason}. It was stopped, and what it "
                "added was undone (new files and folders removed, files it grew cut back to "
                "their old size).")


def _unmeasurable(zone: ChatZone, found: TreeScan) -> str:
    if found.too_deep:
        return f"{zone.rel}/ has folders nested deeper than {MAX_DEPTH} levels"
    if found.unreadable:
        return f"{zone.rel}/{found.unreadable[0]} cannot be read"
    return f"{zone.rel}/ holds more than {SNAPSHOT_LIMIT:,} files and folders"


def _mb(size: int) -> str:
    """A size for people: whole MB as such, bytes below one MB."""
    if size < MB:
        return f"{size:,} bytes"
    return f"{size / MB:.1f} MB" if size % MB else f"{size // MB} MB"
