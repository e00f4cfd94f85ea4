"""What the `exec` sandbox hides inside the workspace.

`exec` sees the workspace read-only (the operator zone) and its own chat folder read-write;
it never sees ``runtime/`` (every chat's sessions, the vault and, by default, the vault
key), ``chats/`` (the other chats' folders), any ``.env*`` file or folder at any depth (bot
tokens, API keys), the vault key wherever ``SOULFLOW_MASTER_KEY_FILE`` puts it, or a hard
link to the key or a root ``.env`` file under another name. Directories are covered by an
empty tmpfs and files by ``/dev/null``; the masks are mounts, so a symlink, ``..`` or
``/proc/self/root`` path to them lands on the mask too.

The fixed part of the list is `soulflow.security.protected.protected_paths` (the same one
the file tools refuse). The rest only a walk of the operator zone finds: `MaskScanner`.
It fails closed — it skips no directory (``.venv``, ``.git`` and ``node_modules`` are walked
like any other) and has no silent cap: past `MAX_SCANNED` entries, or on a directory it
cannot read, it refuses (`MaskScanRefused`) and the call does not run. ``runtime/`` and
``chats/`` are not walked: both are masked whole, and the run's own folder, mounted back over
the mask, holds only what that chat wrote.

A cold walk of a workspace holding this repository with its ``.venv`` costs tens of
milliseconds, so the result is cached per workspace and revalidated on each call by one
``lstat`` per directory: creating, removing or renaming an entry changes its directory's
mtime and ctime (a ctime cannot be set back), so an unchanged directory still holds the
same ``.env`` files and links. A directory changed within `RACY_NS` of its listing is
listed again next time, since a change in the same clock tick would not show.

Nothing under ``runtime/`` is shown back: a chat's attachments and diagrams live in its own
folder, which the sandbox mounts read-write.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from soulflow.agent.errors import AgentError
from soulflow.security.protected import RUNTIME_DIR, DevIno, protected_paths
from soulflow.security.zones import CHATS_DIR

if TYPE_CHECKING:  # pragma: no cover
    from soulflow.config import Settings

MAX_SCANNED = 200_000
"""Entries of the operator zone the scan checks at most; a bigger one refuses exec."""
RACY_NS = 1_000_000_000
_ENV_PREFIX = ".env"
_UNWALKED = frozenset({RUNTIME_DIR, CHATS_DIR})  # at the root, any letter case
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_VANISHED = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)


class MaskScanRefused(AgentError):
    """The operator zone could not be checked whole; ``str()`` says why, for the model."""


@dataclass(frozen=True, slots=True)
class _Listed:
    """One directory as last listed: its identity then, and what it held."""

    ident: tuple[int, int, int, int]  # dev, ino, ctime_ns, mtime_ns
    listed_at_ns: int
    entries: int
    subdirs: tuple[str, ...]
    found: tuple[str, ...]  # workspace-relative paths of entries to mask

    def still(self, st: os.stat_result) -> bool:
        """Whether the directory is unchanged since it was listed (and was listed late
        enough after its last change that a same-tick change cannot have been missed)."""
        dev, ino, ctime, mtime = self.ident
        return (st.st_ctime_ns == ctime and st.st_mtime_ns == mtime and st.st_ino == ino
                and st.st_dev == dev and self.listed_at_ns - ctime > RACY_NS)


@dataclass(slots=True)
class _Cache:
    key_inodes: frozenset[DevIno]
    dirs: dict[str, _Listed] = field(default_factory=dict)
    found: list[str] = field(default_factory=list)
    # every directory's path and (ctime, mtime, inode, device) when none of them is racy:
    # the fast check of an unchanged workspace, one lstat and one comparison per directory
    settled: list[tuple[str, tuple[int, int, int, int]]] | None = None

    def unchanged(self) -> bool:
        if self.settled is None:
            return False
        try:
            for path, ident in self.settled:
                st = os.lstat(path)
                if (st.st_ctime_ns, st.st_mtime_ns, st.st_ino, st.st_dev) != ident:
                    return False
        except OSError:
            return False
        return True


class MaskScanner:
    """Finds the ``.env*`` entries and key links of a workspace's operator zone, cached per
    workspace between calls; thread-safe (exec specs are built in worker threads)."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = MAX_SCANNED if limit is None else limit
        self._lock = threading.Lock()
        self._caches: dict[Path, _Cache] = {}

    def findings(self, workspace: Path, key_inodes: set[DevIno]) -> list[Path]:
        """Every ``.env*`` entry below the root and every hard link to one of
        ``key_inodes``, outside ``runtime/`` and ``chats/``. Raises `MaskScanRefused`."""
        workspace = Path(workspace).resolve()
        keys = frozenset(key_inodes)
        with self._lock:
            cache = self._caches.get(workspace)
            if cache is None or cache.key_inodes != keys:
                cache = _Cache(keys)
            if not cache.unchanged():
                try:
                    self._refresh(workspace, cache)
                except MaskScanRefused:
                    self._caches.pop(workspace, None)
                    raise
                self._caches[workspace] = cache
            found = list(cache.found)
        return [workspace / rel for rel in found]

    def _refresh(self, workspace: Path, cache: _Cache) -> None:
        key_numbers = {ino for _dev, ino in cache.key_inodes}
        fresh: dict[str, _Listed] = {}
        found: list[str] = []
        total = 0
        root = str(workspace)
        pending = [""]
        while pending:  # strings, not Paths: this loop runs once per directory per call
            rel = pending.pop()
            path = f"{root}/{rel}" if rel else root
            try:
                st = os.lstat(path)
            except OSError as exc:
                if exc.errno in _VANISHED:
                    continue
                raise _refused(rel, exc) from None
            if not stat.S_ISDIR(st.st_mode):
                continue  # swapped for a file or link since its parent was listed
            old = cache.dirs.get(rel)
            listed = old if old is not None and old.still(st) else \
                self._list(path, rel, cache.key_inodes, key_numbers)
            if listed is None:
                continue
            fresh[rel] = listed
            found += listed.found
            total += listed.entries
            if total > self.limit:
                raise MaskScanRefused(
                    f"the workspace holds more than {self.limit:,} files and folders outside "
                    "chats/ and runtime/, too many to check for .env files and links to the "
                    "vault key before each call, so exec does not run; the operator can "
                    "move large trees out of the workspace")
            pending += listed.subdirs
        cache.dirs, cache.found = fresh, found
        settled = [(f"{root}/{rel}" if rel else root, (d.ident[2], d.ident[3], d.ident[1],
                                                       d.ident[0]))
                   for rel, d in fresh.items() if d.listed_at_ns - d.ident[2] > RACY_NS]
        cache.settled = settled if len(settled) == len(fresh) else None

    @staticmethod
    def _list(path: str, rel: str, keys: frozenset[DevIno], key_numbers: set[int],
              ) -> _Listed | None:
        listed_at = time.time_ns()
        try:
            fd = os.open(path, _DIR_FLAGS)
        except OSError as exc:
            if exc.errno in _VANISHED:
                return None
            raise _refused(rel, exc) from None
        try:
            ident = _ident(os.fstat(fd))
            subdirs: list[str] = []
            found: list[str] = []
            entries = 0
            with os.scandir(fd) as it:
                for item in it:
                    entries += 1
                    child = f"{rel}/{item.name}" if rel else item.name
                    if not rel and item.name.casefold() in _UNWALKED:
                        continue  # masked whole
                    is_dir = item.is_dir(follow_symlinks=False)
                    if item.name.casefold().startswith(_ENV_PREFIX):
                        found.append(child)  # a .env* folder is masked whole, not entered
                    elif is_dir:
                        subdirs.append(child)
                    elif item.inode() in key_numbers and _is_link_to(item, keys):
                        found.append(child)
        except OSError as exc:
            raise _refused(rel, exc) from None
        finally:
            os.close(fd)
        return _Listed(ident, listed_at, entries, tuple(subdirs), tuple(found))


