"""How much a folder tree holds, what was in it, and undoing what was added since.

A chat's folder is written by code the daemon does not trust (the `exec` sandbox binds it
read-write), and the daemon measures it while that code may still run. So everything here
works from directory descriptors, never from path strings: each folder is opened relative to
its parent's descriptor with ``O_NOFOLLOW``, entries are ``lstat``-ed through the
descriptor, and a link is counted as a link, never followed. An entry that vanishes or is
swapped for a link between the listing and the open is skipped, not followed.

* `scan` measures a tree: **bytes** are the apparent sizes (``st_size``) of regular files and
  links, so a sparse file counts in full, and a file with several names counts once;
  **files** counts every entry below the root (files, folders, links, anything else). It can
  stop as soon as the file count passes a bound (a watcher does not need the rest), keeps a
  snapshot of every entry when asked, and refuses to go deeper than `MAX_DEPTH` folders (the
  scan then says so: nothing legitimate is nested that deep, and each level holds a
  descriptor open).
* `undo` puts a tree back to a snapshot, in the one way that never loses what was there
  before the snapshot and never keeps more than it: see its docstring for exactly what it
  removes and cuts.

A folder the daemon may not read (the untrusted code can ``chmod 000`` its own folders when
the daemon is not root) is made readable again by its owner, through an ``O_PATH``
descriptor so the mode change cannot be redirected by a link.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import PurePosixPath
from typing import NamedTuple

from soulflow.storage.beneath import Beneath

__all__ = ["MAX_DEPTH", "Entry", "EntryKind", "TreeScan", "UndoReport", "Usage", "open_tree",
           "scan", "undo"]

MAX_DEPTH = 256
"""Folders deeper than this are not entered (`TreeScan.too_deep`)."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_O_PATH = getattr(os, "O_PATH", 0)
_VANISHED = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)
_UNDO_PREFIX = ".soulflow-undo-"


class EntryKind(StrEnum):
    """What an entry is, as ``lstat`` sees it."""

    DIR = "dir"
    FILE = "file"
    LINK = "link"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class Usage:
    """Apparent bytes of files and links, and the number of entries (folders included)."""

    bytes: int = 0
    files: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.bytes + other.bytes, self.files + other.files)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.bytes - other.bytes, self.files - other.files)


class Entry(NamedTuple):
    """One entry of a snapshot: its kind, inode and apparent size (a tuple: a snapshot of
    a full chat folder holds tens of thousands)."""

    kind: EntryKind
    ino: int
    size: int


@dataclass(frozen=True, slots=True)
class TreeScan:
    """What `scan` found. ``complete`` is False when it stopped at ``max_files``;
    ``too_deep`` when some folder lies deeper than `MAX_DEPTH`; ``unreadable`` names the
    folders it could not list even after restoring their owner's permissions."""

    usage: Usage
    complete: bool = True
    too_deep: bool = False
    unreadable: tuple[str, ...] = ()
    entries: Mapping[str, Entry] = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        """Whether ``usage`` covers the whole tree."""
        return self.complete and not self.too_deep and not self.unreadable


@dataclass(frozen=True, slots=True)
class UndoReport:
    """What `undo` did: entries removed (a folder counts once) and files cut back."""

    removed: int = 0
    truncated: int = 0


def open_tree(beneath: Beneath, rel: str | PurePosixPath) -> int:
    """A descriptor of the folder ``rel`` beneath ``beneath``'s root (no link followed
    anywhere), made readable first if its owner locked it."""
    try:
        return beneath.open_dir(rel)
    except PermissionError:
        parts = PurePosixPath(rel).parts
        if not parts:
            raise
        parent = beneath.open_dir(PurePosixPath(*parts[:-1]) if parts[:-1] else ".")
        try:
            _restore_owner_access(parent, parts[-1], directory=True)
        finally:
            os.close(parent)
        return beneath.open_dir(rel)


_IFMT = 0o170000
_KINDS = {stat.S_IFDIR: EntryKind.DIR, stat.S_IFREG: EntryKind.FILE,
          stat.S_IFLNK: EntryKind.LINK}


def kind_of(mode: int) -> EntryKind:
    return _KINDS.get(stat.S_IFMT(mode), EntryKind.OTHER)


