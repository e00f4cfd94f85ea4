"""Opening workspace files the way an attacker cannot redirect: beneath a root, no links.

The workspace is also the agent's playground: a prompt-injected run can create files in its
chat's folder, and before trust zones it could write almost anywhere. Every daemon-side read
or write of a workspace file (templates, agent roles, skills, memory and daily notes,
``HEARTBEAT.md``, ``.env``, attachments, consolidation appends, the file tools) therefore
goes through `Beneath`, which:

* resolves the path beneath one root directory and never follows a symbolic link, in any
  component: ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)``
  where the kernel has it (Linux 5.6+), otherwise one ``openat(O_NOFOLLOW)`` per component
  from the root's descriptor;
* refuses anything that is not a regular file (a FIFO would block the reader forever, a
  device could be anything), checked with ``fstat`` on the descriptor it opened, so swapping
  a path between a check and the open gains nothing;
* writes through the parent directory's descriptor (temp file, fsync, ``renameat``), so a
  write cannot land outside the directory that was checked either.

A refusal is a `RefusedPath` (an `OSError`, so readers that already tolerate a missing or
unreadable file degrade the same way) whose message says what was wrong in one sentence.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from soulflow.storage.atomic import write_all
from soulflow.storage.errors import StorageError

__all__ = ["Beneath", "DirEntry", "RefusedPath", "openat2_available", "relative_parts"]

_SYS_OPENAT2 = 437  # the same number on every architecture (unified syscall table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC | _O_NOFOLLOW


class RefusedPath(StorageError, OSError):
    """A workspace path the daemon will not open: a link, not a regular file, or not
    beneath the root. ``str()`` is one sentence naming the path."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