def masked_paths(workspace: Path, settings: Settings | None = None, *,
                 scanner: MaskScanner | None = None) -> list[Path]:
    """Existing real paths the sandbox must hide; directories first, and nothing that lies
    inside an already hidden directory. Raises `MaskScanRefused` when the operator zone
    cannot be checked whole."""
    workspace = Path(workspace).resolve()
    protected = protected_paths(workspace, settings)
    candidates = protected.mask_paths()
    candidates += [p for p in _unwalked(workspace) if p not in candidates]
    candidates += (scanner or MaskScanner()).findings(workspace, protected.key_inodes())
    reals = {real for real in map(_real, candidates) if real is not None}
    dirs = sorted(p for p in reals if p.is_dir())
    files = sorted(p for p in reals if not p.is_dir())
    kept_dirs = [d for d in dirs if not any(d != o and d.is_relative_to(o) for o in dirs)]
    kept_files = [f for f in files if not any(f.is_relative_to(d) for d in kept_dirs)]
    return kept_dirs + kept_files


def _unwalked(workspace: Path) -> list[Path]:
    """``runtime`` and ``chats`` at the root in whatever letter case they exist."""
    try:
        return [workspace / name for name in os.listdir(workspace)
                if name.casefold() in _UNWALKED]
    except OSError:
        return []


def _real(path: Path) -> Path | None:
    """The resolved path if it exists: a mask must cover the real file, not a symlink to it."""
    try:
        return path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None


def _ident(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_ctime_ns, st.st_mtime_ns)


def _is_link_to(item: os.DirEntry[str], keys: frozenset[DevIno]) -> bool:
    try:
        st = item.stat(follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) in keys


def _refused(rel: str, exc: OSError) -> MaskScanRefused:
    where = rel or "the workspace root"
    return MaskScanRefused(
        f"exec does not run: {where} could not be checked for .env files and links to the "
        f"vault key ({exc.strerror or exc})")