def scan(root_fd: int, *, keep_entries: bool = False, max_files: int | None = None,
         max_depth: int = MAX_DEPTH) -> TreeScan:
    """Measure the tree below the directory ``root_fd`` (which stays open and unchanged).

    ``max_files``: stop once more than this many entries were counted (``complete`` is then
    False and ``usage.files`` is just past the bound). ``keep_entries``: also return every
    entry, by path relative to the root (``a/b/c``), for a later `undo`.
    """
    total_bytes = files = 0
    linked: set[int] = set()
    entries: dict[str, Entry] = {}
    unreadable: list[str] = []
    too_deep = False
    for prefix, listing in _walk(root_fd, max_depth, unreadable):
        if listing is None:
            too_deep = True
            continue
        files += len(listing)
        for name, st in listing:  # the hot loop of every quota check: kept lean
            kind = _KINDS.get(st.st_mode & _IFMT, EntryKind.OTHER)
            size = 0
            if kind is EntryKind.FILE:
                if st.st_nlink == 1 or st.st_ino not in linked:
                    size = st.st_size
                    total_bytes += size
                if st.st_nlink > 1:
                    linked.add(st.st_ino)
                    size = st.st_size
            elif kind is EntryKind.LINK:
                size = st.st_size
                total_bytes += size
            if keep_entries:
                entries[f"{prefix}/{name}" if prefix else name] = Entry(kind, st.st_ino, size)
        if max_files is not None and files > max_files:
            return TreeScan(Usage(total_bytes, files), complete=False, too_deep=too_deep,
                            unreadable=tuple(unreadable), entries=entries)
    return TreeScan(Usage(total_bytes, files), too_deep=too_deep, unreadable=tuple(unreadable),
                    entries=entries)


def undo(root_fd: int, before: Mapping[str, Entry]) -> UndoReport:
    """Put the tree below ``root_fd`` back within what ``before`` (a `scan` snapshot) held.

    Exactly this, and nothing else:

    1. an entry whose path was not in ``before``, or whose kind changed (a file that is now
       a folder, a folder now a link...), is removed - a folder with everything in it. A
       file moved to a new name counts as new there;
    2. a regular file at a path that held a file before and is now larger is cut back to
       its old size; if that path now names another file that existed before (a hard link
       made since), the name is removed instead, so the other file is never cut;
    3. what was rewritten within its old size, and what was deleted, stays as it is.

    Afterwards the tree holds no more entries and no more bytes than ``before`` said.
    Only folders that existed before are entered, so the walk is as deep as ``before``.
    """
    old_inodes = {e.ino for e in before.values() if e.kind is EntryKind.FILE}
    removed = truncated = 0
    for prefix, fd, listing in _walk_fds(root_fd, before):
        for name, st in listing:
            path = _join(prefix, name)
            old = before.get(path)
            kind = kind_of(st.st_mode)
            if old is None or old.kind is not kind or _another_old_file(st, old, old_inodes):
                _remove(fd, name, kind, root_fd)
                removed += 1
            elif kind is EntryKind.FILE and st.st_size > old.size:
                _truncate(fd, name, old.size)
                truncated += 1
    return UndoReport(removed, truncated)


def _another_old_file(st: os.stat_result, old: Entry, old_inodes: set[int]) -> bool:
    """Whether a file path now names a different file that existed before (a hard link
    made since): cutting it back would cut that other file."""
    return (old.kind is EntryKind.FILE and st.st_ino != old.ino
            and st.st_ino in old_inodes)


# -- walking ------------------------------------------------------------------------------

Listing = list[tuple[str, os.stat_result]]


def _walk(root_fd: int, max_depth: int, unreadable: list[str]
          ) -> Iterator[tuple[str, Listing | None]]:
    """Depth-first ``(prefix, listing)`` of every folder; ``None`` for a folder too deep to
    enter. One descriptor per level of the current path is open at a time."""
    for prefix, _fd, listing in _walk_fds(root_fd, None, max_depth=max_depth,
                                          unreadable=unreadable):
        yield prefix, listing


def _walk_fds(root_fd: int, only: Mapping[str, Entry] | None, *, max_depth: int = MAX_DEPTH,
              unreadable: list[str] | None = None,
              ) -> Iterator[tuple[str, int, Listing | None]]:
    """The walk itself. ``only``: enter a folder only if it was a folder there (undo).
    The listing is taken whole before it is yielded, so a caller may change the folder."""
    top = os.dup(root_fd)
    stack: list[tuple[int, str, list[str]]] = []
    try:
        _owner_access(top)
        listing = _list_or_note(top, "", unreadable)
        stack.append((top, "", _subdirs(listing, "", only)))
        yield "", top, listing
        while stack:
            fd, prefix, pending = stack[-1]
            if not pending:
                os.close(fd)
                stack.pop()
                continue
            name = pending.pop()
            path = _join(prefix, name)
            if len(stack) >= max_depth:
                yield path, -1, None
                continue
            try:
                child = _open_dir(fd, name)
            except PermissionError:
                if unreadable is not None:
                    unreadable.append(path)
                continue
            if child is None:
                continue
            _owner_access(child)
            listing = _list_or_note(child, path, unreadable)
            stack.append((child, path, _subdirs(listing, path, only)))
            yield path, child, listing
    finally:
        for fd, _prefix, _pending in stack:
            with contextlib.suppress(OSError):
                os.close(fd)