class _Openat2:
    """The raw syscall, probed once per process (ENOSYS on old kernels, EPERM under some
    seccomp filters: both mean "use the component-wise fallback")."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._works: bool | None = None
        self._libc: ctypes.CDLL | None = None

    def available(self) -> bool:
        with self._lock:
            if self._works is None:
                self._works = self._probe()
            return self._works

    def _probe(self) -> bool:
        if not hasattr(os, "O_DIRECTORY"):
            return False
        try:
            self._libc = ctypes.CDLL(None, use_errno=True)
            fd = self.call(os.open("/", _DIR_FLAGS), ".", _DIR_FLAGS, 0, close_dir=True)
        except (OSError, AttributeError):
            return False
        os.close(fd)
        return True

    def call(self, dir_fd: int, path: str, flags: int, mode: int, *,
             close_dir: bool = False) -> int:
        assert self._libc is not None
        how = _OpenHow(flags | _O_CLOEXEC, mode if flags & os.O_CREAT else 0, _RESOLVE)
        try:
            fd = self._libc.syscall(_SYS_OPENAT2, dir_fd, os.fsencode(path),
                                    ctypes.byref(how), ctypes.sizeof(how))
            err = ctypes.get_errno()
        finally:
            if close_dir:
                os.close(dir_fd)
        if fd < 0:
            raise OSError(err, os.strerror(err), path)
        return int(fd)


_OPENAT2 = _Openat2()


def openat2_available() -> bool:
    """Whether this kernel resolves with ``openat2`` (else the component-wise fallback)."""
    return _OPENAT2.available()


def relative_parts(path: str | PurePosixPath) -> tuple[str, ...]:
    """The components of a workspace-relative path, refusing what could climb out of it:
    an absolute path, ``..``, a NUL byte or an empty path. ``.`` parts are dropped."""
    text = str(path)
    if "\x00" in text:
        raise RefusedPath(errno.EINVAL, "the path contains a NUL character", text)
    pure = PurePosixPath(text)
    if pure.is_absolute():
        raise RefusedPath(errno.EINVAL, "the path is absolute; give it relative to the root",
                          text)
    parts = tuple(p for p in pure.parts if p != ".")
    if ".." in parts:
        raise RefusedPath(errno.EINVAL, "the path climbs with '..'", text)
    return parts


@dataclass(frozen=True, slots=True)
class DirEntry:
    """One entry of a directory listing, without following it: ``kind`` is ``file``,
    ``dir``, ``link`` or ``other``; ``st`` its ``lstat`` (None when it vanished), for a
    caller that must recognise a file by inode (a hard link to a secret under another
    name)."""

    name: str
    kind: str
    size: int
    st: os.stat_result | None = field(default=None, compare=False, repr=False)


class Beneath:
    """Files beneath one root directory, opened without following links.

    The root itself is the operator's choice (it may be reached through a link, e.g. a
    workspace under a symlinked home); it is resolved once, here. Everything below it is
    opened relative to the root's descriptor.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    # -- opening -------------------------------------------------------------------------

    def open_fd(self, rel: str | PurePosixPath, flags: int = os.O_RDONLY, mode: int = 0o644,
                ) -> int:
        """A descriptor for ``rel`` (``flags`` as for `os.open`); links refused anywhere."""
        parts = relative_parts(rel)
        root_fd = self._root_fd()
        try:
            if not parts:
                return os.dup(root_fd) if flags & _O_DIRECTORY else _refuse_root(rel)
            if _OPENAT2.available():
                return self._translate(rel, lambda: _OPENAT2.call(
                    root_fd, "/".join(parts), flags | _O_NOFOLLOW, mode))
            parent = self._walk_dirs(root_fd, parts[:-1], rel)
            try:
                return self._translate(rel, lambda: os.open(
                    parts[-1], flags | _O_NOFOLLOW | _O_CLOEXEC, mode, dir_fd=parent))
            finally:
                if parent != root_fd:
                    os.close(parent)
        finally:
            os.close(root_fd)

    def open_regular(self, rel: str | PurePosixPath, flags: int = os.O_RDONLY,
                     mode: int = 0o644) -> tuple[int, os.stat_result]:
        """`open_fd` for a regular file, and its ``fstat``. Opened non-blocking first, so a
        FIFO planted under the name cannot hang the reader, then checked on the descriptor."""
        fd = self.open_fd(rel, flags | _O_NONBLOCK | _O_NOCTTY, mode)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise RefusedPath(errno.EINVAL, f"{rel} is not a regular file", str(rel))
            if _O_NONBLOCK:
                os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def open_dir(self, rel: str | PurePosixPath) -> int:
        """A directory descriptor (for `os.scandir`, `os.fwalk` or ``dir_fd=`` calls)."""
        return self.open_fd(rel, os.O_RDONLY | _O_DIRECTORY)

    # -- reading -------------------------------------------------------------------------

    def read_bytes(self, rel: str | PurePosixPath, limit: int | None = None) -> bytes:
        """The file's bytes (at most ``limit``+1 of them when a limit is given, so a caller
        can tell "exactly at the limit" from "over it")."""
        fd, _st = self.open_regular(rel)
        with os.fdopen(fd, "rb") as handle:
            return handle.read() if limit is None else handle.read(limit + 1)

    def read_text(self, rel: str | PurePosixPath, limit: int | None = None) -> str:
        """UTF-8 text (undecodable bytes replaced); "" when the file does not exist."""
        try:
            data = self.read_bytes(rel, limit)
        except FileNotFoundError:
            return ""
        if limit is not None:
            data = data[:limit]
        return data.decode("utf-8", errors="replace")

    def read_tail(self, rel: str | PurePosixPath, max_bytes: int) -> tuple[bytes, int]:
        """The last ``max_bytes`` of the file and its whole size (b"", 0 when missing)."""
        try:
            fd, st = self.open_regular(rel)
        except FileNotFoundError:
            return b"", 0
        with os.fdopen(fd, "rb") as handle:
            if st.st_size > max_bytes:
                handle.seek(st.st_size - max_bytes)
            return handle.read(max_bytes), st.st_size

    def stat(self, rel: str | PurePosixPath) -> os.stat_result | None:
        """``lstat`` of ``rel`` reached without links (None when it or a parent is missing;
        a link in a parent is a `RefusedPath`)."""
        parts = relative_parts(rel)
        if not parts:
            return os.stat(self.root)
        try:
            parent = self.open_dir(PurePosixPath(*parts[:-1])) if parts[:-1] else \
                self._root_fd()
        except FileNotFoundError:
            return None
        try:
            return os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(parent)

    def is_file(self, rel: str | PurePosixPath) -> bool:
        st = self._quiet_stat(rel)
        return st is not None and stat.S_ISREG(st.st_mode)

    def is_dir(self, rel: str | PurePosixPath) -> bool:
        st = self._quiet_stat(rel)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def list_dir(self, rel: str | PurePosixPath = ".") -> list[DirEntry]:
        """The directory's entries sorted by name; links are listed as links, not followed."""
        fd = self.open_dir(rel)
        try:
            with os.scandir(fd) as it:
                entries = [_entry(item) for item in it]
        finally:
            os.close(fd)
        return sorted(entries, key=lambda e: e.name)

    def walk(self, rel: str | PurePosixPath = ".") -> Iterator[tuple[str, list[str], list[str]]]:
        """Top-down walk beneath ``rel``: ``(dir relative to the root, dirs, other names)``.

        Only real directories are descended into; a link (to a directory too) is listed
        with the other names, never followed. Prune ``dirs`` in place as with `os.walk`.
        Each directory is opened from its parent's descriptor, so a directory swapped for a
        link mid-walk is refused rather than followed.
        """
        parts = relative_parts(rel)
        start = PurePosixPath(*parts) if parts else PurePosixPath(".")
        pending: list[tuple[PurePosixPath, int | None]] = [(start, self.open_dir(start))]
        while pending:
            where, fd = pending.pop()
            if fd is None:
                try:
                    fd = self.open_dir(where)
                except OSError:
                    continue  # vanished, or swapped for a link, since its parent was listed
            try:
                with os.scandir(fd) as it:
                    listed = sorted(it, key=lambda item: item.name)
            finally:
                os.close(fd)
            dirs = [e.name for e in listed if e.is_dir(follow_symlinks=False)]
            others = [e.name for e in listed if not e.is_dir(follow_symlinks=False)]
            yield where.as_posix(), dirs, others
            pending.extend((where / name, None) for name in reversed(dirs))

    # -- writing -------------------------------------------------------------------------

    def make_dirs(self, rel: str | PurePosixPath, mode: int = 0o755) -> None:
        """Create ``rel`` and its parents beneath the root; a link on the way is refused."""
        parts = relative_parts(rel)
        fd = self._root_fd()
        try:
            for part in parts:
                try:
                    os.mkdir(part, mode, dir_fd=fd)
                except FileExistsError:
                    pass
                child = self._translate(rel, lambda part=part, fd=fd: os.open(
                    part, _DIR_FLAGS, dir_fd=fd))
                os.close(fd)
                fd = child
        finally:
            os.close(fd)

    def write_atomic(self, rel: str | PurePosixPath, data: bytes, *, mode: int = 0o644,
                     make_parents: bool = True) -> None:
        """Replace ``rel`` with ``data`` (temp file, fsync, rename in the same directory,
        fsync of the directory) without following a link anywhere. The final name may be
        an existing link: the rename replaces the link itself, never its target."""
        parts = relative_parts(rel)
        if not parts:
            _refuse_root(rel)
        if make_parents and parts[:-1]:
            self.make_dirs(PurePosixPath(*parts[:-1]))
        parent = self.open_dir(PurePosixPath(*parts[:-1])) if parts[:-1] else self._root_fd()
        tmp = f".{parts[-1][:80]}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
                         mode, dir_fd=parent)
            try:
                try:
                    os.fchmod(fd, mode)
                    write_all(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=parent)
                raise
            with contextlib.suppress(OSError):
                os.fsync(parent)
        finally:
            os.close(parent)

    def append_text(self, rel: str | PurePosixPath, text: str, *, header: str = "",
                    fsync: bool = False, mode: int = 0o644) -> None:
        """Append ``text`` in one ``O_APPEND`` write (``header`` first when this call creates
        the file). A link or a non-regular file under the name is refused, never written."""
        parts = relative_parts(rel)
        if parts[:-1]:
            self.make_dirs(PurePosixPath(*parts[:-1]))
        created = True
        try:
            fd, _st = self.open_regular(rel, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL,
                                        mode)
        except FileExistsError:
            created = False
            fd, _st = self.open_regular(rel, os.O_WRONLY | os.O_APPEND)
        try:
            write_all(fd, ((header if created else "") + text).encode("utf-8"))
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def rename(self, src: str | PurePosixPath, dst: str | PurePosixPath) -> None:
        """Move ``src`` to ``dst`` (both beneath the root; ``dst``'s parents are created):
        one ``rename(2)`` between the two parent directories' descriptors, so the move is
        atomic and a link under either name is moved as the link, never followed. An
        existing ``dst`` is `FileExistsError` (checked just before the rename: for the
        daemon's own moves, made while it holds the workspace lock and no tool runs)."""
        src_parts, dst_parts = relative_parts(src), relative_parts(dst)
        if not src_parts or not dst_parts:
            _refuse_root(src if not src_parts else dst)
        if dst_parts[:-1]:
            self.make_dirs(PurePosixPath(*dst_parts[:-1]))
        src_parent = self.open_dir(PurePosixPath(*src_parts[:-1])) if src_parts[:-1] else \
            self._root_fd()
        try:
            dst_parent = self.open_dir(PurePosixPath(*dst_parts[:-1])) if dst_parts[:-1] \
                else self._root_fd()
            try:
                try:
                    os.stat(dst_parts[-1], dir_fd=dst_parent, follow_symlinks=False)
                except FileNotFoundError:
                    pass
                else:
                    raise FileExistsError(errno.EEXIST, "the destination exists", str(dst))
                os.rename(src_parts[-1], dst_parts[-1], src_dir_fd=src_parent,
                          dst_dir_fd=dst_parent)
                for fd in (dst_parent, src_parent):
                    with contextlib.suppress(OSError):
                        os.fsync(fd)
            finally:
                os.close(dst_parent)
        finally:
            os.close(src_parent)

    def unlink(self, rel: str | PurePosixPath) -> bool:
        """Remove a file (or a link, never its target); False when it was not there."""
        parts = relative_parts(rel)
        if not parts:
            _refuse_root(rel)
        try:
            parent = self.open_dir(PurePosixPath(*parts[:-1])) if parts[:-1] else \
                self._root_fd()
        except FileNotFoundError:
            return False
        try:
            os.unlink(parts[-1], dir_fd=parent)
            return True
        except FileNotFoundError:
            return False
        finally:
            os.close(parent)

    # -- internals -----------------------------------------------------------------------

    def _root_fd(self) -> int:
        return os.open(self.root, _DIR_FLAGS & ~_O_NOFOLLOW)

    def _walk_dirs(self, root_fd: int, parts: tuple[str, ...], rel: object) -> int:
        fd = root_fd
        for part in parts:
            try:
                child = self._translate(rel, lambda part=part, fd=fd: os.open(
                    part, _DIR_FLAGS, dir_fd=fd))
            finally:
                if fd != root_fd:
                    os.close(fd)
            fd = child
        return fd

    def _quiet_stat(self, rel: str | PurePosixPath) -> os.stat_result | None:
        try:
            return self.stat(rel)
        except OSError:
            return None

    @staticmethod
    def _translate(rel: object, opener: object) -> int:
        """Run ``opener``; a link met on the way becomes a `RefusedPath` that says so."""
        try:
            return opener()  # type: ignore[operator]
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EXDEV, errno.EMLINK):
                raise RefusedPath(exc.errno, f"{rel} is or passes through a symbolic link "
                                  "(workspace files are opened without following links)",
                                  str(rel)) from None
            if exc.errno == errno.ENOTDIR:
                raise RefusedPath(exc.errno, f"{rel}: a part of the path is not a directory "
                                  "(or is a link)", str(rel)) from None
            raise


def _refuse_root(rel: object) -> int:
    raise RefusedPath(errno.EISDIR, "the path names the root directory itself", str(rel))


def _entry(item: os.DirEntry[str]) -> DirEntry:
    try:
        st = item.stat(follow_symlinks=False)
    except OSError:
        return DirEntry(item.name, "other", 0, None)
    if stat.S_ISLNK(st.st_mode):
        kind = "link"
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    elif stat.S_ISREG(st.st_mode):
        kind = "file"
    else:
        kind = "other"
    return DirEntry(item.name, kind, st.st_size if kind == "file" else 0, st)