def _subdirs(listing: Listing, prefix: str, only: Mapping[str, Entry] | None) -> list[str]:
    names = [name for name, st in listing if stat.S_ISDIR(st.st_mode)]
    if only is not None:
        names = [n for n in names if (old := only.get(_join(prefix, n))) is not None
                 and old.kind is EntryKind.DIR]
    names.sort(reverse=True)  # popped from the end: visited in name order
    return names


def _list_or_note(fd: int, path: str, unreadable: list[str] | None) -> Listing:
    try:
        return _list(fd)
    except PermissionError:
        if unreadable is not None:
            unreadable.append(path or ".")
        return []


def _list(fd: int) -> Listing:
    """Every entry of the open folder with its ``lstat``; entries gone meanwhile skipped."""
    found: Listing = []
    with os.scandir(fd) as it:
        for item in it:
            try:
                found.append((item.name, item.stat(follow_symlinks=False)))
            except FileNotFoundError:
                continue
    return found


def _open_dir(parent_fd: int, name: str) -> int | None:
    """The sub-folder ``name`` opened without following a link; None if it is gone or was
    swapped for something else. A folder its owner locked (``chmod 000``) is made readable
    first; one that stays unreadable raises `PermissionError`."""
    for attempt in (1, 2):
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except PermissionError:
            if attempt == 2:
                raise
            _restore_owner_access(parent_fd, name, directory=True)
        except OSError as exc:
            if exc.errno in _VANISHED:
                return None
            raise
    return None


def _owner_access(fd: int) -> None:
    """Give an open folder back ``u+rwx`` if its owner (the daemon, as the sandbox runs as
    the daemon's user) took it away: without it nothing in it can be read or removed."""
    with contextlib.suppress(OSError):
        mode = os.fstat(fd).st_mode
        if mode & 0o700 != 0o700:
            os.fchmod(fd, stat.S_IMODE(mode) | 0o700)


def _restore_owner_access(parent_fd: int, name: str, *, directory: bool) -> None:
    """``chmod u+rwx`` (``u+rw`` for a file) through an ``O_PATH`` descriptor of the entry
    itself, so a link swapped in between is never followed."""
    flags = _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
    try:
        fd = os.open(name, flags, dir_fd=parent_fd)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if stat.S_ISLNK(st.st_mode):
            return
        wanted = 0o700 if directory else 0o600
        with contextlib.suppress(OSError):
            os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) | wanted)
    finally:
        os.close(fd)


# -- changing -----------------------------------------------------------------------------

def _remove(parent_fd: int, name: str, kind: EntryKind, root_fd: int) -> None:
    if kind is EntryKind.DIR:
        _remove_dir(parent_fd, name, root_fd)
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=parent_fd)


def _remove_dir(parent_fd: int, name: str, root_fd: int) -> None:
    """Remove a folder and everything in it with at most `MAX_DEPTH` descriptors open: a
    sub-folder met at that depth is first moved up to the root (under a fresh name) and
    removed from there."""
    work = [(parent_fd, name)]
    while work:
        top_parent, top_name = work.pop()
        top = _open_dir(top_parent, top_name)
        if top is None:
            continue
        _owner_access(top)
        stack = [(top_parent, top_name, top)]
        try:
            while stack:
                parent, dirname, fd = stack[-1]
                sub = _clear_files(fd)
                if sub is None:
                    stack.pop()
                    os.close(fd)
                    with contextlib.suppress(FileNotFoundError):
                        os.rmdir(dirname, dir_fd=parent)
                    continue
                if len(stack) >= MAX_DEPTH:
                    moved = f"{_UNDO_PREFIX}{os.urandom(6).hex()}"
                    os.rename(sub, moved, src_dir_fd=fd, dst_dir_fd=root_fd)
                    work.append((root_fd, moved))
                    continue
                child = _open_dir(fd, sub)
                if child is not None:
                    _owner_access(child)
                    stack.append((fd, sub, child))
        finally:
            for _parent, _dirname, fd in stack:
                with contextlib.suppress(OSError):
                    os.close(fd)


def _clear_files(fd: int) -> str | None:
    """Unlink every non-folder in the open folder; return one sub-folder, or None if
    none is left."""
    with os.scandir(fd) as it:
        items = list(it)
    folder = None
    for item in items:
        if item.is_dir(follow_symlinks=False):
            folder = folder or item.name
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(item.name, dir_fd=fd)
    return folder


def _truncate(parent_fd: int, name: str, size: int) -> None:
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(name, flags, dir_fd=parent_fd)
    except PermissionError:
        _restore_owner_access(parent_fd, name, directory=False)
        fd = os.open(name, flags, dir_fd=parent_fd)
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.ftruncate(fd, size)
    finally:
        os.close(fd)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name
